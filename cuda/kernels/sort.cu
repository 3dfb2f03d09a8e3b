// CUDA kernel of argsort (ops/sort.h): a segmented merge sort of every row of the last dim, in the
// CPU's order (fn::sorts_before, ops/functors.h: stable, NaN largest, ties by index). That order
// is total, so every element has one rank and the indices equal the CPU's bit for bit.
//
// First each tile of kTile elements of a row is sorted by rank: an element's position is the
// number of elements of its tile before it (kTile comparisons). Then runs of width w, 2w, ... are
// merged pairwise, one pass per width: an element's position in the merged run is its offset in
// its own run plus the number of elements of the sibling run before it, found by binary search
// (the sibling run is sorted). Every thread works alone (no shared memory, no barrier), each pass
// is one launch, and a row of n elements costs n * (kTile + log2(n)^2 / 2) comparisons in all,
// where ranking it whole cost n^2 (1M elements: ~2e8 against 1e12).
#include <cuda_runtime.h>

#include "mixgrad/core/factory.h"
#include "mixgrad/core/half.h"
#include "mixgrad/cuda/check.h"
#include "mixgrad/cuda/kernels/launch.h"
#include "mixgrad/ops/functors.h"
#include "mixgrad/ops/kernel_registry.h"
#include "mixgrad/ops/ops.h"

namespace mg::cuda {
namespace {

constexpr int64_t kTile = 32;  // elements sorted by rank before the merge passes

// Sorts each tile of each row by rank: the key and original index of element i go to their
// tile's position. Writes the indices only (`keys_out` null) when the tile is the whole row.
template <typename T, typename K>
__global__ void tile_rank_kernel(int64_t total, int64_t n, const T* x, K* keys_out, int64_t* idx_out, bool descending) {
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t row = e / n, i = e % n;
    const int64_t lo = i / kTile * kTile, hi = lo + kTile < n ? lo + kTile : n;
    const T* r = x + row * n;
    const K v = static_cast<K>(r[i]);
    int64_t rank = 0;
    for (int64_t j = lo; j < hi; ++j) rank += fn::sorts_before(static_cast<K>(r[j]), j, v, i, descending) ? 1 : 0;
    const int64_t dst = row * n + lo + rank;
    idx_out[dst] = i;
    if (keys_out != nullptr) keys_out[dst] = v;
  }
}

// One merge pass: sorted runs of `width` become sorted runs of 2 * width. `keys_out` null on the
// last pass, which writes only the indices (into the op's output).
template <typename K>
__global__ void merge_pass_kernel(int64_t total, int64_t n, int64_t width, const K* keys, const int64_t* idx, K* keys_out,
                                  int64_t* idx_out, bool descending) {
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t row = e / n, p = e % n;
    const int64_t run = p / width, sibling = run ^ 1, offset = p - run * width;
    const int64_t s_lo = sibling * width;
    const K* rk = keys + row * n;
    const int64_t* ri = idx + row * n;
    const K v = rk[p];
    const int64_t iv = ri[p];
    int64_t dst = p;  // a last run with no sibling stays where it is
    if (s_lo < n) {
      // Elements of the sibling run before this one: a prefix of it, found by binary search.
      int64_t a = 0, b = (s_lo + width < n ? width : n - s_lo);
      while (a < b) {
        const int64_t m = (a + b) / 2;
        if (fn::sorts_before(rk[s_lo + m], ri[s_lo + m], v, iv, descending)) a = m + 1;
        else b = m;
      }
      dst = (run < sibling ? run : sibling) * width + offset + a;
    }
    idx_out[row * n + dst] = iv;
    if (keys_out != nullptr) keys_out[row * n + dst] = v;
  }
}

template <typename T>
void argsort_kernel(const Tensors& in, Tensors& out, const OpAttrs& a) {
  using K = fn::sort_key_t<T>;
  const Tensor x = contiguous(in[0]);
  const int64_t total = x.numel();
  if (total == 0) return;
  const int64_t n = x.dim() == 0 ? 1 : x.size(-1);
  const bool descending = a.mode == 1;
  const LaunchContext ctx(x.device());
  const unsigned blocks = ctx.blocks(total);
  auto* result = static_cast<int64_t*>(out[0].data_ptr());
  if (n <= kTile) {
    tile_rank_kernel<T, K><<<blocks, kThreads, 0, ctx.stream>>>(total, n, static_cast<const T*>(x.data_ptr()), nullptr,
                                                                 result, descending);
    MG_CUDA_CHECK_LAUNCH("argsort tile kernel");
    return;
  }
  // Two (key, index) buffers, ping-ponged between passes; the last pass writes into `result`.
  const Tensor work = empty({2 * total * int64_t(sizeof(K) + sizeof(int64_t))}, {.dtype = DType::U8, .device = x.device()});
  auto* base = static_cast<unsigned char*>(work.data_ptr());
  K* keys[2] = {reinterpret_cast<K*>(base), reinterpret_cast<K*>(base + total * int64_t(sizeof(K)))};
  auto* idx_base = reinterpret_cast<int64_t*>(base + 2 * total * int64_t(sizeof(K)));
  int64_t* idx[2] = {idx_base, idx_base + total};
  tile_rank_kernel<T, K><<<blocks, kThreads, 0, ctx.stream>>>(total, n, static_cast<const T*>(x.data_ptr()), keys[0],
                                                               idx[0], descending);
  MG_CUDA_CHECK_LAUNCH("argsort tile kernel");
  int cur = 0;
  for (int64_t width = kTile; width < n; width *= 2) {
    const bool last = 2 * width >= n;
    merge_pass_kernel<K><<<blocks, kThreads, 0, ctx.stream>>>(total, n, width, keys[cur], idx[cur],
                                                              last ? nullptr : keys[1 - cur],
                                                              last ? result : idx[1 - cur], descending);
    MG_CUDA_CHECK_LAUNCH("argsort merge kernel");
    cur = 1 - cur;
  }
}

}  // namespace

void register_sort_kernels() {
  register_kernel(OpId::argsort, DeviceType::CUDA, DType::F64, argsort_kernel<double>);
  register_kernel(OpId::argsort, DeviceType::CUDA, DType::F32, argsort_kernel<float>);
  register_kernel(OpId::argsort, DeviceType::CUDA, DType::F16, argsort_kernel<Half>);
  register_kernel(OpId::argsort, DeviceType::CUDA, DType::BF16, argsort_kernel<BFloat16>);
  register_kernel(OpId::argsort, DeviceType::CUDA, DType::I64, argsort_kernel<int64_t>);
  register_kernel(OpId::argsort, DeviceType::CUDA, DType::I32, argsort_kernel<int32_t>);
  register_kernel(OpId::argsort, DeviceType::CUDA, DType::U8, argsort_kernel<uint8_t>);
}

}  // namespace mg::cuda
