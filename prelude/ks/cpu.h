// ks/cpu.h — which x86-64 instruction set level this CPU runs, for the exports that choose a build at
// run time (the generated <package>_dispatch.cpp).
//
// A package built for the x86-64 baseline (`[build] cpu` empty, the default) compiles its kernels three
// times: for the baseline (SSE2), for x86-64-v3 (AVX2, FMA, BMI1/2, F16C, LZCNT, MOVBE) and for
// x86-64-v4 (AVX-512 F, BW, CD, DQ, VL). Each export calls the build for the highest level cpu_level()
// reports. The levels are those of the x86-64 psABI (x86-64-ABI 1.0, section 3.1.1); a level counts only
// when the operating system saves the registers it uses (XCR0, read with xgetbv).
//
// Runtime-free: the cpuid and xgetbv instructions, no library call; the answer is computed once and
// kept in a plain int (two threads asking at once both compute the same answer).
// KS_CPU_LEVEL_MAX (0, 1 or 2; the generated CMake's cache variable of that name) caps the level, to
// run and test a lower level's build on a newer CPU.
#ifndef KS_CPU_H
#define KS_CPU_H

#include <cstdint>

#include "namespace.h"

namespace ks {
inline namespace KS_KERNELS KS_HIDDEN {
namespace cpu {

constexpr int baseline = 0;   // x86-64: SSE2
constexpr int x86_64_v3 = 1;  // AVX2 and FMA
constexpr int x86_64_v4 = 2;  // AVX-512

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
struct regs {
    uint32_t a, b, c, d;
};

inline regs cpuid(uint32_t leaf, uint32_t sub = 0) {
    regs r;
    __asm__ __volatile__("cpuid" : "=a"(r.a), "=b"(r.b), "=c"(r.c), "=d"(r.d) : "a"(leaf), "c"(sub));
    return r;
}

// The register states the operating system saves on a context switch (XCR0).
inline uint64_t saved_states() {
    uint32_t lo, hi;
    __asm__ __volatile__("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return (uint64_t(hi) << 32) | lo;
}

constexpr bool has(uint32_t word, uint32_t bits) {
    return (word & bits) == bits;
}

// The level from the cpuid feature bits (Intel SDM vol. 2A, CPUID; AMD APM vol. 3, appendix E).
inline int detect() {
    const uint32_t top = cpuid(0).a, top_ext = cpuid(0x80000000u).a;
    if (top < 7 || top_ext < 0x80000001u) {
        return baseline;
    }
    const regs one = cpuid(1), seven = cpuid(7, 0), ext = cpuid(0x80000001u);
    // leaf 1 ecx: SSE3 0, SSSE3 9, FMA 12, CX16 13, SSE4.1 19, SSE4.2 20, MOVBE 22, POPCNT 23, OSXSAVE 27, AVX 28,
    // F16C 29; leaf 7 ebx: BMI1 3, AVX2 5, BMI2 8; leaf 0x80000001 ecx: LAHF 0, LZCNT 5
    const uint32_t v3_ecx = 1u << 0 | 1u << 9 | 1u << 12 | 1u << 13 | 1u << 19 | 1u << 20 | 1u << 22 | 1u << 23 |
                            1u << 27 | 1u << 28 | 1u << 29;
    const uint32_t v3_ebx = 1u << 3 | 1u << 5 | 1u << 8;
    if (!has(one.c, v3_ecx) || !has(seven.b, v3_ebx) || !has(ext.c, 1u << 0 | 1u << 5)) {
        return baseline;
    }
    const uint64_t states = saved_states();
    if (!has(static_cast<uint32_t>(states), 0x6)) {  // SSE and AVX state
        return baseline;
    }
    // leaf 7 ebx: AVX512F 16, AVX512DQ 17, AVX512CD 28, AVX512BW 30, AVX512VL 31; XCR0: opmask, ZMM_Hi256, Hi16_ZMM
    const uint32_t v4_ebx = 1u << 16 | 1u << 17 | 1u << 28 | 1u << 30 | 1u << 31;
    return has(seven.b, v4_ebx) && has(static_cast<uint32_t>(states), 0xe6) ? x86_64_v4 : x86_64_v3;
}
#else
inline int detect() {
    return baseline;
}
#endif

// The level once asked (-1 before): one per package namespace, hidden so that position-independent code
// reads it directly rather than through the global offset table (nm -u shows no _GLOBAL_OFFSET_TABLE_).
#if defined(__GNUC__) || defined(__clang__)
inline int cached __attribute__((visibility("hidden"))) = -1;
#else
inline int cached = -1;
#endif

}  // namespace cpu

// The instruction set level of this CPU (cpu::baseline, cpu::x86_64_v3 or cpu::x86_64_v4), capped by
// KS_CPU_LEVEL_MAX when the build defines it.
inline int cpu_level() {
    int level = __atomic_load_n(&cpu::cached, __ATOMIC_RELAXED);
    if (level < 0) {
        level = cpu::detect();
#ifdef KS_CPU_LEVEL_MAX
        level = level < KS_CPU_LEVEL_MAX ? level : KS_CPU_LEVEL_MAX;
#endif
        __atomic_store_n(&cpu::cached, level, __ATOMIC_RELAXED);
    }
    return level;
}

}  // inline namespace KS_KERNELS
}  // namespace ks

#endif  // KS_CPU_H
