/* bessel.c: the Bessel functions J0 and J1, written in C, which ksbuild calls but does not compile from Python.
 *
 * Bessel's integrals J_n(x) = (1/pi) * integral over [0, pi] of cos(n t - x sin t) dt, by the midpoint rule on
 * N points: the integrand is smooth and periodic, so the rule converges faster than any power of 1/N (for |x| up
 * to about 20, N = 32 gives double precision). bessel.py's Python bodies compute the same sums. */
#include <math.h>

#define BESSEL_POINTS 32

static double bessel_integral(int n, double x) {
    const double pi = 3.14159265358979323846;
    double sum = 0.0;
    for (int k = 0; k < BESSEL_POINTS; ++k) {
        const double t = pi * (k + 0.5) / BESSEL_POINTS;
        sum += cos(n * t - x * sin(t));
    }
    return sum / BESSEL_POINTS;
}

double bessel_j0(double x) { return bessel_integral(0, x); }

double bessel_j1(double x) { return bessel_integral(1, x); }
