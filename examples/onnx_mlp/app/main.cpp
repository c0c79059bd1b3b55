// onnx_mlp_app: inference and training of the MLP of examples/onnx_mlp in plain C++.
//
// Build and run (from the repository root):
//   ksbuild package examples/onnx_mlp/manifest.toml     # installs into dist/onnx_mlp
//   cmake -S examples/onnx_mlp/app -B build/onnx_mlp_app -DCMAKE_PREFIX_PATH=$PWD/dist/onnx_mlp
//   cmake --build build/onnx_mlp_app && ./build/onnx_mlp_app/onnx_mlp_app
//
// 1. Runs the network (weights linked into libonnx_mlp.a) on a few points.
// 2. Trains a copy of its weights (weights.h, written by model.py) by gradient descent on
//    sin(x0) + x1·x2 - x3/2, with onnx_mlp_loss_grad as the gradient of each step.
// No heap: data, weights and workspace are static arrays. Exit status 0 = the loss went down.
#include <onnx_mlp.h>

#include <cmath>
#include <cstdint>
#include <cstdio>

#include "weights.h"

namespace {

constexpr int64_t kBatch = 64;
float g_x[kBatch * 4], g_target[kBatch];
alignas(64) unsigned char g_workspace[1 << 16];

// A deterministic data set: x in [-1, 1)^4 from a linear congruential generator.
void make_data() {
    uint32_t s = 12345u;
    for (float& v : g_x) {
        s = s * 1664525u + 1013904223u;
        v = static_cast<float>(s >> 8) / 8388608.0f - 1.0f;
    }
    for (int64_t i = 0; i < kBatch; ++i) {
        const float* x = g_x + 4 * i;
        g_target[i] = std::sin(x[0]) + x[1] * x[2] - x[3] / 2;
    }
}

bool fits(size_t bytes) {
    if (bytes > sizeof g_workspace) {
        std::printf("error: %zu bytes of workspace needed\n", bytes);
        return false;
    }
    return true;
}

float loss() {
    float out = 0;
    onnx_mlp_loss(kBatch, g_x, g_target, w_fc1_weight, w_fc1_bias, w_fc2_weight, w_fc2_bias, w_out_weight,
                  w_out_bias, &out, g_workspace);
    return out;
}

// One step of gradient descent on every weight.
void step(float lr) {
    static float d1w[32 * 4], d1b[32], d2w[32 * 32], d2b[32], dow[32], dob[1];
    onnx_mlp_loss_grad(kBatch, g_x, g_target, w_fc1_weight, w_fc1_bias, w_fc2_weight, w_fc2_bias, w_out_weight,
                       w_out_bias, d1w, d1b, d2w, d2b, dow, dob, g_workspace);
    float* ws[] = {w_fc1_weight, w_fc1_bias, w_fc2_weight, w_fc2_bias, w_out_weight, w_out_bias};
    const float* ds[] = {d1w, d1b, d2w, d2b, dow, dob};
    const int ns[] = {32 * 4, 32, 32 * 32, 32, 32, 1};
    for (int k = 0; k < 6; ++k) {
        for (int i = 0; i < ns[k]; ++i) ws[k][i] -= lr * ds[k][i];
    }
}

}  // namespace

int main() {
    make_data();
    if (!fits(onnx_mlp_mlp_workspace_size(kBatch)) || !fits(onnx_mlp_loss_grad_workspace_size(kBatch)) ||
        !fits(onnx_mlp_loss_workspace_size(kBatch))) {
        return 1;
    }
    float y[4];
    if (onnx_mlp_mlp(4, g_x, y, g_workspace) != 0) return 1;
    for (int i = 0; i < 4; ++i) {
        std::printf("mlp(x%d) = %+.5f   (target %+.5f)\n", i, y[i], g_target[i]);
    }
    const float first = loss();
    for (int s = 1; s <= 300; ++s) {
        step(0.1f);
        if (s % 100 == 0) std::printf("step %3d: loss %.5f\n", s, loss());
    }
    const float last = loss();
    std::printf("loss %.5f -> %.5f\n", first, last);
    return last < 0.5f * first ? 0 : 1;
}
