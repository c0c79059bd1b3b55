/* A C99 program of tests/test_baremetal_link.py: it calls package lp's exports through lp.h, prints
 * every result (on a board with semihosting; elsewhere printf goes nowhere) and returns 0 when every
 * call succeeded. The test compares the printed values with Python's math.log1p. */
#include <lp.h>

#include <stdint.h>
#include <stdio.h>

#define N 6

static const float xs[N] = {-0.5f, -1e-7f, 0.0f, 3e-8f, 0.25f, 3.0f};
static float ys[N];

int main(void) {
    int i;
    int status = lp_vlog1p(N, xs, ys, NULL);
    for (i = 0; i < N; ++i) {
        /* 17 significant digits: the exact value of each float, so the test compares to the last bit */
        printf("log1p %.17g %.17g %.17g\n", (double)xs[i], (double)lp_log1p(xs[i]), (double)ys[i]);
    }
    printf("status %d\n", status);
    return status;
}
