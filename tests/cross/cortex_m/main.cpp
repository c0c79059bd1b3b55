// A bare-metal program using compiled kernels: static buffers only, no heap, no exceptions, no
// stdio. It links with newlib's nosys specs (the toolchain file adds --specs=nosys.specs).
#include <activations.h>
#include <gmm.h>

#include <stddef.h>
#include <stdint.h>

namespace {

constexpr int64_t N = 16;                     // relu3 points
constexpr int64_t K = 3, D = 2, T = 3, M = 8;  // GMM: components, dim, d(d+1)/2, observations

float xs[N], ys[N], dys[N];
float alphas[K], means[K * D], icf[K * T], data[M * D];
float d_alphas[K], d_means[K * D], d_icf[K * T];
alignas(16) unsigned char workspace[16384];

}  // namespace

volatile float sink;  // keeps the results observable

int main() {
    for (int64_t i = 0; i < N; ++i) {
        xs[i] = -2.0f + 0.25f * static_cast<float>(i);
    }
    for (int64_t i = 0; i < K * T; ++i) {
        icf[i] = 0.1f * static_cast<float>(i % 5);
    }
    for (int64_t i = 0; i < M * D; ++i) {
        data[i] = 0.3f * static_cast<float>(i % 7) - 1.0f;
    }
    int status = activations_vrelu3(N, xs, ys, nullptr);
    status |= activations_vrelu3_vjp(N, xs, ys, dys, nullptr);
    if (gmm_gmm_f32_grad_workspace_size(K, D, T, M) > sizeof workspace) {
        return 3;
    }
    float loss = 0.0f;
    status |= gmm_gmm_f32(K, D, T, M, alphas, means, icf, data, 1.0f, 0.0f, &loss, workspace);
    status |= gmm_gmm_f32_grad(K, D, T, M, alphas, means, icf, data, 1.0f, 0.0f, d_alphas, d_means, d_icf,
                               workspace);
    sink = loss + dys[N - 1] + d_alphas[0] + d_means[0] + d_icf[0] + activations_relu3(0.5f);
    return status;
}
