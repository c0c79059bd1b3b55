/* Reset and fault handling for QEMU's mps2-an386 board (a Cortex-M4), so that tests/cross/baremetal_c
 * runs under qemu-system-arm -M mps2-an386 -semihosting. The core starts at the vector table at
 * address 0: the initial stack pointer, then the reset handler. Newlib's semihosting startup
 * (rdimon-crt0: _start) does the rest: it zeroes .bss, opens stdio on the host, calls main and
 * exit(main's status), which QEMU returns as its own exit status. */
#include <stdint.h>

typedef void (*handler)(void);

struct vector_table {
    uint32_t *initial_sp;
    handler handlers[15]; /* reset, NMI, hard fault, ..., SysTick: the Armv7-M system exceptions */
};

extern uint32_t __stack_top; /* mps2_an386.ld */
extern void _start(void);    /* newlib's crt0 */

void Reset_Handler(void);
void Fault_Handler(void);

void Reset_Handler(void) {
#if defined(__ARM_FP)
    /* CPACR (0xE000ED88): full access to coprocessors 10 and 11, the FPU. Code built for the
     * hard-float ABI faults on its first floating-point instruction without it. */
    *(volatile uint32_t *)0xE000ED88u |= 0xFu << 20;
    __asm__ volatile("dsb\n\tisb" ::: "memory");
#endif
    _start();
}

/* Any other exception ends the run: semihosting SYS_EXIT (0x18) with the reason
 * ADP_Stopped_RunTimeErrorUnknown (0x20023), so QEMU exits with a failure instead of hanging. */
void Fault_Handler(void) {
    register uint32_t op __asm__("r0") = 0x18u;
    register uint32_t reason __asm__("r1") = 0x20023u;
    __asm__ volatile("bkpt 0xab" : : "r"(op), "r"(reason) : "memory");
    for (;;) {
    }
}

__attribute__((section(".vectors"), used)) static const struct vector_table vectors = {
    &__stack_top,
    {Reset_Handler, Fault_Handler, Fault_Handler, Fault_Handler, Fault_Handler, Fault_Handler, Fault_Handler,
     Fault_Handler, Fault_Handler, Fault_Handler, Fault_Handler, Fault_Handler, Fault_Handler, Fault_Handler,
     Fault_Handler}};
