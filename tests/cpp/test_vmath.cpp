// Accuracy of ks::exp, ks::log and ks::tanh (prelude/ks/vmath.h) against the C library: the largest
// error in ulps over a million arguments spread across each function's whole range, plus the
// special values. Prints the worst cases; returns nonzero if any error exceeds the bound.
#include <ks/prelude.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>

namespace {

int failed = 0;

// The distance between a and b in units in the last place of b (the reference).
template <class T>
double ulps(T a, T b) {
    if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b) ? 0.0 : 1e30;
    if (std::isinf(a) || std::isinf(b)) return a == b ? 0.0 : 1e30;
    const T step = std::nextafter(b, std::numeric_limits<T>::infinity()) - b;
    const T spacing = step > 0 ? step : std::numeric_limits<T>::denorm_min();
    return std::fabs(static_cast<double>(a) - static_cast<double>(b)) / static_cast<double>(spacing);
}

// A deterministic pseudo-random double in [lo, hi] (xorshift64).
double uniform(uint64_t& s, double lo, double hi) {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    return lo + (hi - lo) * static_cast<double>(s >> 11) / 9007199254740992.0;
}

template <class T, class F, class G>
void sweep(const char* name, F mine, G libm, double lo, double hi, bool log_spaced, double bound) {
    uint64_t s = 88172645463325252ULL;
    double worst = 0.0;
    T worst_x = 0;
    for (int i = 0; i < 1000000; ++i) {
        const double u = uniform(s, lo, hi);
        const T x = static_cast<T>(log_spaced ? std::exp2(u) : u);
        const double e = ulps<T>(mine(x), libm(x));
        if (e > worst) {
            worst = e;
            worst_x = x;
        }
    }
    std::printf("%-12s worst %.3f ulp at %.17g\n", name, worst, static_cast<double>(worst_x));
    if (worst > bound) ++failed;
}

template <class T>
void special(const char* name, T got, T want) {
    if (ulps<T>(got, want) != 0.0) {
        std::printf("FAIL %s: got %.17g want %.17g\n", name, static_cast<double>(got), static_cast<double>(want));
        ++failed;
    }
}

}  // namespace

int main() {
    auto exp_d = [](double x) { return ks::exp(x); };
    auto log_d = [](double x) { return ks::log(x); };
    auto exp_f = [](float x) { return ks::exp(x); };
    auto log_f = [](float x) { return ks::log(x); };
    auto std_exp_d = [](double x) { return std::exp(x); };
    auto std_log_d = [](double x) { return std::log(x); };
    auto std_exp_f = [](float x) { return static_cast<float>(std::exp(static_cast<double>(x))); };
    auto std_log_f = [](float x) { return static_cast<float>(std::log(static_cast<double>(x))); };
    sweep<double>("exp f64", exp_d, std_exp_d, -745.0, 709.7, false, 2.0);
    sweep<double>("exp f64 |x|<1", exp_d, std_exp_d, -1.0, 1.0, false, 2.0);
    sweep<double>("log f64", log_d, std_log_d, -1074.0, 1023.9, true, 2.0);
    sweep<double>("log f64 ~1", log_d, std_log_d, -0.1, 0.1, true, 2.0);
    sweep<float>("exp f32", exp_f, std_exp_f, -103.0, 88.7, false, 2.0);
    sweep<float>("log f32", log_f, std_log_f, -149.0, 127.9, true, 2.0);
    sweep<float>("log f32 ~1", log_f, std_log_f, -0.1, 0.1, true, 2.0);
    auto tanh_d = [](double x) { return ks::tanh(x); };
    auto tanh_f = [](float x) { return ks::tanh(x); };
    auto std_tanh_d = [](double x) { return std::tanh(x); };
    auto std_tanh_f = [](float x) { return static_cast<float>(std::tanh(static_cast<double>(x))); };
    sweep<double>("tanh f64", tanh_d, std_tanh_d, -20.0, 20.0, false, 3.0);
    sweep<double>("tanh f64 ~0", tanh_d, std_tanh_d, -60.0, 0.0, true, 3.0);
    sweep<float>("tanh f32", tanh_f, std_tanh_f, -10.0, 10.0, false, 2.0);
    sweep<float>("tanh f32 ~0", tanh_f, std_tanh_f, -40.0, 0.0, true, 2.0);
    const double inf = std::numeric_limits<double>::infinity();
    const double nan = std::numeric_limits<double>::quiet_NaN();
    special<double>("exp(inf)", ks::exp(inf), inf);
    special<double>("exp(-inf)", ks::exp(-inf), 0.0);
    special<double>("exp(nan)", ks::exp(nan), nan);
    special<double>("exp(1000)", ks::exp(1000.0), inf);
    special<double>("exp(0)", ks::exp(0.0), 1.0);
    special<double>("log(0)", ks::log(0.0), -inf);
    special<double>("log(-1)", ks::log(-1.0), nan);
    special<double>("log(inf)", ks::log(inf), inf);
    special<double>("log(nan)", ks::log(nan), nan);
    special<double>("log(1)", ks::log(1.0), 0.0);
    special<float>("expf(inf)", ks::exp(static_cast<float>(inf)), static_cast<float>(inf));
    special<float>("expf(-inf)", ks::exp(-static_cast<float>(inf)), 0.0f);
    special<float>("logf(0)", ks::log(0.0f), -static_cast<float>(inf));
    special<float>("logf(-2)", ks::log(-2.0f), static_cast<float>(nan));
    special<double>("tanh(inf)", ks::tanh(inf), 1.0);
    special<double>("tanh(-inf)", ks::tanh(-inf), -1.0);
    special<double>("tanh(nan)", ks::tanh(nan), nan);
    special<double>("tanh(-0)", ks::tanh(-0.0), -0.0);
    special<float>("tanhf(-50)", ks::tanh(-50.0f), -1.0f);
    special<float>("tanhf(nan)", ks::tanh(static_cast<float>(nan)), static_cast<float>(nan));
    std::printf("%s\n", failed ? "FAILED" : "ok");
    return failed ? 1 : 0;
}
