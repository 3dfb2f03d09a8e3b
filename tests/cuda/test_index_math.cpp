// The CUDA launchers' index arithmetic (cuda/index_math.h), run on the CPU: the offsets the
// strided kernels compute must be the elements' real byte offsets for every layout a tensor can
// have (transposed, sliced, broadcast, mixed dtypes), in 32-bit and 64-bit index math.
#include <catch2/catch.hpp>

#include "core/factory.h"
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
