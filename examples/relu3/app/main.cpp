// relu3_app: uses the `activations` package built by ksbuild from examples/relu3/manifest.toml.
//
// Build and run (from the repository root):
//   ksbuild package examples/relu3/manifest.toml      # installs into dist/activations
//   cmake -S examples/relu3/app -B build/app -DCMAKE_PREFIX_PATH=$PWD/dist/activations && cmake --build build/app && ./build/app/relu3_app
//
// Prints relu3, its first derivative (grad and vjp with ct = 1) and its second derivative
// (jvp of grad) at a few points, then runs the batched kernels vrelu3 and vrelu3_vjp on a stack
// array of 8 values and checks them against the scalar exports. No heap: the workspace (if any)
// comes from a static buffer. Exit status 0 = all good, 1 = a kernel failed or disagreed.
#include <activations.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>

namespace {

constexpr int64_t kN = 8;
const float kXs[kN] = {-1.0f, -0.25f, 0.0f, 0.25f, 0.5f, 0.9f, 1.0f, 2.5f};

// Workspace for the batched kernels: static, so nothing is allocated at run time.
alignas(64) unsigned char g_workspace[1024];

// The workspace pointer for a kernel that needs `bytes`: nullptr when it needs none,
// g_workspace when that is big enough, and nullptr with *ok = false otherwise.
void* workspace_for(size_t bytes, bool* ok) {
    if (bytes == 0) return nullptr;
    if (bytes > sizeof g_workspace) {
        std::printf("error: kernel needs %zu bytes of workspace, have %zu\n", bytes, sizeof g_workspace);
        *ok = false;
        return nullptr;
    }
    return g_workspace;
}

bool nearly_equal(float a, float b) {
    const float d = a > b ? a - b : b - a;
    return d <= 1e-6f;
}

// The scalar exports at each point: value, first derivative two ways, second derivative.
bool print_scalar_table() {
    bool ok = true;
    std::printf("%10s %12s %12s %12s %12s\n", "x", "relu3", "grad", "vjp(ct=1)", "d2");
    for (float x : kXs) {
        const float y = activations::relu3(x);
        const float g = activations::relu3_grad(x);
        const float v = activations::relu3_vjp(x, 1.0f);
        const float d2 = activations::relu3_d2(x, 1.0f);
        std::printf("%10.6f %12.6f %12.6f %12.6f %12.6f\n", x, y, g, v, d2);
        ok = ok && nearly_equal(g, v);
    }
    return ok;
}

// vrelu3 and vrelu3_vjp (cotangent = 1) on the same points, checked against the scalar exports.
bool run_batched() {
    float y[kN];
    float ct[kN];
    float dx[kN];
    for (int64_t i = 0; i < kN; ++i) ct[i] = 1.0f;

    bool ok = true;
    void* ws = workspace_for(activations::vrelu3_workspace_size(kN), &ok);
    if (!ok) return false;
    int status = activations::vrelu3(kN, kXs, y, ws);
    if (status != 0) {
        std::printf("error: vrelu3 returned status %d\n", status);
        return false;
    }
    ws = workspace_for(activations::vrelu3_vjp_workspace_size(kN), &ok);
    if (!ok) return false;
    status = activations::vrelu3_vjp(kN, kXs, ct, dx, ws);
    if (status != 0) {
        std::printf("error: vrelu3_vjp returned status %d\n", status);
        return false;
    }

    std::printf("\n%10s %12s %12s\n", "x", "vrelu3", "vrelu3_vjp");
    for (int64_t i = 0; i < kN; ++i) {
        std::printf("%10.6f %12.6f %12.6f\n", kXs[i], y[i], dx[i]);
        ok = ok && nearly_equal(y[i], activations::relu3(kXs[i]));
        ok = ok && nearly_equal(dx[i], activations::relu3_grad(kXs[i]));
    }
    return ok;
}

}  // namespace

int main() {
    const bool scalar_ok = print_scalar_table();
    const bool batched_ok = run_batched();
    if (!scalar_ok || !batched_ok) {
        std::printf("\nFAILED: the kernels disagree (see above)\n");
        return 1;
    }
    std::printf("\nok: batched kernels match the scalar ones\n");
    return 0;
}
