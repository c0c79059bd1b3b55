// ks/namespace.h — the namespace of everything the ks/ headers define (each of them includes this).
//
// ks::KS_KERNELS is an inline namespace (code writes ks::f) named after the instruction set level the code is
// compiled for: the generated CMake project defines KS_KERNELS=ks_kernels_<level> for every object of one level
// (x86-64, x86-64-v3 and x86-64-v4 in a portable build; the level of [build] cpu otherwise), the package's own code
// and the kernel layer's (src/ks/kernels.cpp) alike. Its symbols are hidden (KS_HIDDEN), and the library's
// relocatable link makes hidden symbols local (objcopy --localize-hidden), so two libraries linked into one app
// never share one: with one copy kept by the linker, a library built for the baseline CPU could run another's AVX
// code, or one ksbuild version's prelude another's. One name per level, not per package, lets every package of a
// level read these headers from one precompiled header (prelude_<level>.h.gch in the kernel cache).
#ifndef KS_NAMESPACE_H
#define KS_NAMESPACE_H

#ifndef KS_KERNELS
#define KS_KERNELS ks_kernels
#endif

#if defined(__GNUC__) || defined(__clang__)
#define KS_HIDDEN __attribute__((visibility("hidden")))
#else
#define KS_HIDDEN
#endif

#endif  // KS_NAMESPACE_H
