// Tests of prelude/ks/prelude.h against Python semantics. No framework: prints each failure,
// ends with "N passed, M failed" and returns nonzero if anything failed.
#include <ks/prelude.h>

#include <cmath>
#include <cstdint>
#include <cstdio>

namespace {

int passed = 0;
int failed = 0;

// Records one check; prints the expression and line when it fails.
void check(bool ok, const char* what, int line) {
    if (ok) {
        ++passed;
    } else {
        ++failed;
        std::printf("FAIL line %d: %s\n", line, what);
    }
}

#define CHECK(expr) check((expr), #expr, __LINE__)

// Exact equality that also treats two NaNs as equal.
template <class T>
bool same(T a, T b) {
    if constexpr (ks::detail::is_floating<T>) {
        if (std::isnan(a) && std::isnan(b)) return true;
    }
    return a == b;
}

// ipow<N> for N = 0..5 and -2 against a multiplication loop.
template <class T>
void test_ipow(T x) {
    CHECK(same(ks::ipow<0>(x), T(1)));
    CHECK(same(ks::ipow<1>(x), x));
    CHECK(same(ks::ipow<2>(x), T(x * x)));
    CHECK(same(ks::ipow<3>(x), T(x * x * x)));
    CHECK(same(ks::ipow<4>(x), T(x * x * x * x)));
    CHECK(same(ks::ipow<5>(x), T(x * x * x * x * x)));
}

// The Python examples for every sign combination of a // b and a % b.
template <class T>
void test_int_division_examples() {
    CHECK(ks::floordiv<T>(7, 2) == 3);
    CHECK(ks::floordiv<T>(-7, 2) == -4);
    CHECK(ks::floordiv<T>(7, -2) == -4);
    CHECK(ks::floordiv<T>(-7, -2) == 3);
    CHECK(ks::mod<T>(7, 2) == 1);
    CHECK(ks::mod<T>(-7, 2) == 1);
    CHECK(ks::mod<T>(7, -2) == -1);
    CHECK(ks::mod<T>(-7, -2) == -1);
    CHECK(ks::floordiv<T>(6, -2) == -3);
    CHECK(ks::mod<T>(6, -2) == 0);
    CHECK(ks::floordiv<T>(0, -3) == 0);
    CHECK(ks::mod<T>(0, -3) == 0);
}

// Python's identities on a grid: q = floor(a / b), a == q * b + r, r has the sign of b.
template <class T>
void test_int_division_grid() {
    int bad = 0;
    for (int a = -20; a <= 20; ++a) {
        for (int b = -6; b <= 6; ++b) {
            if (b == 0) continue;
            const T q = ks::floordiv<T>(T(a), T(b));
            const T r = ks::mod<T>(T(a), T(b));
            const bool ok = q == T(std::floor(double(a) / double(b))) && T(q * b + r) == T(a) &&
                            (r == 0 || (r < 0) == (b < 0)) && ks::abs(r) < ks::abs(T(b));
            if (!ok) {
                ++bad;
                std::printf("  %d // %d gave %lld, %% gave %lld\n", a, b, (long long)q, (long long)r);
            }
        }
    }
    CHECK(bad == 0);
}

// Float // and % follow Python: -7.5 // 2 == -4 and -7.5 % 2 == 0.5.
template <class T>
void test_float_division() {
    CHECK(ks::floordiv<T>(T(-7.5), T(2)) == T(-4));
    CHECK(ks::mod<T>(T(-7.5), T(2)) == T(0.5));
    CHECK(ks::floordiv<T>(T(7.5), T(2)) == T(3));
    CHECK(ks::mod<T>(T(7.5), T(2)) == T(1.5));
    CHECK(ks::floordiv<T>(T(7.5), T(-2)) == T(-4));
    CHECK(ks::mod<T>(T(7.5), T(-2)) == T(-0.5));
    CHECK(ks::floordiv<T>(T(-7.5), T(-2)) == T(3));
    CHECK(ks::mod<T>(T(-7.5), T(-2)) == T(-1.5));
}

// max, min, sign and abs, including the documented NaN and zero cases.
template <class T>
void test_select_ops() {
    CHECK(ks::max<T>(2, 3) == 3);
    CHECK(ks::max<T>(3, 2) == 3);
    CHECK(ks::max<T>(-2, -3) == -2);
    CHECK(ks::min<T>(2, 3) == 2);
    CHECK(ks::min<T>(3, 2) == 2);
    CHECK(ks::min<T>(-2, -3) == -3);
    CHECK(ks::sign<T>(5) == 1);
    CHECK(ks::sign<T>(-5) == -1);
    CHECK(ks::sign<T>(0) == 0);
    CHECK(ks::abs<T>(-4) == 4);
    CHECK(ks::abs<T>(4) == 4);
    CHECK(ks::abs<T>(0) == 0);
}

// Float-only cases: NaN through sign/max/min, signed zero through abs, logistic.
template <class T>
void test_float_only() {
    const T nan = std::nan("");
    CHECK(std::isnan(ks::sign(nan)));
    CHECK(!std::signbit(ks::abs(T(-0.0))));
    CHECK(ks::max(nan, T(1)) == T(1));
    CHECK(std::isnan(ks::max(T(1), nan)));
    CHECK(ks::min(nan, T(1)) == T(1));
    CHECK(same(ks::ipow<-2>(T(2)), T(0.25)));
    CHECK(same(ks::ipow<-2>(T(-4)), T(0.0625)));
    CHECK(ks::logistic(T(0)) == T(0.5));
    CHECK(std::isfinite(ks::logistic(T(100))) && ks::logistic(T(100)) == T(1));
    CHECK(std::isfinite(ks::logistic(T(-100))) && ks::logistic(T(-100)) >= T(0));
    CHECK(ks::logistic(T(-100)) < T(1e-40));
    CHECK(std::fabs(ks::logistic(T(2)) - T(0.8807970779778823)) < T(1e-6));
    CHECK(std::fabs(ks::logistic(T(-2)) - T(0.11920292202211755)) < T(1e-6));
    CHECK(std::isnan(ks::logistic(nan)));
}

// Everything is usable in constant expressions where it is constexpr.
static_assert(ks::ipow<3>(2) == 8, "ipow constexpr");
static_assert(ks::ipow<0>(0.0) == 1.0, "ipow of 0 to the 0");
static_assert(ks::max(1, 2) == 2 && ks::min(1, 2) == 1 && ks::sign(-3) == -1, "constexpr selects");
static_assert(ks::status::ok == 0 && ks::status::err_shape == 1 && ks::status::err_null == 2,
              "status codes are part of the C ABI");

}  // namespace

int main() {
    const float floats[] = {0.0f, 1.0f, -1.5f, 2.0f, 3.25f};
    const double doubles[] = {0.0, 1.0, -1.5, 2.0, 3.25};
    const int32_t int32s[] = {0, 1, -3, 7};
    const int64_t int64s[] = {0, 1, -3, 7, 1000};
    for (float x : floats) test_ipow<float>(x);
    for (double x : doubles) test_ipow<double>(x);
    for (int32_t x : int32s) test_ipow<int32_t>(x);
    for (int64_t x : int64s) test_ipow<int64_t>(x);

    test_int_division_examples<int32_t>();
    test_int_division_examples<int64_t>();
    test_int_division_grid<int32_t>();
    test_int_division_grid<int64_t>();
    test_float_division<float>();
    test_float_division<double>();

    test_select_ops<float>();
    test_select_ops<double>();
    test_select_ops<int32_t>();
    test_select_ops<int64_t>();
    test_float_only<float>();
    test_float_only<double>();

    std::printf("%d passed, %d failed\n", passed, failed);
    return failed == 0 ? 0 : 1;
}
