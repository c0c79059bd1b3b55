/* The external C function of prim_samples.py's extern_call sample (ksbuild.extern): x * y + sin(x). */
#include <math.h>

double ks_sample_extern(double x, double y) { return x * y + sin(x); }
