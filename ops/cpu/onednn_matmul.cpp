// Products on oneDNN's matmul primitive (see ops/cpu/onednn_matmul.h).
//
// bf16 decision: on AMX processors the matmul primitive (brgemm kernels, "brg:avx512_core_amx_bf16" in
// oneDNN 2.6) runs bf16 products that dnnl_gemm_bf16bf16f32 runs up to 2x slower, and a few
// slower than it. Measured on one thread of a Xeon with AMX (2026-12-02, throwaway probe: best of
// 5x5 calls, GFLOP/s, BLAS-like GEMM -> matmul with f32 output; A transposed = TN):
//   MLP      x @ W^T 256x1024x784 / 256x1024x1024      702 / 801 -> 659 / 772   (even)
//            dY @ W 256x1024x1024                        705 -> 652              (even)
//            dW = dY^T @ x 1024x1024x256 / 1024x784x256  445 / 765 -> 660 / 776
//            x @ W3^T 256x10x1024                         164 -> 331
//            dW3 10x1024x256 (10 rows)                    267 -> 205              (slower)
//   BERT-mini FFN up 4096x1024x256, QKV 4096x768x256     424 / 443 -> 761 / 776
//            FFN down 4096x256x1024, its dX 4096x256x1024 772 / 767 -> 953 / 940
//            decoder 4096x8192x256                        196 -> 266
//            dW over 4096 tokens: decoder 8192x256x4096 TN, FFN 1024x256x4096 TN
//                                                         722 / 775 -> 458 / 698  (slower)
//            decoder dX 4096x256x8192                     776 -> 691              (slower)
//   1024x1024x2048 NT / TN                               739 / 720 -> 865 / 567
// So the primitive runs products with k <= 2048 (k <= 1024 when A is transposed) and at least 16
// rows; the rest stay on the BLAS-like GEMM. PyTorch 2.15's bf16 mm (oneDNN 3.x) runs these shapes
// at 860-1820 GFLOP/s; oneDNN 3.x is not in Debian 12.
//
// On an AMD EPYC with AVX512-BF16 and no AMX (Zen 4, "brg:avx512_core_bf16"), where bf16 runs
// natively (native_bf16_preferred), bench_gemm put the primitive at 1.05-1.5x the BLAS-like bf16
// GEMM on every MLP product at 2 threads and even at 1 (within 3%, dW 0.88-0.92x), and the earlier
// probe found it 0.77-0.84x on 8192-column outputs (BERT-mini's decoder). Whole training steps,
// bench_amp alternating the two, 2026-12-03, ms per step (base -> primitive for x @ W^T and dY @ W
// with m <= 1024 and k <= 2048): 2 threads MLP O3 bf16 11.5/10.5/11.2/9.0 -> 10.4/9.2/8.8/8.1 and
// 8.7/8.7 -> 7.8/7.4, MLP O1 10.5/8.8 -> 8.3/8.7, BERT-mini O3 611/602 -> 594/591, O1 602/607 ->
// 595/598; 1 thread no gain (BERT-mini 1038-1052 -> 1050-1094, the MLP within noise). So on such
// processors the primitive runs those products from 2 threads on; the BLAS-like GEMM the rest
// (weight gradients, wide outputs, 1 thread). The summation order, and so the last bits of a bf16
// product, then differ between 1 thread and more.
//
// Numerics: the same f32 accumulation of exact bf16 products as the BLAS-like GEMM, in another
// summation order; the output stays f32 and the driver rounds it (the primitive's own bf16 output
// would flush subnormal results to zero, against docs/numerics.md).
// f32 decision: oneDNN 2.6's AVX-512 sgemm reads a transposed `a` whose leading dimension is a
// multiple of 1024 floats (4 KiB: the lines it reads fall into the same cache sets) up to 2x slower
// when m <= 512, the blocking a weight gradient dW = dY^T @ x over many tokens gets; the matmul
// primitive's brgemm kernels do not (a copy with a padded leading dimension recovers the same speed,
// but costs a pass over dY). Measured on a Xeon with AVX512-BF16 and no AMX (2026-12-03, throwaway
// probe, best of 7x3 calls, GFLOP/s, dnnl_sgemm -> matmul primitive, the operands' own layouts):
//   1 thread, n x k x m with lda = n:  n = 1024..4096 (multiples of 1024), k = 1024..4096,
//     m = 64..512: 53-118 -> 94-137 (1.04-1.97x, 1.35x median); m = 1024: 125-141 -> 114-128 (0.9x)
//     n = 512, 768: within noise of each other (0.91-1.18x) at every k and m
//   2 threads, the same grid: m <= 512 1.01-1.62x (1.37x median), m = 1024 0.89-1.26x
//   BERT-mini's FFN-up dW 1024x4096x256 / decoder dW 8192x4096x256: 74-105 / 82-101 -> 109-130 /
//     114-137 (1 thread), 144-164 / 134-160 -> 188-244 / 182-230 (2 threads)
//   the model's other products (fwd, dX, dW with lda 256 or 768, the MLP's k = 256 dW): the
//     primitive within noise of sgemm or slower, so they stay on sgemm.
// The same aliasing hits a transposed weight (x @ W^T: `b` col-major with ldb = k) on an AMD EPYC
// with AVX-512 (2026-12-03, throwaway probe, best of 7 calls, wall GFLOP/s, dnnl_sgemm -> matmul
// primitive, n = 128..4096, k = 512..4096, m = 256..2048): with k % 1024 == 0, 1 thread 0.95-1.25x
// (1.08x median), 2 threads 1.00-2.03x (1.45x median; the MLP's hidden layer 256x1024x1024 66-69
// -> 205-214 in bench_gemm); other k 0.94-1.62x (1.11x median) at 2 threads, 0.94-1.47x (1.01x) at
// 1. On the Xeon the two traded places on NT shapes from run to run (no rule was drawn there).
// So f32 products with a col-major `a`, lda % 1024 == 0, k >= 1024 and m <= 512, and those with a
// col-major `b`, ldb % 1024 == 0 and k >= 1024, run the primitive where it has brgemm kernels
// (avx512_core and up; on AVX2 it runs the same jit kernels as sgemm, whose aliasing the driver's
// padded copy handles). The same exact products and f32 sums, in another order.
#include "mixgrad/ops/cpu/onednn_matmul.h"

#include <oneapi/dnnl/dnnl.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

#include <array>
#include <atomic>
#include <bit>
#include <cstring>
#include <string_view>
#include <type_traits>
#include <unordered_map>

#include "mixgrad/core/error.h"
#include "mixgrad/core/parallel.h"
#include "mixgrad/ops/cpu/onednn_runtime.h"

namespace mg::cpu {
namespace {

using dnnl::memory;
using Dt = memory::data_type;

std::atomic<int64_t> g_calls_bf16{0}, g_calls_f32{0};

struct Plan {
  bool ok = false;  // false: oneDNN offers no brgemm kernel here (the caller keeps its GEMM)
  dnnl::matmul prim;
  memory::desc a, b, out, scratchpad;
};

// The data type, n, k, m, the operands' layouts and leading dimensions, alpha and beta (bits), the
// thread count (oneDNN sizes its kernels for it at creation).
using Key = std::array<int64_t, 11>;
using PlanCache = onednn::LruCache<Key, Plan, onednn::ArrayHash>;

PlanCache& plan_cache() {
  static PlanCache c(256);
  return c;
}

// A [rows, cols] matrix of type dt, row-major or col-major with leading dimension ld.
memory::desc matrix(Dt dt, int64_t rows, int64_t cols, bool col, int64_t ld) {
  return memory::desc({rows, cols}, dt, col ? memory::dims{1, ld} : memory::dims{ld, 1});
}

std::shared_ptr<const Plan> make_plan(Dt dt, bool a_col, int64_t lda, bool b_col, int64_t ldb, int64_t n, int64_t k,
                                      int64_t m, float alpha, float beta) {
  auto plan = std::make_shared<Plan>();
  plan->a = matrix(dt, n, k, a_col, lda);
  plan->b = matrix(dt, k, m, b_col, ldb);
  plan->out = memory::desc({n, m}, Dt::f32, memory::dims{m, 1});
  dnnl::primitive_attr attr = onednn::user_scratchpad();
  if (alpha != 1.0f) attr.set_output_scales(0, {alpha});
  if (beta != 0.0f) {
    dnnl::post_ops ops;
    ops.append_sum(beta);
    attr.set_post_ops(ops);
  }
  try {
    const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(plan->a, plan->b, plan->out), attr, onednn::engine());
    // Only the brgemm kernels measured faster: with a leading dimension that is not the dense one
    // oneDNN 2.6 answers with "gemm:jit" (the BLAS-like GEMM the caller runs anyway).
    if (std::string_view(pd.impl_info_str()).substr(0, 4) != "brg:") return plan;
    plan->scratchpad = pd.scratchpad_desc();
    plan->prim = dnnl::matmul(pd);
    plan->ok = true;
  } catch (const dnnl::error&) {
    // unimplemented for these strides: not ok, the caller keeps its GEMM
  }
  return plan;
}

template <typename T>
bool run(const T* a, bool a_col, int64_t lda, const T* b, bool b_col, int64_t ldb, float* out, int64_t n, int64_t k,
         int64_t m, float alpha, float beta) {
  constexpr Dt dt = std::is_same_v<T, float> ? Dt::f32 : Dt::bf16;
  const Key key = {int64_t(dt), n, k, m, a_col, lda, b_col, ldb, std::bit_cast<int32_t>(alpha),
                   std::bit_cast<int32_t>(beta), num_threads()};
  try {
    const std::shared_ptr<const Plan> plan =
        plan_cache().get(key, [&] { return make_plan(dt, a_col, lda, b_col, ldb, n, k, m, alpha, beta); });
    if (!plan->ok) return false;
    const dnnl::engine& eng = onednn::engine();
    // The primitive only reads a and b; oneDNN's memory objects take non-const pointers.
    std::unordered_map<int, memory> args = {
        {DNNL_ARG_SRC, memory(plan->a, eng, const_cast<T*>(a))},
        {DNNL_ARG_WEIGHTS, memory(plan->b, eng, const_cast<T*>(b))},
        {DNNL_ARG_DST, memory(plan->out, eng, out)}};
    thread_local onednn::Buffer scratch;
    if (plan->scratchpad.get_size() > 0) {
      args.emplace(DNNL_ARG_SCRATCHPAD, memory(plan->scratchpad, eng, scratch.get(plan->scratchpad.get_size())));
    }
    dnnl::stream& s = onednn::stream();
    plan->prim.execute(s, args);
    s.wait();
  } catch (const dnnl::error& e) {
    onednn::rethrow(e, std::is_same_v<T, float> ? "f32 matmul" : "bf16 matmul");
  }
  (std::is_same_v<T, float> ? g_calls_f32 : g_calls_bf16).fetch_add(1, std::memory_order_relaxed);
  return true;
}

}  // namespace

// dnnl_cpu_isa_t is a bit mask, not an order: avx2_vnni (0x407) is numerically above
// avx512_core_amx (0x3e7) though it has no AVX-512, so "at least ISA x" is "every bit of x set".
bool onednn_isa_includes(unsigned isa, unsigned want) { return (isa & want) == want; }

bool onednn_amx_available() {
  static const bool amx = onednn_isa_includes(dnnl_get_effective_cpu_isa(), dnnl_cpu_isa_avx512_core_amx);
  return amx;
}

bool native_bf16_preferred() {
  static const bool preferred = [] {
    if (onednn_amx_available()) return true;
    if (!onednn_isa_includes(dnnl_get_effective_cpu_isa(), dnnl_cpu_isa_avx512_core_bf16)) return false;
#if defined(__x86_64__) || defined(__i386__)
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    if (!__get_cpuid(0, &eax, &ebx, &ecx, &edx)) return false;
    // Vendor string "AuthenticAMD" in ebx, edx, ecx.
    char vendor[13] = {};
    std::memcpy(vendor, &ebx, 4);
    std::memcpy(vendor + 4, &edx, 4);
    std::memcpy(vendor + 8, &ecx, 4);
    return std::strcmp(vendor, "AuthenticAMD") == 0;
#else
    return false;
#endif
  }();
  return preferred;
}

bool matmul_bf16_picks(bool a_col, int64_t n, int64_t k, int64_t m) {
  if (in_parallel_region() || n < 16 || m < 1 || k < 1) return false;
  if (onednn_amx_available()) return k <= (a_col ? 1024 : 2048);
  // AVX512-BF16 without AMX where bf16 runs natively (AMD): x @ W^T and dY @ W up to 1024 outputs
  // wide, on 2 threads or more (the decision at the top of this file).
  return native_bf16_preferred() && num_threads() >= 2 && !a_col && k <= 2048 && m <= 1024;
}

bool matmul_bf16(const BFloat16* a, bool a_col, int64_t lda, const BFloat16* b, bool b_col, int64_t ldb, float* out,
                 int64_t n, int64_t k, int64_t m, float alpha, float beta) {
  return run(a, a_col, lda, b, b_col, ldb, out, n, k, m, alpha, beta);
}

int64_t matmul_bf16_calls() { return g_calls_bf16.load(std::memory_order_relaxed); }

bool onednn_f32_brgemm_available() {
  static const bool brgemm = onednn_isa_includes(dnnl_get_effective_cpu_isa(), dnnl_cpu_isa_avx512_core);
  return brgemm;
}

bool matmul_f32_picks(bool a_col, int64_t lda, bool b_col, int64_t ldb, int64_t n, int64_t k, int64_t m) {
  if (!onednn_f32_brgemm_available() || in_parallel_region()) return false;
  if (n < 16 || k < 1024 || m < 1) return false;
  const bool transposed_dy = a_col && lda % 1024 == 0 && m <= 512;
  const bool transposed_weight = b_col && ldb % 1024 == 0;
  return transposed_dy || transposed_weight;
}

bool matmul_f32(const float* a, bool a_col, int64_t lda, const float* b, bool b_col, int64_t ldb, float* out,
                int64_t n, int64_t k, int64_t m, float alpha, float beta) {
  return run(a, a_col, lda, b, b_col, ldb, out, n, k, m, alpha, beta);
}

int64_t matmul_f32_calls() { return g_calls_f32.load(std::memory_order_relaxed); }

}  // namespace mg::cpu
