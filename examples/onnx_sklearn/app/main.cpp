// onnx_sklearn_app: a scikit-learn SVC (examples/onnx_sklearn) classifying iris flowers in plain C++.
//
// Build and run (from the repository root):
//   ksbuild package examples/onnx_sklearn/manifest.toml     # installs into dist/onnx_sklearn
//   cmake -S examples/onnx_sklearn/app -B build/onnx_sklearn_app -DCMAKE_PREFIX_PATH=$PWD/dist/onnx_sklearn
//   cmake --build build/onnx_sklearn_app && ./build/onnx_sklearn_app/onnx_sklearn_app
//
// Classifies six flowers of the iris data (two of each species, measurements in cm) and prints each
// label with the three class probabilities. No heap: inputs, outputs and workspace are static arrays.
// Exit status 0 = every flower gets its species and its probabilities sum to 1.
#include <onnx_sklearn.h>

#include <cmath>
#include <cstdint>
#include <cstdio>

namespace {

constexpr int64_t kRows = 6;
const char* const kSpecies[3] = {"setosa", "versicolor", "virginica"};
// sepal length, sepal width, petal length, petal width (rows 1, 8, 51, 58, 101, 108 of the data)
const float kFlowers[kRows * 4] = {5.1f, 3.5f, 1.4f, 0.2f, 5.0f, 3.4f, 1.5f, 0.2f, 7.0f, 3.2f, 4.7f, 1.4f,
                                   4.9f, 2.4f, 3.3f, 1.0f, 6.3f, 3.3f, 6.0f, 2.5f, 7.3f, 2.9f, 6.3f, 1.8f};
const int64_t kSpeciesOf[kRows] = {0, 0, 1, 1, 2, 2};
int64_t g_label[kRows];
float g_probabilities[kRows * 3];
alignas(64) unsigned char g_workspace[1 << 14];

}  // namespace

int main() {
    if (onnx_sklearn_classify_workspace_size(kRows) > sizeof g_workspace) {
        std::printf("error: %zu bytes of workspace needed\n", onnx_sklearn_classify_workspace_size(kRows));
        return 1;
    }
    if (onnx_sklearn_classify(kRows, kFlowers, g_label, g_probabilities, g_workspace) != 0) {
        std::printf("error: the classifier failed\n");
        return 1;
    }
    int wrong = 0;
    for (int64_t i = 0; i < kRows; ++i) {
        const float* x = kFlowers + 4 * i;
        const float* p = g_probabilities + 3 * i;
        const bool ok = g_label[i] == kSpeciesOf[i] && std::fabs(p[0] + p[1] + p[2] - 1.0f) < 1e-4f;
        wrong += ok ? 0 : 1;
        std::printf("(%.1f, %.1f, %.1f, %.1f)  %-10s  p = %.3f %.3f %.3f%s\n", x[0], x[1], x[2], x[3],
                    kSpecies[g_label[i]], p[0], p[1], p[2], ok ? "" : "  (expected another species)");
    }
    std::printf("%d of %lld flowers classified as their species\n", static_cast<int>(kRows) - wrong,
                static_cast<long long>(kRows));
    return wrong == 0 ? 0 : 1;
}
