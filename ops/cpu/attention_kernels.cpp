// CPU kernels of fused attention (`attention`, `attention_backward`; ops/attention_fused.cpp says
// when they run). Per batch entry (one head of one sample):
//   forward   S = scale q kᵀ (f32 sums, not rounded), the mask and causal mask applied, P = softmax
//             rows in f32 (max-shifted, Σ by the summation rule), dropout on P by the Philox
//             stream, out = P v (P rounded to the input dtype for the product, f32 accumulation,
//             one rounding); each row's {max, 1/Σexp} is the second output.
//   backward  S and P recomputed from q, k and the row statistics (the same bits as the forward:
//             nothing [.., Lq, Lk] is kept between them), dv = Pᵀ dO, dP = dO vᵀ (f32), dS =
//             P (dP - Σ P dP) scale in f32, dq = dS k, dk = dSᵀ q (dS rounded to the input dtype
//             for the products, f32 accumulation, one rounding each).
// So scores, probabilities and their gradients never round to f16/bf16 — the composite rounded
// each to the input dtype (its matmuls' outputs) — and the products take their operands in the
// input dtype as FlashAttention does. f64 computes in f64 throughout. The products run the GEMM
// driver (ops/cpu/gemm.h); entries run in parallel, one per thread, when there are enough of
// them, else one at a time with threaded products and rows. Each entry runs a block of query rows
// at a time (attention_block_rows: about a million scores, one block up to Lq x Lk = 2^20), so the
// scratch stays a few MiB per thread at any sequence length; the backward sums dk and dv over the
// blocks in f32 (f64) and rounds once.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <tuple>
#include <type_traits>
#include <vector>

#include "mixgrad/core/convert.h"
#include "mixgrad/core/half.h"
#include "mixgrad/core/parallel.h"
#include "mixgrad/core/philox.h"
#include "mixgrad/core/philox_batch.h"
#include "mixgrad/ops/attention_args.h"
#include "mixgrad/ops/attention_rows.h"
#include "mixgrad/ops/cpu/gemm.h"
#include "mixgrad/ops/cpu/leaf_sum.h"
#include "mixgrad/ops/cpu/softmax_line.h"
#include "mixgrad/ops/kernel_registry.h"
#include "mixgrad/ops/register.h"

namespace mg::cpu {
namespace {

// Element offsets of each batch entry of t (its dims before the last two, broadcast to `batch`
// with stride 0 where t has size 1 or lacks the dim), row-major over `batch`.
std::vector<int64_t> batch_offsets(const Tensor& t, const Shape& batch) {
  const int64_t nd = int64_t(batch.size()), lead = t.dim() - 2;
  std::vector<int64_t> strides(std::size_t(nd), 0);
  for (int64_t d = 0; d < nd; ++d) {
    const int64_t td = d - (nd - lead);  // t's dim aligned to batch dim d (right-aligned)
    if (td >= 0 && t.size(td) != 1) strides[std::size_t(d)] = t.stride(td);
  }
  const int64_t count = shape_numel(batch);
  std::vector<int64_t> off(static_cast<std::size_t>(count));
  std::vector<int64_t> idx(std::size_t(nd), 0);
  int64_t x = 0;
  for (int64_t i = 0; i < count; ++i) {
    off[std::size_t(i)] = x;
    for (int64_t d = nd; d-- > 0;) {
      const std::size_t u = std::size_t(d);
      if (++idx[u] < batch[u]) {
        x += strides[u];
        break;
      }
      x -= (batch[u] - 1) * strides[u];
      idx[u] = 0;
    }
  }
  return off;
}

// Where everything of one call lives: q [B.., Lq, E], k [B.., Lk, E], v [B.., Lk, Ev], the
// mask broadcast to [B.., Lq, Lk], the output gradient [B.., Lq, Ev].
struct Geometry {
  Shape batch;
  int64_t entries = 0, lq = 0, lk = 0, e = 0, ev = 0;
  std::vector<int64_t> q_off, k_off, v_off, mask_off, grad_off;
  int64_t mask_rs = 0, mask_cs = 0;  // the mask's strides along queries and keys (0: broadcast)

  Geometry(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor* mask, const Tensor* grad) {
    batch = Shape(q.shape().begin(), q.shape().end() - 2);
    entries = shape_numel(batch);
    lq = q.size(-2);
    lk = k.size(-2);
    e = q.size(-1);
    ev = v.size(-1);
    q_off = batch_offsets(q, batch);
    k_off = batch_offsets(k, batch);
    v_off = batch_offsets(v, batch);
    if (grad) grad_off = batch_offsets(*grad, batch);
    if (mask) {
      const Tensor& m = *mask;
      mask_off = batch_offsets(m, batch);
      mask_rs = m.dim() >= 2 && m.size(-2) != 1 ? m.stride(-2) : 0;
      mask_cs = m.dim() >= 1 && m.size(-1) != 1 ? m.stride(-1) : 0;
    }
  }
};

// Row i of entry b's scores `s` [Lk], in place: the mask (bool: false -> -inf; floating: added)
// and the causal mask (key j > query i -> -inf), as the composite applies them.
template <typename T, typename A>
void mask_row(A* s, int64_t b, int64_t i, const Geometry& g, const AttentionArgs& a, const void* mask) {
  constexpr A kNegInf = -std::numeric_limits<A>::infinity();
  if (a.mask) {
    const int64_t base = g.mask_off[std::size_t(b)] + i * g.mask_rs;
    if (a.bool_mask) {
      const bool* m = static_cast<const bool*>(mask) + base;
      for (int64_t j = 0; j < g.lk; ++j) s[j] = m[j * g.mask_cs] ? s[j] : kNegInf;
    } else {
      const T* m = static_cast<const T*>(mask) + base;
      for (int64_t j = 0; j < g.lk; ++j) s[j] += static_cast<A>(m[j * g.mask_cs]);
    }
  }
  if (a.causal) {
    for (int64_t j = i + 1; j < g.lk; ++j) s[j] = kNegInf;
  }
}

// The dropout's keep decisions for the n elements from element `first` of the [B.., Lq, Lk]
// weights, as 1 (kept) or 0: element e is kept when the e-th uniform of the Philox stream is >= p
// (the dropout op's rule, so the mask is the one the composite's dropout draws from the same
// stream position).
template <typename A>
void keep_row(const AttentionArgs& a, int64_t first, int64_t n, A* keep, std::vector<uint32_t>& words) {
  if (n == 0) return;
  const int64_t block0 = first / 4, blocks = (first + n - 1) / 4 - block0 + 1;
  words.resize(std::size_t(4 * blocks));
  philox_blocks(a.seed, a.offset, uint64_t(block0), blocks, words.data());
  const float p = float(a.dropout_p);
  const uint32_t* w = words.data() + (first - 4 * block0);
  for (int64_t j = 0; j < n; ++j) keep[j] = philox_uniform(w[j]) >= p ? A(1) : A(0);
}

// The dropout op's forward on a row, branch-free (so it vectorizes): ops/attention_rows.h.
template <typename A>
void drop_row(const A* x, const A* keep, A sc, int64_t n, A* out) {
  for (int64_t j = 0; j < n; ++j) out[j] = attention_dropped(x[j], keep[j] != A(0), sc);
}

// Softmax of a masked scores row in place, from its statistics: P = exp(s - max) / Σ, 0 for a dead
// row, as the forward computed it (the same expression, so the same bits).
template <typename A>
void probs_from_stats(A* s, int64_t n, A m, A inv) {
  if (attention_dead_row(inv)) {
    std::fill(s, s + n, A(0));
    return;
  }
  for (int64_t j = 0; j < n; ++j) s[j] = fast::exp_rounded(s[j] - m) * inv;
}

int64_t row_grain(int64_t lk) { return std::max<int64_t>(1, kDefaultGrain / std::max<int64_t>(lk, 1)); }

// Runs entry(b, scratch) for every batch entry: in parallel over entries (single-threaded
// products) when there are at least as many as threads, else one at a time.
template <typename Scratch, typename F>
void for_entries(int64_t entries, const F& entry) {
  if (entries > 1 && entries >= num_threads()) {
    parallel_for(0, entries, 1, [&](int64_t b0, int64_t b1) {
      Scratch s;
      for (int64_t b = b0; b < b1; ++b) entry(b, s);
    });
  } else {
    Scratch s;
    for (int64_t b = 0; b < entries; ++b) entry(b, s);
  }
}

// Query rows per block: an entry's scores are computed, softmaxed and multiplied a block of rows at
// a time, so the scratch per thread is about kAttentionBlockScores scores of each kind (4 MiB in
// f32), not Lq x Lk (1 GiB at Lq = Lk = 16384). Rows are independent, so the forward's numbers do
// not depend on the blocking; the backward, which sums dk and dv over the blocks, sums them in
// acc_t<T> and rounds once. Sequences of up to about a thousand tokens (BERT's 512) are one block.
inline constexpr int64_t kAttentionBlockScores = int64_t(1) << 20;
int64_t attention_block_rows(int64_t lq, int64_t lk) {
  return std::min(lq, std::max<int64_t>(16, kAttentionBlockScores / std::max<int64_t>(lk, 1)));
}

// n accumulated values into T, rounded once (a copy when T is the accumulation type).
template <typename T, typename A>
void store_acc(const A* src, T* dst, int64_t n) {
  if constexpr (std::is_same_v<T, A>) {
    std::copy(src, src + n, dst);
  } else {
    store_f32(src, dst, n);
  }
}

// in: (q, k, v[, mask]) -> (out [B.., Lq, Ev], stats [B.., Lq, 2] in acc_t<T>)
template <typename T>
void attention_kernel(const Tensors& in, Tensors& out, const OpAttrs& attrs) {
  using A = acc_t<T>;
  const AttentionArgs a = AttentionArgs::from(attrs);
  const Tensor& q = in[0];
  const Tensor& k = in[1];
  const Tensor& v = in[2];
  const Tensor* mask = a.mask ? &in[3] : nullptr;
  const Geometry g(q, k, v, mask, nullptr);
  const T* qp = q.data<T>();
  const T* kp = k.data<T>();
  const T* vp = v.data<T>();
  const void* mp = mask ? mask->data_ptr() : nullptr;
  T* op = out[0].data<T>();
  A* stats = out[1].data<A>();
  const A sc = A(1.0 / (1.0 - a.dropout_p));
  struct Scratch {
    std::vector<A> s;
    std::vector<T> pt;  // P in T for the product (f16/bf16)
  };
  const int64_t block = attention_block_rows(g.lq, g.lk);
  for_entries<Scratch>(g.entries, [&](int64_t b, Scratch& w) {
    const std::size_t u = std::size_t(b);
    for (int64_t r0 = 0; r0 < g.lq; r0 += block) {  // query rows r0 .. r0 + nr - 1
      const int64_t nr = std::min(block, g.lq - r0);
      const std::size_t n = std::size_t(nr * g.lk);
      w.s.resize(n);
      A* s = w.s.data();
      const GemmOperand qb = gemm_matrix(qp + g.q_off[u] + r0 * q.stride(-2), q.stride(-2), q.stride(-1));
      gemm_acc<T>(single_gemm(nr, g.e, g.lk, qb, gemm_matrix(kp + g.k_off[u], k.stride(-1), k.stride(-2)), s, a.scale));
      parallel_for(0, nr, row_grain(g.lk), [&](int64_t i0, int64_t i1) {
        std::vector<A> keep;
        std::vector<uint32_t> words;
        if (a.dropout_p > 0.0) keep.resize(std::size_t(g.lk));
        for (int64_t i = r0 + i0; i < r0 + i1; ++i) {
          A* row = s + (i - r0) * g.lk;
          mask_row<T>(row, b, i, g, a, mp);
          const A m = line_max<A>(row, g.lk, 1);
          A* st = stats + (b * g.lq + i) * 2;
          if (g.lk == 0 || m == -std::numeric_limits<A>::infinity()) {
            // A dead row: zero weights. Its statistics are {0, 0}, finite (an -inf there would be
            // an overflow to amp::OverflowTracer), 1/Σ = 0 marking it.
            std::fill(row, row + g.lk, A(0));
            st[0] = A(0);
            st[1] = A(0);
            continue;
          }
          const A inv = A(1) / exp_sum<A>(row, g.lk, 1, m, row);
          for (int64_t j = 0; j < g.lk; ++j) row[j] *= inv;
          st[0] = m;
          st[1] = inv;
          if (a.dropout_p > 0.0) {
            keep_row(a, (b * g.lq + i) * g.lk, g.lk, keep.data(), words);
            drop_row(row, keep.data(), sc, g.lk, row);
          }
        }
      });
      const void* p = s;
      if constexpr (!std::is_same_v<T, A>) {
        w.pt.resize(n);
        store_f32(s, w.pt.data(), int64_t(n));
        p = w.pt.data();
      }
      gemm<T>(single_gemm(nr, g.lk, g.ev, gemm_matrix(p, g.lk, 1),
                          gemm_matrix(vp + g.v_off[u], v.stride(-2), v.stride(-1)), op + (b * g.lq + r0) * g.ev));
    }
  });
}

// in: (grad [B.., Lq, Ev], q, k, v, stats[, mask]) -> (dq, dk, dv), dense, in T
template <typename T>
void attention_backward_kernel(const Tensors& in, Tensors& out, const OpAttrs& attrs) {
  using A = acc_t<T>;
  const AttentionArgs a = AttentionArgs::from(attrs);
  const Tensor& gr = in[0];
  const Tensor& q = in[1];
  const Tensor& k = in[2];
  const Tensor& v = in[3];
  const Tensor stats_t = in[4].is_contiguous() ? in[4] : in[4].contiguous();
  const Tensor* mask = a.mask ? &in[5] : nullptr;
  const Geometry g(q, k, v, mask, &gr);
  const T* gp = gr.data<T>();
  const T* qp = q.data<T>();
  const T* kp = k.data<T>();
  const T* vp = v.data<T>();
  const A* stats = stats_t.data<A>();
  const void* mp = mask ? mask->data_ptr() : nullptr;
  T* dq = out[0].data<T>();
  T* dk = out[1].data<T>();
  T* dv = out[2].data<T>();
  const A sc = A(1.0 / (1.0 - a.dropout_p)), scale = A(a.scale);
  const bool drop = a.dropout_p > 0.0;
  struct Scratch {
    std::vector<A> p, dp, pd;  // P (before dropout); dP, then dS; the dropped P
    std::vector<T> pdt, dst;   // the dropped P and dS in T for the products (f16/bf16)
    std::vector<A> dk, dv, part;  // several row blocks: dk and dv summed over them, one block's share
  };
  const int64_t block = attention_block_rows(g.lq, g.lk);
  const bool blocked = block < g.lq || g.lq == 0;  // no query rows: dk and dv are the zeros of the sums
  for_entries<Scratch>(g.entries, [&](int64_t b, Scratch& w) {
    const std::size_t u = std::size_t(b);
    const GemmOperand kb = gemm_matrix(kp + g.k_off[u], k.stride(-2), k.stride(-1));
    if (blocked) {
      w.dk.assign(std::size_t(g.lk * g.e), A(0));
      w.dv.assign(std::size_t(g.lk * g.ev), A(0));
    }
    for (int64_t r0 = 0; r0 < g.lq; r0 += block) {  // query rows r0 .. r0 + nr - 1
      const int64_t nr = std::min(block, g.lq - r0);
      const std::size_t n = std::size_t(nr * g.lk);
      w.p.resize(n);
      w.dp.resize(n);
      A* p = w.p.data();
      A* dp = w.dp.data();
      A* pd = p;  // without dropout the dropped P is P
      if (drop) {
        w.pd.resize(n);
        pd = w.pd.data();
      }
      const GemmOperand qb = gemm_matrix(qp + g.q_off[u] + r0 * q.stride(-2), q.stride(-2), q.stride(-1));
      const GemmOperand gb = gemm_matrix(gp + g.grad_off[u] + r0 * gr.stride(-2), gr.stride(-2), gr.stride(-1));
      // P again: the forward's scores, masks and statistics.
      gemm_acc<T>(
          single_gemm(nr, g.e, g.lk, qb, gemm_matrix(kp + g.k_off[u], k.stride(-1), k.stride(-2)), p, a.scale));
      // dP = dO vᵀ in f32 (read by the row pass).
      gemm_acc<T>(single_gemm(nr, g.ev, g.lk, gb, gemm_matrix(vp + g.v_off[u], v.stride(-1), v.stride(-2)), dp));
      parallel_for(0, nr, row_grain(g.lk), [&](int64_t i0, int64_t i1) {
        std::vector<uint32_t> words;
        std::vector<A> keep(drop ? std::size_t(g.lk) : 0);  // 1/0 per weight of the row
        for (int64_t i = r0 + i0; i < r0 + i1; ++i) {
          const int64_t local = (i - r0) * g.lk;
          A* row = p + local;
          mask_row<T>(row, b, i, g, a, mp);
          const A* st = stats + (b * g.lq + i) * 2;
          probs_from_stats(row, g.lk, st[0], st[1]);
          A* d = dp + local;
          if (attention_dead_row(st[1])) {
            // No gradient through a dead row, as the composite's where(dead, 0, w) gives: its
            // weights are constant 0 (0 * (dP - Σ) would let an inf or NaN dP through).
            std::fill(row, row + g.lk, A(0));
            if (drop) std::fill(pd + local, pd + local + g.lk, A(0));
            std::fill(d, d + g.lk, A(0));
            continue;
          }
          // dS = P (dP - Σ P dP) scale, dP the gradient of the weights before dropout: the
          // dropout_backward op's (g * keep) * sc, so a dropped weight's gradient is ±0.
          if (drop) {
            const A* kr = keep.data();
            keep_row(a, (b * g.lq + i) * g.lk, g.lk, keep.data(), words);
            drop_row(row, kr, sc, g.lk, pd + local);
            for (int64_t j = 0; j < g.lk; ++j) d[j] = attention_undropped_grad(d[j], kr[j], sc);
          }
          const A dot = line_sum<A>(g.lk, [&](int64_t j) { return row[j] * d[j]; });
          for (int64_t j = 0; j < g.lk; ++j) d[j] = attention_score_grad(row[j], d[j], dot, scale);
        }
      });
      // The products' operands in T: the dropped P and dS rounded once (f16/bf16).
      const void* pdx = pd;
      const void* ds = dp;
      if constexpr (!std::is_same_v<T, A>) {
        w.pdt.resize(n);
        w.dst.resize(n);
        store_f32(pd, w.pdt.data(), int64_t(n));
        store_f32(dp, w.dst.data(), int64_t(n));
        pdx = w.pdt.data();
        ds = w.dst.data();
      }
      // dq = dS k (this block's rows); dv = (dropped P)ᵀ dO and dk = dSᵀ q, summed over the blocks.
      gemm<T>(single_gemm(nr, g.lk, g.e, gemm_matrix(ds, g.lk, 1), kb, dq + (b * g.lq + r0) * g.e));
      const GemmProblem dv_block = single_gemm(g.lk, nr, g.ev, gemm_matrix(pdx, 1, g.lk), gb, nullptr);
      const GemmProblem dk_block = single_gemm(g.lk, nr, g.e, gemm_matrix(ds, 1, g.lk), qb, nullptr);
      if (!blocked) {
        GemmProblem pv = dv_block, pk = dk_block;
        pv.out = dv + b * g.lk * g.ev;
        pk.out = dk + b * g.lk * g.e;
        gemm<T>(pv);
        gemm<T>(pk);
        continue;
      }
      for (auto [problem, total, size] :
           {std::tuple{dv_block, &w.dv, g.lk * g.ev}, std::tuple{dk_block, &w.dk, g.lk * g.e}}) {
        w.part.resize(std::size_t(size));
        problem.out = w.part.data();
        gemm_acc<T>(problem);
        A* acc = total->data();
        for (int64_t e = 0; e < size; ++e) acc[e] += w.part[std::size_t(e)];
      }
    }
    if (blocked) {
      store_acc<T>(w.dv.data(), dv + b * g.lk * g.ev, g.lk * g.ev);
      store_acc<T>(w.dk.data(), dk + b * g.lk * g.e, g.lk * g.e);
    }
  });
}

}  // namespace

void register_attention_kernels() {
  const DeviceType cpu = DeviceType::CPU;
  register_kernel(OpId::attention, cpu, DType::F64, attention_kernel<double>);
  register_kernel(OpId::attention, cpu, DType::F32, attention_kernel<float>);
  register_kernel(OpId::attention, cpu, DType::F16, attention_kernel<Half>);
  register_kernel(OpId::attention, cpu, DType::BF16, attention_kernel<BFloat16>);
  register_kernel(OpId::attention_backward, cpu, DType::F64, attention_backward_kernel<double>);
  register_kernel(OpId::attention_backward, cpu, DType::F32, attention_backward_kernel<float>);
  register_kernel(OpId::attention_backward, cpu, DType::F16, attention_backward_kernel<Half>);
  register_kernel(OpId::attention_backward, cpu, DType::BF16, attention_backward_kernel<BFloat16>);
}

}  // namespace mg::cpu
