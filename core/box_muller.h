// The Box-Muller transform of randn, specified to the bit so the CPU loop and the CUDA kernel
// (core/fill_values.h) give the same normals: an f64 log and an f64 sin/cos of 2 pi u written
// here with +, -, *, / and explicit fused multiply-adds only.
// Decision: no libm and no CUDA math library. glibc's log/sin/cos and CUDA's differ in the last
// bit (CUDA documents 1-2 ulp), so randn could not be bit-identical across devices through them.
// Every product that feeds an addition is written as fma(), because g++ (-march=native, which
// contracts by default even under -std=c++20) and nvcc (--fmad=true) would otherwise each decide
// where to fuse; the remaining bare products feed only multiplies, square roots, divides or fma
// operands, or are exact (by 0.25 or 0.5), so no contraction can change a bit.
// Accuracy (tests/core/test_box_muller.cpp, against glibc and long double): log_f64 <= 1 ulp on
// (0, 1]; sin/cos of 2 pi u <= 1 ulp of the result plus 2^-54 absolute.
// Changing any constant or operation here changes every randn value: see docs/numerics.md.
#pragma once
#include <cmath>
#include <cstdint>

#include "mixgrad/core/fast_math.h"
#include "mixgrad/core/macros.h"

namespace mg::bm {

// Explicit fused multiply-add a * b + c, rounded once, on both compilers.
MG_HOST_DEVICE double fma_f64(double a, double b, double c) {
#if defined(__CUDA_ARCH__)
  return __fma_rn(a, b, c);
#else
  return std::fma(a, b, c);
#endif
}

// Natural log of a positive normal double (the randn argument lies in [2^-53, 1]). fdlibm's
// e_log.c reduction and polynomial (Sun Microsystems, freely redistributable): x = 2^k (1 + f)
// with 1 + f in [sqrt(2)/2, sqrt(2)), s = f / (2 + f), log(1 + f) = f - hfsq + s (hfsq + R(s^2)),
// hfsq = f^2 / 2, R the minimax polynomial Lg1..Lg7 (|error| < 2^-58.45 on that interval);
// k ln2 in two parts (ln2_hi has 32 trailing zero bits, so k ln2_hi is exact).
MG_HOST_DEVICE double log_f64(double x) {
  constexpr double ln2_hi = 6.93147180369123816490e-01, ln2_lo = 1.90821492927058770002e-10;
  constexpr double Lg1 = 6.666666666666735130e-01, Lg2 = 3.999999999940941908e-01,
                   Lg3 = 2.857142874366239149e-01, Lg4 = 2.222219843214978396e-01,
                   Lg5 = 1.818357216161805012e-01, Lg6 = 1.531383769920937332e-01,
                   Lg7 = 1.479819860511658591e-01;
  const uint64_t bits = fast::f64_bits(x);
  int k = int(bits >> 52) - 1023;
  double m = fast::f64_from_bits((bits & 0x000FFFFFFFFFFFFFull) | 0x3FF0000000000000ull);  // [1, 2)
  if (m > 1.4142135623730951) {
    m *= 0.5;  // exact
    ++k;
  }
  const double f = m - 1.0;  // exact (Sterbenz)
  const double s = f / (2.0 + f);
  const double z = s * s, w = z * z;
  const double odd = fma_f64(w, fma_f64(w, fma_f64(w, Lg7, Lg5), Lg3), Lg1);
  const double even = fma_f64(w, fma_f64(w, Lg6, Lg4), Lg2);
  const double R = fma_f64(w, even, z * odd);
  const double hf = 0.5 * f;  // exact; hfsq = hf * f is folded into the fmas below
  const double dk = double(k);
  const double a = fma_f64(hf, f, R);                 // hfsq + R
  const double b = fma_f64(s, a, dk * ln2_lo);        // s (hfsq + R) + k ln2_lo
  const double c = fma_f64(hf, f, -b) - f;            // (hfsq - b) - f
  return fma_f64(dk, ln2_hi, -c);                     // k ln2_hi - c
}

// sin and cos of x in [-pi/4 - 2^-50, pi/4 + 2^-50]: fdlibm's k_sin.c / k_cos.c minimax
// polynomials (S1..S6 |error| < 2^-58; C1..C6 < 2^-58), evaluated by Horner's rule with fmas;
// cos as a + ((1 - a) - x^2/2 + x^4 C(x^2)) with a = 1 - x^2/2, so the rounding of a is recovered
// exactly (x^2/2 <= 0.31 < 1, Fast2Sum).
MG_HOST_DEVICE double sin_kernel_f64(double x) {
  constexpr double S1 = -1.66666666666666324348e-01, S2 = 8.33333333332248946124e-03,
                   S3 = -1.98412698298579493134e-04, S4 = 2.75573137070700676789e-06,
                   S5 = -2.50507602534068634195e-08, S6 = 1.58969099521155010221e-10;
  const double z = x * x, v = z * x;
  const double r = fma_f64(z, fma_f64(z, fma_f64(z, fma_f64(z, S6, S5), S4), S3), S2);
  return fma_f64(v, fma_f64(z, r, S1), x);
}

MG_HOST_DEVICE double cos_kernel_f64(double x) {
  constexpr double C1 = 4.16666666666666019037e-02, C2 = -1.38888888888741095749e-03,
                   C3 = 2.48015872894767294178e-05, C4 = -2.75573143513906633035e-07,
                   C5 = 2.08757232129817482790e-09, C6 = -1.13596475577881948265e-11;
  const double z = x * x;
  const double p = fma_f64(z, fma_f64(z, fma_f64(z, fma_f64(z, fma_f64(z, C6, C5), C4), C3), C2), C1);
  const double hz = 0.5 * z;  // exact, so fusing it into the subtractions below changes nothing
  const double a = 1.0 - hz;
  const double lost = (1.0 - a) - hz;  // exact: the rounding error of a, negated
  return a + fma_f64(z * z, p, lost);
}

// sin(2 pi u) and cos(2 pi u) for u in [0, 1) a multiple of 2^-53 (philox_uniform_double).
// The quadrant is taken in u, exactly: q = round(4u), r = u - q/4 in [-1/8, 1/8] (both exact),
// then x = 2 pi r with 2 pi in two parts (the product's error is below 2^-100 before x's one
// rounding), and the kernels above with the quadrant's signs and swap.
struct SinCos {
  double s, c;
};
MG_HOST_DEVICE SinCos sincos_2pi_f64(double u) {
  constexpr double two_pi_hi = 6.283185307179586232e+00;   // nearest double to 2 pi
  constexpr double two_pi_lo = 2.449293598294706e-16;      // 2 pi - two_pi_hi
  const double qd = std::nearbyint(4.0 * u);               // 0..4, exact
  const double r = fma_f64(-0.25, qd, u);                  // exact
  const double x = fma_f64(r, two_pi_hi, r * two_pi_lo);
  const double sx = sin_kernel_f64(x), cx = cos_kernel_f64(x);
  switch (int(qd) & 3) {
    case 0: return {sx, cx};
    case 1: return {cx, -sx};
    case 2: return {-sx, -cx};
    default: return {-cx, sx};
  }
}

// The two standard normals of one Philox block's uniforms (core/philox.h): u1 in (0, 1] from
// words 0-1 (1 - uniform), u2 in [0, 1) from words 2-3; z0 = sqrt(-2 log u1) cos(2 pi u2),
// z1 = sqrt(-2 log u1) sin(2 pi u2), in f64 (each rounded once more to the output dtype).
struct NormalPair {
  double z0, z1;
};
MG_HOST_DEVICE NormalPair box_muller_f64(double u1, double u2) {
  const double rad = std::sqrt(-2.0 * log_f64(u1));  // sqrt: correctly rounded on both devices
  const SinCos sc = sincos_2pi_f64(u2);
  return {rad * sc.c, rad * sc.s};
}

}  // namespace mg::bm
