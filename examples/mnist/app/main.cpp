// mnist_app: classifies handwritten 8x8 digits with the `mnist` package, the trained model of
// examples/mnist/train.py exported by ksbuild's torch.export frontend (see ../manifest.toml).
//
// Build and run (from the repository root):
//   ksbuild package examples/mnist/manifest.toml      # installs into dist/mnist
//   cmake -S examples/mnist/app -B build/mnist_app -DCMAKE_PREFIX_PATH=$PWD/dist/mnist
//   cmake --build build/mnist_app && ./build/mnist_app/mnist_app [digits.txt]
//
// Without an argument it classifies the 10 digits of digits.h; with one, the digits of a text
// file, one per line: the label, then 64 pixel values (0..16). All digits go through one call
// of mnist_classify (the batch dim is the number of digits). For each digit it prints the label,
// the predicted class and the 10 log-probabilities. No heap: inputs, outputs and the workspace
// are static buffers. Exit status 0 = classified (whatever the accuracy), 1 = an error.
#include <mnist.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>

#include "digits.h"

namespace {

constexpr int kMaxDigits = 512;
constexpr int kClasses = 10;

float g_pixels[kMaxDigits][kPixels];
float g_log_probs[kMaxDigits][kClasses];
int g_labels[kMaxDigits];
alignas(64) unsigned char g_workspace[1 << 20];

// The built-in digits, scaled to [0, 1] as in training (pixel / 16).
int load_builtin() {
    for (int d = 0; d < kDigitCount; ++d) {
        g_labels[d] = kDigits[d][0];
        for (int p = 0; p < kPixels; ++p) g_pixels[d][p] = static_cast<float>(kDigits[d][1 + p]) / 16.0f;
    }
    return kDigitCount;
}

// Digits from a text file (label and 64 pixels per line); -1 if it cannot be read.
int load_file(const char* path) {
    std::FILE* f = std::fopen(path, "r");
    if (f == nullptr) {
        std::printf("error: cannot open %s\n", path);
        return -1;
    }
    int n = 0;
    while (n < kMaxDigits && std::fscanf(f, "%d", &g_labels[n]) == 1) {
        for (int p = 0; p < kPixels; ++p) {
            float v = 0.0f;
            if (std::fscanf(f, "%f", &v) != 1) {
                std::printf("error: digit %d of %s has fewer than %d pixels\n", n, path, kPixels);
                std::fclose(f);
                return -1;
            }
            g_pixels[n][p] = v / 16.0f;
        }
        ++n;
    }
    std::fclose(f);
    return n;
}

int argmax(const float* v, int n) {
    int best = 0;
    for (int i = 1; i < n; ++i) best = v[i] > v[best] ? i : best;
    return best;
}

}  // namespace

int main(int argc, char** argv) {
    const int n = argc > 1 ? load_file(argv[1]) : load_builtin();
    if (n <= 0) return 1;
    const size_t bytes = mnist::classify_workspace_size(n);
    if (bytes > sizeof g_workspace) {
        std::printf("error: mnist_classify needs %zu bytes of workspace, have %zu\n", bytes, sizeof g_workspace);
        return 1;
    }
    const int status = mnist::classify(n, &g_pixels[0][0], &g_log_probs[0][0], bytes ? g_workspace : nullptr);
    if (status != 0) {
        std::printf("error: mnist_classify returned status %d\n", status);
        return 1;
    }
    int correct = 0;
    for (int d = 0; d < n; ++d) {
        const int guess = argmax(g_log_probs[d], kClasses);
        correct += guess == g_labels[d];
        std::printf("digit %3d: label %d predicted %d  log-probabilities", d, g_labels[d], guess);
        for (int c = 0; c < kClasses; ++c) std::printf(" %.6f", g_log_probs[d][c]);
        std::printf("\n");
    }
    std::printf("%d of %d digits classified correctly\n", correct, n);
    return 0;
}
