/* benchmarks/cortex_m4's program: one inference of one model on QEMU's mps2-an386 board (a Cortex-M4), run with
 *   qemu-system-arm -M mps2-an386 -nographic -semihosting -icount shift=7 -kernel app.elf
 * The model comes from call.h, which bench.py writes for each model and tool: IN_SIZE and OUT_SIZE (floats),
 * RUN(x, y) (one inference, returns a status; 0 in the baseline app, which calls no model) and, for ksbuild,
 * WORKSPACE_NEEDED() (the bytes the package asks for; 0 for the others, which print the same line: the line's
 * string and printf call are in every program, so the baseline takes them out of each model's flash).
 *
 * Printed (bench.py parses it): the outputs with 9 significant digits, and
 * - "ticks" around RUN and "empty" around nothing: CMSDK APB timer 0 counts down at 25 MHz (40 ns a tick) and
 *   with -icount shift=7 QEMU advances the virtual clock 128 ns per instruction, so instructions = ticks / 3.2;
 * - "loop": the same count around a loop of known length (2 instructions per iteration), the method's check;
 * - "stack": bytes below main's stack pointer that RUN wrote, found by painting the free stack beforehand. */
#include <stdint.h>
#include <stdio.h>

#include "call.h"

#ifndef WORKSPACE_NEEDED
#define WORKSPACE_NEEDED() 0u
#endif

#define TIMER0 ((volatile uint32_t *)0x40000000u) /* CTRL, VALUE, RELOAD */
#define WINDOW (4096u * 1024u) /* bytes of stack painted below main's (newlib's crt0 puts it at the top of the
                                 16 MiB PSRAM from semihosting's HEAPINFO, not where mps2_an386.ld says) */
#define PAINT 0xA5A5A5A5u
#define LOOP_ITERATIONS 100000u

static float x[IN_SIZE];
static float y[OUT_SIZE];

static uint32_t now(void) { return TIMER0[1]; }

__attribute__((noinline)) static void spin(uint32_t n) {
    __asm__ volatile("1: subs %0, %0, #1\n\tbne 1b" : "+r"(n) : : "cc");
}

__attribute__((noinline)) static void paint(uint32_t *from, uint32_t *to) {
    volatile uint32_t *p = from;
    while (p < to) {
        *p++ = PAINT;
    }
}

static uint32_t *lowest_written(uint32_t *bottom) {
    const volatile uint32_t *p = bottom;
    while (*p == PAINT) {
        ++p;
    }
    return (uint32_t *)p;
}

int main(void) {
    uint32_t i, t0, t1, empty, loop, ticks, sp;
    int status;
    for (i = 0; i < IN_SIZE; ++i) {
        x[i] = (float)((i * 37u) % 101u) / 50.0f - 1.0f;
    }
    TIMER0[2] = 0xFFFFFFFFu;
    TIMER0[1] = 0xFFFFFFFFu;
    TIMER0[0] = 1u;
    t0 = now();
    t1 = now();
    empty = t0 - t1;
    t0 = now();
    spin(LOOP_ITERATIONS);
    t1 = now();
    loop = t0 - t1;
    __asm__ volatile("mov %0, sp" : "=r"(sp));
    paint((uint32_t *)(sp - WINDOW), (uint32_t *)(sp - 64u));
    t0 = now();
    status = RUN(x, y);
    t1 = now();
    ticks = t0 - t1;
    sp -= (uint32_t)lowest_written((uint32_t *)(sp - WINDOW));
    for (i = 0; i < OUT_SIZE; ++i) {
        printf("y %.9g\n", (double)y[i]);
    }
    printf("workspace %lu\n", (unsigned long)WORKSPACE_NEEDED());
    printf("ticks %lu\nempty %lu\nloop %lu %lu\nstack %lu\nstatus %d\n", (unsigned long)ticks, (unsigned long)empty,
           (unsigned long)loop, (unsigned long)(2u * LOOP_ITERATIONS), (unsigned long)sp, status);
    return status;
}
