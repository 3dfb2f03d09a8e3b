// bench_gemm: the GEMM libraries mixgrad could call, on the GEMM shapes of bench_amp's models
// (MLP 784-1024-1024-10 at batch 256, BERT-mini at 32 x 128 tokens), each layer's forward product
// and both backward products, at the thread count given:
//   sgemm        oneDNN 2.6's legacy dnnl_sgemm (what the CPU driver runs for f32)
//   matmul       oneDNN 2.6's matmul primitive, created once per shape (cached), weights in place
//   matmul+bias  the same with the bias as part of the primitive (linear's forward)
//   bf16 native  dnnl_gemm_bf16bf16f32 (only where oneDNN implements it: avx512_core and up)
//   bf16 matmul  the matmul primitive on bf16 operands with an f32 result (only where its
//                implementation is not oneDNN's reference loop)
//   bf16->f32    both bf16 operands converted to f32 scratch, then dnnl_sgemm, the f32 result
//                rounded to bf16 (the driver's fallback on AVX2-only processors), and the same
//                with the weight operand converted once beforehand (a cache of converted weights)
//   mg f32, mg bf16  mixgrad's CPU GEMM driver (mg::cpu::gemm, every processor-dependent path as
//                detected: ops/cpu/gemm.h) on the same operands, and the same with the padded copy of
//                an aliased transposed `a` switched off ("mg nopad": the driver before it)
// It prints GFLOP per CPU-second (2nkm / the least process CPU time of the repetitions: on a
// shared, loaded machine CPU time is what a process got; at 1 thread it is GFLOP/s) and which
// implementation oneDNN picked. Run with OMP_WAIT_POLICY=PASSIVE so idle workers do not spin.
#include <oneapi/dnnl/dnnl.h>
#include <oneapi/dnnl/dnnl.hpp>

#include <cstdint>
#include <cstring>
#include <ctime>
#include <memory>
#include <random>
#include <unordered_map>

#include "bench_common.h"
#include "mixgrad/core/half.h"
#include "mixgrad/core/parallel.h"
#include "mixgrad/ops/cpu/gemm.h"

extern "C" dnnl_status_t dnnl_gemm_bf16bf16f32(char transa, char transb, dnnl_dim_t M, dnnl_dim_t N,
                                               dnnl_dim_t K, float alpha, const uint16_t* A, dnnl_dim_t lda,
                                               const uint16_t* B, dnnl_dim_t ldb, float beta, float* C,
                                               dnnl_dim_t ldc);

namespace {

// One GEMM out[n, m] = a @ b with a [n, k] and b [k, m], each row-major ('N') or the transpose
// of a row-major matrix ('T').
struct Shape {
  const char* model;
  const char* what;
  int64_t n, k, m;
  char ta, tb;
};

// linear(x[N, in], W[out, in]): forward x @ W^T (N T), dX = dY @ W (N N), dW = dY^T @ x (T N).
void add_linear(std::vector<Shape>& v, const char* model, const char* layer, int64_t rows, int64_t in, int64_t out) {
  (void)layer;
  v.push_back({model, "fwd", rows, in, out, 'N', 'T'});
  v.push_back({model, "dX", rows, out, in, 'N', 'N'});
  v.push_back({model, "dW", out, rows, in, 'T', 'N'});
}

uint16_t to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  u += 0x7fff + ((u >> 16) & 1);
  return uint16_t(u >> 16);
}

__attribute__((target("avx2"))) void bf16_to_f32(const uint16_t* s, float* d, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(d + i), _mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
  for (; i < n; ++i) {
    const uint32_t u = uint32_t(s[i]) << 16;
    std::memcpy(d + i, &u, 4);
  }
}

// Round to nearest even (no NaN handling: the benchmark's values are finite), 8 at a time.
__attribute__((target("avx2"))) void f32_to_bf16(const float* s, uint16_t* d, int64_t n) {
  int64_t i = 0;
  const __m256i bias = _mm256_set1_epi32(0x7fff), one = _mm256_set1_epi32(1);
  for (; i + 8 <= n; i += 8) {
    const __m256i u = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i));
    const __m256i r = _mm256_srli_epi32(
        _mm256_add_epi32(u, _mm256_add_epi32(bias, _mm256_and_si256(_mm256_srli_epi32(u, 16), one))), 16);
    const __m128i packed = _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(d + i), packed);
  }
  for (; i < n; ++i) d[i] = to_bf16(s[i]);
}

// The least process CPU time (all threads) of `reps` runs after a warm-up.
double cpu_seconds_best_of(int reps, const std::function<void()>& fn) {
  auto now = [] {
    timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return double(t.tv_sec) + 1e-9 * double(t.tv_nsec);
  };
  fn();
  double best = 1e300;
  for (int r = 0; r < reps; ++r) {
    const double t0 = now();
    fn();
    best = std::min(best, now() - t0);
  }
  return best;
}

double gflops(const Shape& s, double seconds) { return 2.0 * double(s.n) * double(s.k) * double(s.m) / seconds / 1e9; }

}  // namespace

int main(int argc, char** argv) {
  bench::Config cfg;
  if (const int rc = bench::parse_args(argc, argv, "bench_gemm", cfg); rc >= 0) return rc;
  omp_set_num_threads(cfg.threads);
  mg::set_num_threads(cfg.threads);
  const int reps = cfg.quick ? 1 : 5;
  const int64_t sc = cfg.quick ? 8 : 1;  // the smoke run shrinks every dimension

  std::vector<Shape> shapes;
  add_linear(shapes, "mlp", "fc1", 256 / sc, 784 / sc, 1024 / sc);
  add_linear(shapes, "mlp", "fc2", 256 / sc, 1024 / sc, 1024 / sc);
  const int64_t tokens = 4096 / sc, hidden = 256 / sc, ffn = 1024 / sc, vocab = 8192 / sc;
  add_linear(shapes, "bert", "qkv/out/transform", tokens, hidden, hidden);
  add_linear(shapes, "bert", "ffn1", tokens, hidden, ffn);
  add_linear(shapes, "bert", "ffn2", tokens, ffn, hidden);
  add_linear(shapes, "bert", "decoder", tokens, hidden, vocab);

  dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  dnnl::stream strm(eng);
  const dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();
  std::printf("bench_gemm: %d thread(s), least process CPU time of %d, oneDNN %d.%d effective ISA 0x%x, avx512f %d\n", cfg.threads,
              reps, dnnl_version()->major, dnnl_version()->minor, unsigned(isa), __builtin_cpu_supports("avx512f"));
  bench::print_load_average();
  const mg::cpu::GemmPaths paths = mg::cpu::gemm_detected_paths();
  std::printf("mixgrad GEMM paths: bf16_native %d, pad_aliased %d, bf16_matmul %d, f32_matmul %d\n", paths.bf16_native,
              paths.pad_aliased, paths.bf16_matmul, paths.f32_matmul);
  std::printf("%-5s %-4s %-18s %7s %7s %7s %7s %7s %7s %7s %7s %7s %7s %7s  %s\n", "model", "prod",
              "n x k x m (ta tb)", "sgemm", "matmul", "mm+bias", "bf16nat", "bf16mm", "bf16->32", "bf16c32", "mg f32",
              "nopad", "mg bf16", "nopad", "matmul impl (f32 / bf16)");

  std::mt19937 rng(1);
  std::uniform_real_distribution<float> uni(-1.f, 1.f);
  std::vector<bench::Row> rows;
  for (const Shape& s : shapes) {
    const int64_t n = s.n, k = s.k, m = s.m;
    std::vector<float> a(std::size_t(n * k)), b(std::size_t(k * m)), c(std::size_t(n * m)), bias(static_cast<std::size_t>(m));
    for (float& x : a) x = uni(rng);
    for (float& x : b) x = uni(rng);
    for (float& x : bias) x = uni(rng);
    std::vector<uint16_t> a16(a.size()), b16(b.size()), c16(c.size());
    for (std::size_t i = 0; i < a.size(); ++i) a16[i] = to_bf16(a[i]);
    for (std::size_t i = 0; i < b.size(); ++i) b16[i] = to_bf16(b[i]);
    const int64_t lda = s.ta == 'N' ? k : n, ldb = s.tb == 'N' ? m : k;

    const double t_sgemm = cpu_seconds_best_of(reps, [&] {
      dnnl_sgemm(s.ta, s.tb, n, m, k, 1.f, a.data(), lda, b.data(), ldb, 0.f, c.data(), m);
    });

    // matmul primitive: a [n, k] and b [k, m] with the strides of their layouts.
    using dt = dnnl::memory::data_type;
    auto md = [](int64_t r, int64_t cols, char t, dt type) {
      return t == 'N' ? dnnl::memory::desc({r, cols}, type, {cols, 1}) : dnnl::memory::desc({r, cols}, type, {1, r});
    };
    std::string impl32, impl16;
    auto time_matmul = [&](dt type, bool with_bias, std::string* impl) -> double {
      const auto amd = md(n, k, s.ta, type), bmd = md(k, m, s.tb, type);
      const dnnl::memory::desc cmd({n, m}, dt::f32, {m, 1});
      const dnnl::memory::desc biasmd({1, m}, dt::f32, {m, 1});
      std::unique_ptr<dnnl::matmul::primitive_desc> pd;
      try {
        pd = std::make_unique<dnnl::matmul::primitive_desc>(
            with_bias ? dnnl::matmul::desc(amd, bmd, biasmd, cmd) : dnnl::matmul::desc(amd, bmd, cmd), eng);
      } catch (const dnnl::error&) {
        if (impl) *impl = "none";
        return 0.0;
      }
      if (impl) *impl = pd->impl_info_str();
      if (std::string(pd->impl_info_str()).find("ref") != std::string::npos) return 0.0;  // not worth timing
      dnnl::matmul prim(*pd);
      void* ap = type == dt::f32 ? static_cast<void*>(a.data()) : static_cast<void*>(a16.data());
      void* bp = type == dt::f32 ? static_cast<void*>(b.data()) : static_cast<void*>(b16.data());
      dnnl::memory am(amd, eng, ap), bm(bmd, eng, bp), cm(cmd, eng, c.data()), biasm(biasmd, eng, bias.data());
      std::unordered_map<int, dnnl::memory> args{{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, cm}};
      if (with_bias) args.insert({DNNL_ARG_BIAS, biasm});
      const double t = cpu_seconds_best_of(reps, [&] {
        prim.execute(strm, args);
        strm.wait();
      });
      return gflops(s, t);
    };
    const double g_matmul = time_matmul(dt::f32, false, &impl32);
    const double g_bias = s.ta == 'N' && s.tb == 'T' ? time_matmul(dt::f32, true, nullptr) : 0.0;
    const double g_mm16 = time_matmul(dt::bf16, false, &impl16);

    double g_native = 0;
    if (dnnl_gemm_bf16bf16f32(s.ta, s.tb, n, m, k, 1.f, a16.data(), lda, b16.data(), ldb, 0.f, c.data(), m) ==
        dnnl_success) {
      g_native = gflops(s, cpu_seconds_best_of(reps, [&] {
                          dnnl_gemm_bf16bf16f32(s.ta, s.tb, n, m, k, 1.f, a16.data(), lda, b16.data(), ldb, 0.f,
                                                c.data(), m);
                          f32_to_bf16(c.data(), c16.data(), n * m);
                        }));
    }
    std::vector<float> af(a.size()), bf(b.size());
    const double t_conv = cpu_seconds_best_of(reps, [&] {
      bf16_to_f32(a16.data(), af.data(), n * k);
      bf16_to_f32(b16.data(), bf.data(), k * m);
      dnnl_sgemm(s.ta, s.tb, n, m, k, 1.f, af.data(), lda, bf.data(), ldb, 0.f, c.data(), m);
      f32_to_bf16(c.data(), c16.data(), n * m);
    });
    // The weight operand (b in fwd/dX, and for dW neither is a weight: a is dY, b is x).
    const bool b_is_weight = s.ta == 'N';
    bf16_to_f32(b16.data(), bf.data(), k * m);
    const double t_cached = cpu_seconds_best_of(reps, [&] {
      bf16_to_f32(a16.data(), af.data(), n * k);
      if (!b_is_weight) bf16_to_f32(b16.data(), bf.data(), k * m);
      dnnl_sgemm(s.ta, s.tb, n, m, k, 1.f, af.data(), lda, bf.data(), ldb, 0.f, c.data(), m);
      f32_to_bf16(c.data(), c16.data(), n * m);
    });

    // mixgrad's driver on the same operands: a [n, k] and b [k, m] with the strides of their layouts.
    auto time_mg = [&](bool bf16, bool pad) {
      mg::GemmProblem p;
      p.n = n, p.k = k, p.m = m;
      p.a = {bf16 ? static_cast<const void*>(a16.data()) : a.data(), {}, s.ta == 'N' ? k : 1, s.ta == 'N' ? 1 : n};
      p.b = {bf16 ? static_cast<const void*>(b16.data()) : b.data(), {}, s.tb == 'N' ? m : 1, s.tb == 'N' ? 1 : k};
      p.out = bf16 ? static_cast<void*>(c16.data()) : c.data();
      mg::cpu::GemmPaths forced = paths;  // the detected paths but the padding
      forced.pad_aliased = pad;
      mg::cpu::gemm_force_paths(forced);
      const double t = cpu_seconds_best_of(reps, [&] {
        if (bf16) {
          mg::cpu::gemm<mg::BFloat16>(p);
        } else {
          mg::cpu::gemm<float>(p);
        }
      });
      mg::cpu::gemm_force_paths(std::nullopt);
      return gflops(s, t);
    };
    const double g_mg32 = time_mg(false, paths.pad_aliased), g_mg32_nopad = time_mg(false, false);
    const double g_mg16 = time_mg(true, paths.pad_aliased), g_mg16_nopad = time_mg(true, false);

    char shape[64];
    std::snprintf(shape, sizeof shape, "%lldx%lldx%lld %c%c", (long long)n, (long long)k, (long long)m, s.ta, s.tb);
    std::printf("%-5s %-4s %-18s %7.1f %7.1f %7.1f %7.1f %7.1f %7.1f %7.1f %7.1f %7.1f %7.1f %7.1f  %s / %s\n",
                s.model, s.what, shape, gflops(s, t_sgemm), g_matmul, g_bias, g_native, g_mm16, gflops(s, t_conv),
                gflops(s, t_cached), g_mg32, g_mg32_nopad, g_mg16, g_mg16_nopad, impl32.c_str(), impl16.c_str());
    const std::string name = std::string(s.model) + " " + s.what;
    rows.push_back({name + " sgemm", "f32", shape, gflops(s, t_sgemm), "GFLOP/s", "", 0, 0});
    rows.push_back({name + " matmul", "f32", shape, g_matmul, "GFLOP/s", "sgemm", gflops(s, t_sgemm),
                    g_matmul / gflops(s, t_sgemm)});
    rows.push_back({name + " bf16->f32", "bf16", shape, gflops(s, t_conv), "GFLOP/s", "sgemm", gflops(s, t_sgemm),
                    t_sgemm / t_conv});
    rows.push_back({name + " mg", "f32", shape, g_mg32, "GFLOP/s", "mg nopad", g_mg32_nopad, g_mg32 / g_mg32_nopad});
    rows.push_back({name + " mg", "bf16", shape, g_mg16, "GFLOP/s", "mg nopad", g_mg16_nopad, g_mg16 / g_mg16_nopad});
  }
  if (!cfg.json.empty() && !bench::write_json(cfg.json, rows)) return 1;
  std::printf("columns: GFLOP per CPU-second (0: not available here). bf16->32: both operands converted every call; bf16c32: the\n"
              "weight operand converted once beforehand (fwd, dX); mm+bias: forward with the bias in the primitive;\n"
              "nopad: the column before it with pad_aliased off.\n");
  return 0;
}
