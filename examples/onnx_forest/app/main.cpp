// onnx_forest_app: predictions of the boosted trees of examples/onnx_forest in plain C++.
//
// Build and run (from the repository root):
//   ksbuild package examples/onnx_forest/manifest.toml     # installs into dist/onnx_forest
//   cmake -S examples/onnx_forest/app -B build/onnx_forest_app -DCMAKE_PREFIX_PATH=$PWD/dist/onnx_forest
//   cmake --build build/onnx_forest_app && ./build/onnx_forest_app/onnx_forest_app
//
// Predicts y = sin(3 x0) + x1² - x0 x2 on a grid of points and prints each prediction beside the
// true value, then the root mean squared error. A NaN feature takes the branch the model says.
// No heap: inputs, outputs and workspace are static arrays. Exit status 0 = the error is small.
#include <onnx_forest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>

namespace {

constexpr int64_t kRows = 27;
float g_x[kRows * 3], g_y[kRows];
alignas(64) unsigned char g_workspace[1 << 14];

float truth(const float* x) { return std::sin(3 * x[0]) + x[1] * x[1] - x[0] * x[2]; }

}  // namespace

int main() {
    for (int64_t i = 0; i < kRows; ++i) {  // the points of {-0.6, 0, 0.6}³
        g_x[3 * i + 0] = -0.6f + 0.6f * static_cast<float>(i / 9);
        g_x[3 * i + 1] = -0.6f + 0.6f * static_cast<float>((i / 3) % 3);
        g_x[3 * i + 2] = -0.6f + 0.6f * static_cast<float>(i % 3);
    }
    if (onnx_forest_forest_workspace_size(kRows) > sizeof g_workspace) {
        std::printf("error: %zu bytes of workspace needed\n", onnx_forest_forest_workspace_size(kRows));
        return 1;
    }
    if (onnx_forest_forest(kRows, g_x, g_y, g_workspace) != 0) {
        std::printf("error: the forest failed\n");
        return 1;
    }
    double sq = 0;
    for (int64_t i = 0; i < kRows; ++i) {
        const float* x = g_x + 3 * i;
        std::printf("x = (%5.2f, %5.2f, %5.2f)  forest %8.5f  true %8.5f\n", x[0], x[1], x[2], g_y[i], truth(x));
        sq += (g_y[i] - truth(x)) * (g_y[i] - truth(x));
    }
    const double rmse = std::sqrt(sq / kRows);
    float missing[3] = {NAN, 0.5f, 0.5f}, y_missing = 0;
    onnx_forest_forest(1, missing, &y_missing, g_workspace);
    std::printf("x = (  nan,  0.50,  0.50)  forest %8.5f\nrmse %.4f\n", y_missing, rmse);
    return rmse < 0.25 ? 0 : 1;
}
