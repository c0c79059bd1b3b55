// Runs compiled exports on inputs read from a text file and writes the results, one number per
// line (%.17g), so a test can compare a cross-compiled build (run under qemu) with the host.
//   ks_driver relu3 IN OUT   IN: n, then n values of x
//   ks_driver gmm IN OUT     IN: K d T n, alphas[K], means[K*d], icf[K*T], x[n*d], gamma, m
#include <activations.h>
#include <gmm.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace {

std::vector<double> read_numbers(const char* path) {
    std::vector<double> v;
    FILE* f = std::fopen(path, "r");
    double x = 0;
    while (f != nullptr && std::fscanf(f, "%lf", &x) == 1) {
        v.push_back(x);
    }
    if (f != nullptr) {
        std::fclose(f);
    }
    return v;
}

void* workspace(size_t bytes) {
    return bytes ? std::aligned_alloc(16, (bytes + 15) / 16 * 16) : nullptr;
}

int run_relu3(const std::vector<double>& in, FILE* out) {
    const int64_t n = static_cast<int64_t>(in[0]);
    std::vector<float> x(in.begin() + 1, in.begin() + 1 + n), y(n), dx(n), ones(n, 1.0f);
    int status = activations_vrelu3(n, x.data(), y.data(), nullptr);
    status |= activations_vrelu3_vjp(n, x.data(), ones.data(), dx.data(), nullptr);
    for (int64_t i = 0; i < n; ++i) {
        std::fprintf(out, "%.17g\n%.17g\n%.17g\n%.17g\n", static_cast<double>(y[i]), static_cast<double>(dx[i]),
                     static_cast<double>(activations_relu3(x[i])), static_cast<double>(activations_relu3_grad(x[i])));
    }
    return status;
}

int run_gmm(const std::vector<double>& in, FILE* out) {
    const int64_t K = static_cast<int64_t>(in[0]), d = static_cast<int64_t>(in[1]);
    const int64_t T = static_cast<int64_t>(in[2]), n = static_cast<int64_t>(in[3]);
    const double* alphas = in.data() + 4;
    const double* means = alphas + K;
    const double* icf = means + K * d;
    const double* x = icf + K * T;
    const double gamma = x[n * d], m = x[n * d + 1];
    std::vector<double> grads(K + K * d + K * T);
    double value = 0;
    void* ws = workspace(std::max(gmm_gmm_grad_workspace_size(K, d, T, n), gmm_gmm_workspace_size(K, d, T, n)));
    int status = gmm_gmm(K, d, T, n, alphas, means, icf, x, gamma, m, &value, ws);
    status |= gmm_gmm_grad(K, d, T, n, alphas, means, icf, x, gamma, m, grads.data(), grads.data() + K,
                           grads.data() + K + K * d, ws);
    std::free(ws);
    std::fprintf(out, "%.17g\n", value);
    for (double g : grads) {
        std::fprintf(out, "%.17g\n", g);
    }
    return status;
}

}  // namespace

int main(int argc, char** argv) {
    if (argc != 4) {
        std::fprintf(stderr, "usage: ks_driver relu3|gmm IN OUT\n");
        return 2;
    }
    const std::vector<double> in = read_numbers(argv[2]);
    FILE* out = std::fopen(argv[3], "w");
    if (in.empty() || out == nullptr) {
        std::fprintf(stderr, "ks_driver: cannot read %s or write %s\n", argv[2], argv[3]);
        return 2;
    }
    const int status = std::strcmp(argv[1], "gmm") == 0 ? run_gmm(in, out) : run_relu3(in, out);
    std::fclose(out);
    return status;
}
