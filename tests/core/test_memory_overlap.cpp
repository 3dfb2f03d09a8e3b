// In-place ops whose operands overlap the tensor they write (core/memory_overlap.h, used by
// ops/dispatcher.cpp's run_inplace): the classification of views, and results equal to the
// out-of-place op's (an overlapping operand is read from a copy: shifted copies, a row broadcast
// over its own matrix, a transpose); a write into an expanded (stride 0) view is refused.
#include <catch2/catch.hpp>

#include <vector>

#include "autograd/grad_mode.h"
#include "core/factory.h"
#include "core/memory_overlap.h"
#include "ops/ops.h"
#include "test_util.h"

using namespace mg;
using mg::test::values;

namespace {

Tensor iota(int64_t n, DType dt = DType::F32) { return arange(0, n, 1, {.dtype = dt}); }

}  // namespace

TEST_CASE("memory_overlap classifies views of one storage", "[core][overlap]") {
  const Tensor x = iota(12).reshape({3, 4});
  CHECK(memory_overlap(x, x) == MemOverlap::Same);
  CHECK(memory_overlap(x, x.reshape({12})) == MemOverlap::Partial);  // same bytes, other shape
  CHECK(memory_overlap(x, x.slice(0, 0, 3)) == MemOverlap::Same);
  CHECK(memory_overlap(x.slice(0, 0, 1), x.slice(0, 1, 3)) == MemOverlap::None);  // disjoint rows
  CHECK(memory_overlap(x.slice(1, 0, 2), x.slice(1, 2, 4)) == MemOverlap::Partial);  // interleaved columns
  CHECK(memory_overlap(x, x.t()) == MemOverlap::Partial);
  CHECK(memory_overlap(x, x.select(0, 1)) == MemOverlap::Partial);
  CHECK(memory_overlap(x, iota(12).reshape({3, 4})) == MemOverlap::None);  // another storage
  CHECK(memory_overlap(x, x.slice(0, 1, 1)) == MemOverlap::None);          // empty
  CHECK(memory_overlap(x, Tensor()) == MemOverlap::None);
  CHECK_FALSE(has_internal_overlap(x));
  CHECK_FALSE(has_internal_overlap(x.t()));
  CHECK(has_internal_overlap(x.select(0, 0).unsqueeze(0).expand({5, 4})));
  CHECK_FALSE(has_internal_overlap(x.select(0, 0).unsqueeze(0).expand({1, 4})));  // size 1: one element
}

TEST_CASE("in-place ops read an operand that overlaps the written tensor as it was before the write",
          "[core][overlap]") {
  for (const DType dt : {DType::F32, DType::BF16, DType::I64}) {
    INFO(dtype_name(dt));
    SECTION("copy_ shifted by one, forwards and backwards") {
      Tensor x = iota(4099, dt);
      x.slice(0, 1, 4099).copy_(x.slice(0, 0, 4098));
      std::vector<double> want(4099);
      for (int i = 1; i < 4099; ++i) want[i] = i - 1;
      want[0] = 0;
      CHECK(values(x) == want);
      Tensor y = iota(4099, dt);
      y.slice(0, 0, 4098).copy_(y.slice(0, 1, 4099));
      for (int i = 0; i < 4098; ++i) want[i] = i + 1;
      want[4098] = 4098;
      CHECK(values(y) == want);
    }
    SECTION("add_ of a row of itself, broadcast over every row") {
      Tensor x = iota(12, dt).reshape({3, 4});
      const Tensor want = add(x, x.select(0, 1));  // out of place first
      x.add_(x.select(0, 1));
      CHECK(values(x) == values(want));
    }
    SECTION("mul_ by its own transpose, and sub_ of a shifted view") {
      Tensor x = iota(16, dt).reshape({4, 4});
      const Tensor want = mul(x, x.t());
      x.mul_(x.t());
      CHECK(values(x) == values(want));
      Tensor y = iota(10, dt);
      const Tensor want_y = sub(y.slice(0, 0, 8), y.slice(0, 2, 10));
      y.slice(0, 0, 8).sub_(y.slice(0, 2, 10));
      CHECK(values(y.slice(0, 0, 8)) == values(want_y));
    }
  }
  SECTION("an operand in exactly the written elements, or in disjoint ones, gives the plain result") {
    Tensor x = iota(8);
    x.add_(x);
    CHECK(values(x) == std::vector<double>{0, 2, 4, 6, 8, 10, 12, 14});
    x.slice(0, 0, 4).copy_(x.slice(0, 4, 8));
    CHECK(values(x) == std::vector<double>{8, 10, 12, 14, 8, 10, 12, 14});
  }
}

TEST_CASE("an in-place write into an expanded view is refused, but for fill_", "[core][overlap]") {
  Tensor row = iota(4);
  Tensor wide = row.unsqueeze(0).expand({3, 4});
  MG_REQUIRE_ERROR(wide.add_(iota(12).reshape({3, 4})), "has elements that share one memory location");
  MG_REQUIRE_ERROR(wide.copy_(iota(12).reshape({3, 4})), "contiguous() or clone() it first");
  MG_REQUIRE_ERROR(wide.exp_(), "exp_: ");
  CHECK(values(row) == std::vector<double>{0, 1, 2, 3});  // untouched
}

TEST_CASE("fill_ and zero_ of an expanded view write each memory location once, as PyTorch", "[core][overlap]") {
  // One value everywhere has a single answer; they were refused (and so was zero_grad(false) of a
  // .grad set to an expanded tensor).
  Tensor row = iota(4);
  Tensor wide = row.unsqueeze(0).expand({3, 4});
  wide.fill_(1.5);
  CHECK(values(row) == std::vector<double>{1.5, 1.5, 1.5, 1.5});
  CHECK(values(wide) == std::vector<double>(12, 1.5));
  row.unsqueeze(1).expand({4, 5}).zero_();
  CHECK(values(row) == std::vector<double>{0, 0, 0, 0});
  Tensor one = full({1}, 7.0);
  one.expand({6}).fill_(2.0);
  CHECK(values(one) == std::vector<double>{2.0});
  CHECK(zeros({3}).expand({0, 3}).fill_(1.0).numel() == 0);  // an empty expansion writes nothing
  Tensor w = zeros({2, 3}).requires_grad_();
  w.set_grad(ones({1, 1}).expand({2, 3}));
  mg::NoGradGuard no_grad;
  w.grad().zero_();
  CHECK(values(w.grad()) == std::vector<double>(6, 0.0));
}
