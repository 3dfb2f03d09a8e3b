// Index math of the channels-last (NHWC) batch norm kernels (cuda/kernels/norm.cu), host-device so
// tests/cuda/test_index_math.cpp checks on the CPU exactly what the kernels compute. NHWC x is a
// row-major [M = N·H·W, C] matrix, so a channel's statistic is a column sum: a launch of
// (tiles of 32 channels) × (chunks of rows) blocks of 32 × 32 threads, in which thread (x, y) of
// chunk k sums channel tile·32 + x over rows begin(k) + y, begin(k) + y + 32, ... < end(k) (in
// leaves of 32 terms, LeafSums); the 32 lanes are then added by a fixed tree and the chunks in
// chunk order, so the sums are deterministic.
#pragma once
#include <cstdint>

#include "mixgrad/core/error.h"
#include "mixgrad/core/macros.h"

namespace mg::cuda {

inline constexpr int64_t kColumnLanes = 32;          // row lanes per block (threadIdx.y)
inline constexpr int64_t kColumnTile = 32;           // channels per block (threadIdx.x)
inline constexpr int64_t kColumnChunkRows = 32 * 128;  // rows per chunk: 128 terms per lane (4 leaves)
inline constexpr int64_t kMaxColumnChunks = 65535;   // gridDim.y

struct ColumnPlan {
  int64_t rows = 0, cols = 0;  // M, C
  int64_t chunk_rows = kColumnChunkRows;
  int64_t chunks = 1, tiles = 1;
  MG_HOST_DEVICE int64_t begin(int64_t chunk) const { return chunk * chunk_rows; }
  MG_HOST_DEVICE int64_t end(int64_t chunk) const {
    const int64_t e = (chunk + 1) * chunk_rows;
    return e < rows ? e : rows;
  }
};

// The plan for column sums over [rows, cols]: chunks of kColumnChunkRows rows, longer (a multiple
// of kColumnLanes) when more than kMaxColumnChunks chunks would be needed.
inline ColumnPlan make_column_plan(int64_t rows, int64_t cols) {
  MG_CHECK(rows >= 0 && cols >= 1, Error, "batch_norm (channels-last): expected rows >= 0 and channels >= 1, got ",
           rows, " rows of ", cols, " channels");
  ColumnPlan p;
  p.rows = rows;
  p.cols = cols;
  const int64_t min_rows = (rows + kMaxColumnChunks - 1) / kMaxColumnChunks;
  if (min_rows > p.chunk_rows) p.chunk_rows = (min_rows + kColumnLanes - 1) / kColumnLanes * kColumnLanes;
  p.chunks = rows == 0 ? 1 : (rows + p.chunk_rows - 1) / p.chunk_rows;
  p.tiles = (cols + kColumnTile - 1) / kColumnTile;
  MG_CHECK(p.tiles <= (int64_t(1) << 31) - 1, Error, "batch_norm (channels-last): ", cols,
           " channels is more than the CUDA kernel handles");
  return p;
}

// The channel of element i of a dense 4-D tensor [N, C, H, W] whose channel dim has `inner`
// elements after it in memory: H·W for NCHW, 1 for NHWC (the channel is i % C).
MG_HOST_DEVICE int64_t channel_of(int64_t i, int64_t c, int64_t inner) { return (i / inner) % c; }

}  // namespace mg::cuda
