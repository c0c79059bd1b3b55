// onnx_cnn_app: classifies images with the CNN of examples/onnx_cnn and computes the gradient
// of the winning logit with respect to each image (a saliency map), in plain C++.
//
// Build and run (from the repository root):
//   ksbuild package examples/onnx_cnn/manifest.toml     # installs into dist/onnx_cnn
//   cmake -S examples/onnx_cnn/app -B build/onnx_cnn_app -DCMAKE_PREFIX_PATH=$PWD/dist/onnx_cnn
//   cmake --build build/onnx_cnn_app && ./build/onnx_cnn_app/onnx_cnn_app
//
// Checks the gradient against central finite differences of the logit at a few pixels.
// No heap: images, outputs and workspace are static. Exit status 0 = all good.
#include <onnx_cnn.h>

#include <cmath>
#include <cstdint>
#include <cstdio>

namespace {

constexpr int64_t kBatch = 2, kPixels = 3 * 16 * 16, kClasses = 10;
float g_images[kBatch * kPixels], g_logits[kBatch * kClasses], g_ct[kBatch * kClasses];
float g_saliency[kBatch * kPixels];
alignas(64) unsigned char g_workspace[1 << 20];

void make_images() {
    for (int64_t i = 0; i < kBatch * kPixels; ++i) {
        g_images[i] = std::sin(0.37f * static_cast<float>(i)) * std::cos(0.011f * static_cast<float>(i * i % 97));
    }
}

int argmax(const float* v, int n) {
    int best = 0;
    for (int i = 1; i < n; ++i) best = v[i] > v[best] ? i : best;
    return best;
}

float logit(int64_t image, int cls) {
    static float out[kBatch * kClasses];
    onnx_cnn_cnn(kBatch, g_images, out, g_workspace);
    return out[image * kClasses + cls];
}

}  // namespace

int main() {
    if (onnx_cnn_cnn_workspace_size(kBatch) > sizeof g_workspace ||
        onnx_cnn_cnn_vjp_workspace_size(kBatch) > sizeof g_workspace) {
        std::printf("error: not enough workspace\n");
        return 1;
    }
    make_images();
    if (onnx_cnn_cnn(kBatch, g_images, g_logits, g_workspace) != 0) return 1;
    int cls[kBatch];
    for (int64_t b = 0; b < kBatch; ++b) {
        cls[b] = argmax(g_logits + b * kClasses, kClasses);
        g_ct[b * kClasses + cls[b]] = 1.0f;  // d(winning logit)
        std::printf("image %lld: class %d (logit %.4f)\n", static_cast<long long>(b), cls[b],
                    g_logits[b * kClasses + cls[b]]);
    }
    if (onnx_cnn_cnn_vjp(kBatch, g_images, g_ct, g_saliency, g_workspace) != 0) return 1;
    bool ok = true;
    const int64_t pixels[] = {0, 100, 517, 700};
    for (int64_t p : pixels) {
        const float h = 1e-2f, saved = g_images[p];
        g_images[p] = saved + h;
        const float up = logit(0, cls[0]);
        g_images[p] = saved - h;
        const float down = logit(0, cls[0]);
        g_images[p] = saved;
        const float fd = (up - down) / (2 * h);
        std::printf("pixel %4lld: d logit / d pixel = %+.5f (finite difference %+.5f)\n", static_cast<long long>(p),
                    g_saliency[p], fd);
        ok = ok && std::fabs(fd - g_saliency[p]) < 1e-2f * (1.0f + std::fabs(fd));
    }
    return ok ? 0 : 1;
}
