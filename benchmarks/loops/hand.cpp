// Hand-written C++ of the objectives in kernels.py, the way ADBench's C++ (tools/manual, gmm.h / ba.h)
// writes them: precomputed exp(q_k) and Σ q_k, a centred x_i − μ_k buffer, Q_k times it column by column
// with a running index into the triangle, the K scores in a buffer, then their log-sum-exp.
// Compiled by objectives.py with g++ -O3 (plus the -march and math flags it prints); scratch from the caller.
#include <cmath>
#include <cstdint>

namespace {

double logsumexp(int64_t n, const double* v) {
    double mx = v[0];
    for (int64_t i = 1; i < n; ++i) mx = v[i] > mx ? v[i] : mx;
    double s = 0.0;
    for (int64_t i = 0; i < n; ++i) s += std::exp(v[i] - mx);
    return std::log(s) + mx;
}

// out = Q x, Q lower triangular: diag on the diagonal, ltri below it column by column.
void q_times_x(int64_t d, const double* diag, const double* ltri, const double* x, double* out) {
    for (int64_t r = 0; r < d; ++r) out[r] = diag[r] * x[r];
    int64_t at = 0;
    for (int64_t c = 0; c < d; ++c)
        for (int64_t r = c + 1; r < d; ++r) out[r] += ltri[at++] * x[c];
}

double wishart_prior(int64_t K, int64_t d, const double* icf, const double* sum_qs, const double* diags,
                     double gamma, double m) {
    const int64_t T = d * (d + 1) / 2;
    const double n_w = d + m + 1.0;
    double log_gamma = 0.25 * d * (d - 1) * std::log(M_PI);
    for (int64_t j = 0; j < d; ++j) log_gamma += std::lgamma(0.5 * n_w - 0.5 * j);
    const double c = n_w * d * (std::log(gamma) - 0.5 * std::log(2.0)) - log_gamma;
    double out = 0.0;
    for (int64_t k = 0; k < K; ++k) {
        double frobenius = 0.0;
        for (int64_t r = 0; r < d; ++r) frobenius += diags[k * d + r] * diags[k * d + r];
        for (int64_t j = d; j < T; ++j) frobenius += icf[k * T + j] * icf[k * T + j];
        out += 0.5 * gamma * gamma * frobenius - m * sum_qs[k];
    }
    return out - K * c;
}

}  // namespace

// scratch: K * d + K + 3 * d + K doubles.
extern "C" double gmm_hand(int64_t K, int64_t d, int64_t n, const double* alphas, const double* means,
                           const double* icf, const double* x, double gamma, double m, double* scratch) {
    const int64_t T = d * (d + 1) / 2;
    double* diags = scratch;
    double* sum_qs = diags + K * d;
    double* xc = sum_qs + K;
    double* qxc = xc + d;
    double* main_term = qxc + d;
    for (int64_t k = 0; k < K; ++k) {
        sum_qs[k] = 0.0;
        for (int64_t r = 0; r < d; ++r) {
            sum_qs[k] += icf[k * T + r];
            diags[k * d + r] = std::exp(icf[k * T + r]);
        }
    }
    double slse = 0.0;
    for (int64_t i = 0; i < n; ++i) {
        for (int64_t k = 0; k < K; ++k) {
            for (int64_t r = 0; r < d; ++r) xc[r] = x[i * d + r] - means[k * d + r];
            q_times_x(d, &diags[k * d], &icf[k * T + d], xc, qxc);
            double sq = 0.0;
            for (int64_t r = 0; r < d; ++r) sq += qxc[r] * qxc[r];
            main_term[k] = alphas[k] + sum_qs[k] - 0.5 * sq;
        }
        slse += logsumexp(K, main_term);
    }
    const double constant = -n * d * 0.5 * std::log(2.0 * M_PI);
    return constant + slse - n * logsumexp(K, alphas) + wishart_prior(K, d, icf, sum_qs, diags, gamma, m);
}

// cams [C, 11], points [P, 3], w [M], feats [M, 2]; GradBench's / ADBench's project() and radial_distort().
extern "C" double ba_hand(int64_t M, const double* cams, const double* points, const double* w,
                          const double* feats, const int64_t* cam_index, const int64_t* point_index) {
    double total = 0.0;
    for (int64_t j = 0; j < M; ++j) {
        const double* cam = &cams[cam_index[j] * 11];
        const double* X = &points[point_index[j] * 3];
        const double x[3] = {X[0] - cam[3], X[1] - cam[4], X[2] - cam[5]};
        const double theta = std::sqrt(cam[0] * cam[0] + cam[1] * cam[1] + cam[2] * cam[2]);
        const double cos_t = std::cos(theta), sin_t = std::sin(theta);
        const double k[3] = {cam[0] / theta, cam[1] / theta, cam[2] / theta};
        const double kx = (k[0] * x[0] + k[1] * x[1] + k[2] * x[2]) * (1.0 - cos_t);
        const double y0 = x[0] * cos_t + (k[1] * x[2] - k[2] * x[1]) * sin_t + k[0] * kx;
        const double y1 = x[1] * cos_t + (k[2] * x[0] - k[0] * x[2]) * sin_t + k[1] * kx;
        const double y2 = x[2] * cos_t + (k[0] * x[1] - k[1] * x[0]) * sin_t + k[2] * kx;
        const double u = y0 / y2, v = y1 / y2;
        const double rsq = u * u + v * v;
        const double distortion = 1.0 + cam[9] * rsq + cam[10] * rsq * rsq;
        const double e0 = w[j] * (cam[6] * u * distortion + cam[7] - feats[2 * j]);
        const double e1 = w[j] * (cam[6] * v * distortion + cam[8] - feats[2 * j + 1]);
        const double e2 = 1.0 - w[j] * w[j];
        total += e0 * e0 + e1 * e1 + e2 * e2;
    }
    return total;
}
