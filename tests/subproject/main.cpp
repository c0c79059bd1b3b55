// A C++17 program of two ksbuild packages built as subprojects (CMakeLists.txt), through their C++ API
// (namespaces activations and lp): prints what main.c prints, which tests/test_subproject.py checks.
#include <cstdio>
#include <vector>

#include "activations.h"
#include "lp.h"

namespace {
void print(const char* name, const float* v, int n) {
    std::printf("%s", name);
    for (int i = 0; i < n; ++i) std::printf(" %.9g", static_cast<double>(v[i]));
    std::printf("\n");
}
}  // namespace

int main() {
    constexpr int n = 5;
    const float x[n] = {-2.0f, 0.25f, 0.5f, 1.0f, 3.0f};
    const float w[n * 2] = {0.5f, -1.0f, 0.25f, 0.75f, -0.5f, 0.125f, 1.0f, 2.0f, -0.25f, 0.0f};
    float out[n], layer[n * 2];
    const float scalars[2] = {activations::relu3(0.5f), lp::log1p(0.5f)};
    print("scalars", scalars, 2);
    int status = activations::vrelu3(n, x, out, nullptr);
    print("vrelu3", out, n);
    status |= lp::vlog1p(n - 1, x + 1, out, nullptr);
    print("vlog1p", out, n - 1);
    std::vector<unsigned char> workspace(lp::layer_workspace_size(1, n, 2) + 1);  // (new aligns to 16 here)
    status |= lp::layer(1, n, 2, x, w, layer, workspace.data());
    print("layer", layer, 2);
    std::printf("status %d\n", status);
    return status;
}
