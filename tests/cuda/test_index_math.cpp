// The CUDA launchers' index arithmetic (cuda/index_math.h), run on the CPU: the offsets the
// strided kernels compute must be the elements' real byte offsets for every layout a tensor can
// have (transposed, sliced, broadcast, mixed dtypes), in 32-bit and 64-bit index math. Also the
// NHWC index math of batch norm (cuda/host/column_plan.h) and pooling (cuda/host/pool_windows.h):
// each element located where a real channels-last tensor keeps it, each row summed exactly once.
#include <catch2/catch.hpp>

#include "core/factory.h"
#include "cuda/host/column_plan.h"
#include "cuda/host/pool_windows.h"
#include "cuda/index_math.h"
#include "ops/ops.h"

using namespace mg;

namespace {

// The byte offset of row-major element k of `t` viewed with `strides` (elements) over `shape`.
int64_t reference_offset(const Shape& shape, const Strides& strides, int64_t elem_size, int64_t k) {
  int64_t off = 0;
  for (int64_t d = int64_t(shape.size()) - 1; d >= 0; --d) {
    off += (k % shape[d]) * strides[d] * elem_size;
    k /= shape[d];
  }
  return off;
}

// Checks every element's offsets for an output `out` and inputs broadcast to it.
template <typename Index>
void check_offsets(const Tensor& out, const Tensor& a, const Tensor& b) {
  const Shape& shape = out.shape();
  const std::array<Strides, 3> strides = {out.strides(), broadcast_strides(a, shape), broadcast_strides(b, shape)};
  const std::array<int64_t, 3> sizes = {int64_t(out.element_size()), int64_t(a.element_size()),
                                        int64_t(b.element_size())};
  const auto plan = make_plan<3>(shape, strides, sizes);
  const auto calc = cuda::make_offset_calculator<3, Index>(plan);
  for (int64_t k = 0; k < out.numel(); ++k) {
    Index got[3];
    calc.offsets(Index(k), got);
    for (int op = 0; op < 3; ++op) {
      const int64_t want = reference_offset(shape, strides[op], sizes[op], k);
      if (int64_t(got[op]) != want) FAIL("operand " << op << " element " << k << ": " << got[op] << " != " << want);
    }
  }
}

}  // namespace

TEST_CASE("offset calculator: every layout, 32- and 64-bit", "[cuda][launch]") {
  const Tensor base = zeros({4, 6, 5});
  const Tensor t = base.permute({2, 0, 1});                 // [5, 4, 6], transposed
  const Tensor s = base.slice(1, 1, 6, 2);                  // [4, 3, 5], stepped
  const Tensor row = zeros({5}, {.dtype = DType::F16});     // broadcast along the leading dims
  const Tensor col = zeros({4, 1, 1}, {.dtype = DType::I64});
  const Tensor scalar = zeros({});
  check_offsets<int32_t>(t.contiguous(), t, zeros({6}));
  check_offsets<int64_t>(t.contiguous(), t, zeros({6}));
  check_offsets<int32_t>(zeros({4, 3, 5}), s, row);
  check_offsets<int32_t>(zeros({4, 6, 5}, {.dtype = DType::Bool}), col, scalar);
  check_offsets<int64_t>(zeros({4, 6, 5}, {.dtype = DType::Bool}), col, row);
  check_offsets<int32_t>(zeros({4, 6, 5}).permute({1, 2, 0}), base.permute({1, 2, 0}), base.permute({1, 2, 0}));
}

TEST_CASE("loop plans merge dense dims and keep broadcast scalars dense", "[cuda][launch]") {
  const Tensor out = zeros({8, 16});
  const auto dense = make_plan<2>(out.shape(), {out.strides(), out.strides()}, {4, 4});
  REQUIRE(dense.shape == Shape{128});
  REQUIRE(cuda::is_dense_plan<2>(dense, {4, 4}, {false, false}));
  const auto scalar = make_plan<2>(out.shape(), {out.strides(), broadcast_strides(zeros({}), out.shape())}, {4, 4});
  REQUIRE(scalar.shape == Shape{128});
  REQUIRE(scalar.strides[1][0] == 0);
  REQUIRE(cuda::is_dense_plan<2>(scalar, {4, 4}, {false, true}));
  REQUIRE_FALSE(cuda::is_dense_plan<2>(scalar, {4, 4}, {false, false}));
  const Tensor tr = zeros({16, 8}).t();
  const auto strided = make_plan<2>(out.shape(), {out.strides(), tr.strides()}, {4, 4});
  REQUIRE(strided.shape == Shape{8, 16});
  REQUIRE_FALSE(cuda::is_dense_plan<2>(strided, {4, 4}, {false, false}));
}

TEST_CASE("32-bit index math only when every offset fits", "[cuda][launch]") {
  LoopPlan<2> plan;
  plan.shape = {int64_t(1) << 29};
  plan.strides = {Strides{4}, Strides{4}};
  REQUIRE(cuda::fits_int32<2>(plan));  // the last byte offset is (2^29 - 1) * 4 = 2^31 - 4
  plan.shape = {(int64_t(1) << 29) + 1};
  REQUIRE_FALSE(cuda::fits_int32<2>(plan));  // 2^29 * 4 = 2^31 does not fit
  plan.shape = {(int64_t(1) << 30) + 1};
  plan.strides = {Strides{1}, Strides{0}};
  REQUIRE_FALSE(cuda::fits_int32<2>(plan));  // more than 2^30 elements: index + grid stride could overflow
  plan.shape = {int64_t(1) << 30};
  REQUIRE(cuda::fits_int32<2>(plan));
  plan.shape = {1000, 1000};
  plan.strides = {Strides{4000, 4}, Strides{0, 8}};
  REQUIRE(cuda::fits_int32<2>(plan));
  plan.strides = {Strides{4000, 4}, Strides{int64_t(1) << 22, 8}};
  REQUIRE_FALSE(cuda::fits_int32<2>(plan));  // 999 * 2^22 > 2^31
}

TEST_CASE("grid-stride launch sizes and vector widths", "[cuda][launch]") {
  REQUIRE(cuda::grid_stride_blocks(0, 256, 1056) == 1);
  REQUIRE(cuda::grid_stride_blocks(256, 256, 1056) == 1);
  REQUIRE(cuda::grid_stride_blocks(257, 256, 1056) == 2);
  REQUIRE(cuda::grid_stride_blocks(int64_t(1) << 28, 256, 1056) == 1056);
  alignas(16) static char buf[64];
  REQUIRE(cuda::dense_vector_width({{buf, 4}, {buf + 16, 4}}) == 4);   // f32: 4 per 16 bytes
  REQUIRE(cuda::dense_vector_width({{buf, 2}, {buf, 2}}) == 8);        // f16/bf16: 8
  REQUIRE(cuda::dense_vector_width({{buf, 1}, {buf, 4}}) == 4);        // bool out, f32 in: the widest decides
  REQUIRE(cuda::dense_vector_width({{buf, 4}, {buf + 4, 4}}) == 1);    // misaligned: scalar loads
  REQUIRE(cuda::dense_vector_width({{buf, 4}, {nullptr, 4}}) == 4);    // a broadcast scalar has no vector
}

TEST_CASE("channels-last batch norm: channel_of and the column plan's lanes cover every row once", "[cuda][launch]") {
  // channel_of against the strides of real tensors in both layouts
  for (const MemoryFormat f : {MemoryFormat::Contiguous, MemoryFormat::ChannelsLast}) {
    const Shape shape{2, 5, 3, 4};
    const Tensor t = empty(shape, {.dtype = DType::F32, .memory_format = f});
    const Strides& st = t.strides();
    const int64_t inner = f == MemoryFormat::ChannelsLast ? 1 : 12;
    for (int64_t n = 0; n < 2; ++n)
      for (int64_t c = 0; c < 5; ++c)
        for (int64_t h = 0; h < 3; ++h)
          for (int64_t w = 0; w < 4; ++w) {
            const int64_t off = n * st[0] + c * st[1] + h * st[2] + w * st[3];
            REQUIRE(cuda::channel_of(off, 5, inner) == c);
          }
  }
  // rows of each chunk: lane y takes begin + y, begin + y + 32, ...; every row once, in range
  for (const int64_t rows : {int64_t(0), int64_t(1), int64_t(31), int64_t(4096), int64_t(4097), int64_t(100003)}) {
    const cuda::ColumnPlan p = cuda::make_column_plan(rows, 70);
    CHECK(p.tiles == 3);
    CHECK(p.chunk_rows == cuda::kColumnChunkRows);
    std::vector<int> seen(std::size_t(rows), 0);
    for (int64_t k = 0; k < p.chunks; ++k) {
      for (int64_t y = 0; y < cuda::kColumnLanes; ++y) {
        int64_t mine = 0;
        for (int64_t r = p.begin(k) + y; r < p.end(k); r += cuda::kColumnLanes, ++mine) ++seen[std::size_t(r)];
        REQUIRE(mine <= p.chunk_rows / cuda::kColumnLanes);
      }
    }
    for (int v : seen) REQUIRE(v == 1);
    CHECK(p.chunks == std::max<int64_t>(1, (rows + 4095) / 4096));
  }
  // more rows than 65535 chunks of 4096 hold: longer chunks, a multiple of the lanes
  const int64_t huge = cuda::kMaxColumnChunks * cuda::kColumnChunkRows + 5;
  const cuda::ColumnPlan big = cuda::make_column_plan(huge, 64);
  CHECK(big.chunks <= cuda::kMaxColumnChunks);
  CHECK(big.chunk_rows % cuda::kColumnLanes == 0);
  CHECK(big.chunk_rows > cuda::kColumnChunkRows);
  CHECK(big.end(big.chunks - 1) == huge);
  CHECK(big.begin(big.chunks - 1) < huge);
  CHECK_THROWS_WITH(cuda::make_column_plan(10, 0), Catch::Matchers::Contains("channels >= 1"));
}

TEST_CASE("pooling layouts locate every element where an NCHW or NHWC tensor keeps it", "[cuda][launch]") {
  const int64_t N = 2, C = 3, H = 4, W = 5;
  for (const bool nhwc : {false, true}) {
    const Tensor t = empty({N, C, H, W}, {.dtype = DType::F32,
                                          .memory_format = nhwc ? MemoryFormat::ChannelsLast : MemoryFormat::Contiguous});
    const Strides& st = t.strides();
    const cuda::PoolLayout l{nhwc, C};
    CHECK(l.step() == st[3]);
    for (int64_t n = 0; n < N; ++n)
      for (int64_t c = 0; c < C; ++c)
        for (int64_t h = 0; h < H; ++h)
          for (int64_t w = 0; w < W; ++w) {
            const int64_t off = n * st[0] + c * st[1] + h * st[2] + w * st[3];
            int64_t plane = -1, r = -1, q = -1;
            l.locate(off, H, W, &plane, &r, &q);
            REQUIRE(plane == n * C + c);
            REQUIRE(r == h);
            REQUIRE(q == w);
            REQUIRE(l.base(plane, H, W) + (r * W + q) * l.step() == off);
          }
  }
}
