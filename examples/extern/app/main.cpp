// bessel_app: uses the `drum` package built by ksbuild from examples/extern/manifest.toml, whose kernels call the
// external C functions bessel_j0 and bessel_j1 of examples/extern/bessel.c (compiled into libdrum.a).
//
// Checks J0 at its first zero, the derivative the rule gives (dJ0/dx = -J1, J1 called directly from the library),
// and the gradient of ring(r, k) = sum_i J0(k r_i) against central differences. Exit status 0 = all good.
#include <drum.h>

#include <cmath>
#include <cstdint>
#include <cstdio>

extern "C" double bessel_j1(double);  // defined in bessel.c, which the package compiled into its library

namespace {

constexpr int64_t kN = 4;
const double kRs[kN] = {0.5, 1.0, 2.5, 4.0};

// Workspace for the kernels that need one: static, so nothing is allocated at run time.
alignas(64) unsigned char g_workspace[4096];

bool near(double a, double b, double tol) { return std::fabs(a - b) <= tol * (1.0 + std::fabs(b)); }

bool check_j0() {
    const double zero = 2.404825557695773;  // J0's first zero
    double dj[kN];
    if (drum::dj0_workspace_size(kN) > sizeof g_workspace || drum::dj0(kN, kRs, dj, g_workspace) != 0) return false;
    bool ok = near(drum::j0(zero), 0.0, 1e-14) && near(drum::j0(0.0), 1.0, 1e-15);
    for (int64_t i = 0; i < kN; ++i) {
        std::printf("x = %4.2f  J0 = %+.12f  dJ0/dx = %+.12f\n", kRs[i], drum::j0(kRs[i]), dj[i]);
        ok = ok && near(dj[i], -bessel_j1(kRs[i]), 1e-14);
    }
    return ok;
}

bool check_ring_grad() {
    const double k = 1.3, h = 1e-6;
    double d_r[kN], d_k = 0.0, up = 0.0, down = 0.0;
    if (drum::ring_grad_workspace_size(kN) > sizeof g_workspace || drum::ring_workspace_size(kN) > sizeof g_workspace)
        return false;
    if (drum::ring_grad(kN, kRs, k, d_r, &d_k, g_workspace) != 0) return false;
    if (drum::ring(kN, kRs, k + h, &up, g_workspace) != 0 || drum::ring(kN, kRs, k - h, &down, g_workspace) != 0)
        return false;
    std::printf("d ring / d k = %+.10f (central differences: %+.10f)\n", d_k, (up - down) / (2 * h));
    bool ok = near(d_k, (up - down) / (2 * h), 1e-7);
    for (int64_t i = 0; i < kN; ++i) ok = ok && near(d_r[i], -k * bessel_j1(k * kRs[i]), 1e-14);
    return ok;
}

}  // namespace

int main() {
    const bool j0_ok = check_j0();
    const bool ring_ok = check_ring_grad();
    if (!j0_ok || !ring_ok) {
        std::printf("FAILED: the kernels disagree with J0, J1 or finite differences\n");
        return 1;
    }
    std::printf("ok: J0, its rule's derivative and the gradient agree\n");
    return 0;
}
