// Rearranging ops as PyTorch's: flip, roll, repeat, tile, and tril / triu (a matrix's lower or
// upper triangle, the rest zero; over the last two dims of a batch). Built from public ops
// (index_select, cat, expand, where), so they run on every device and differentiate.
//
//   mg::Tensor causal = mg::tril(mg::ones({L, L}, {.dtype = mg::DType::Bool}));   // attention mask
//   mg::Tensor r = mg::roll(x, {1}, {-1});                                          // shift the last dim
#pragma once
#include <cstdint>
#include <vector>

#include "mixgrad/core/tensor.h"

namespace mg {

// x reversed along each of `dims` (a copy).
Tensor flip(const Tensor& x, const std::vector<int64_t>& dims);
// x shifted by shifts[i] along dims[i] (wrapping around); with no dims, over the flattened tensor
// by the one shift, then given x's shape back.
Tensor roll(const Tensor& x, const std::vector<int64_t>& shifts, const std::vector<int64_t>& dims = {});
// Tensor.repeat: x tiled repeats[i] times along dim i; repeats has at least x.dim() entries (the
// extra leading ones add dims).
Tensor repeat(const Tensor& x, const std::vector<int64_t>& repeats);
// torch.tile: repeat, with fewer entries than dims allowed (leading 1s assumed).
Tensor tile(const Tensor& x, const std::vector<int64_t>& reps);
// Elements with column - row <= diagonal (tril) / >= diagonal (triu) kept, others 0 (false).
Tensor tril(const Tensor& x, int64_t diagonal = 0);
Tensor triu(const Tensor& x, int64_t diagonal = 0);

}  // namespace mg
