// Memory formats (core/memory_format.h): channels-last strides, is_contiguous(format), the
// suggested format with size-1 dims and views, to()/contiguous() copies (values kept, gradient
// passed through), and the bad-input errors (channels-last on a non-4-D tensor, Preserve as a layout).
#include <catch2/catch.hpp>

#include "autograd/engine.h"
#include "core/factory.h"
#include "core/memory_format.h"
#include "ops/ops.h"
#include "test_util.h"

using namespace mg;
using mg::test::error_of;
using mg::test::values;

TEST_CASE("channels-last strides order the dims N, H, W, C", "[core][memory_format]") {
  const Tensor t = empty({2, 3, 4, 5}, {.memory_format = MemoryFormat::ChannelsLast});
  CHECK(t.strides() == Strides{60, 1, 15, 3});
  CHECK(t.is_contiguous(MemoryFormat::ChannelsLast));
  CHECK_FALSE(t.is_contiguous());
  CHECK_FALSE(t.is_contiguous(MemoryFormat::Contiguous));
  CHECK(t.suggest_memory_format() == MemoryFormat::ChannelsLast);
  const Tensor c = empty({2, 3, 4, 5});
  CHECK(c.suggest_memory_format() == MemoryFormat::Contiguous);
  CHECK_FALSE(c.is_contiguous(MemoryFormat::ChannelsLast));
  CHECK(memory_format_strides({2, 3, 4, 5}, MemoryFormat::Contiguous) == Strides{60, 20, 5, 1});
  CHECK(std::string(memory_format_name(MemoryFormat::ChannelsLast)) == "channels_last");
}

TEST_CASE("to(ChannelsLast) keeps every value and contiguous() restores NCHW", "[core][memory_format]") {
  manual_seed(1);
  const Tensor x = randn({2, 3, 4, 5});
  const Tensor y = x.to(MemoryFormat::ChannelsLast);
  CHECK(y.strides() == Strides{60, 1, 15, 3});
  CHECK(values(y) == values(x));
  // element (n, c, h, w) sits at n*60 + c + h*15 + w*3 in memory
  const float* p = y.data<float>();
  const float* q = x.data<float>();
  CHECK(p[1 * 60 + 2 + 3 * 15 + 4 * 3] == q[((1 * 3 + 2) * 4 + 3) * 5 + 4]);
  CHECK(y.to(MemoryFormat::ChannelsLast).is_same(y));  // already channels-last: no copy
  const Tensor z = y.contiguous(MemoryFormat::Contiguous);
  CHECK(z.is_contiguous());
  CHECK(values(z) == values(x));
  CHECK(y.contiguous(MemoryFormat::Preserve).is_same(y));
  // f16 through the bulk converters keeps the layout's element order
  const Tensor h = y.to(DType::F16);
  CHECK(h.is_contiguous(MemoryFormat::ChannelsLast));
  CHECK(values(h) == values(x.to(DType::F16)));
}

TEST_CASE("size-1 dims: dense in both formats, told apart by exact strides", "[core][memory_format]") {
  const Tensor one_c = randn({2, 1, 4, 5});
  CHECK(one_c.suggest_memory_format() == MemoryFormat::Contiguous);
  CHECK(one_c.contiguous(MemoryFormat::ChannelsLast).is_same(one_c));  // dense in both: no copy
  const Tensor cl = one_c.to(MemoryFormat::ChannelsLast);  // to() restrides, as PyTorch's
  CHECK(cl.strides() == Strides{20, 1, 5, 1});
  CHECK(cl.is_contiguous());
  CHECK(cl.is_contiguous(MemoryFormat::ChannelsLast));
  CHECK(cl.suggest_memory_format() == MemoryFormat::ChannelsLast);
  CHECK(values(cl) == values(one_c));
  CHECK(cl.to(MemoryFormat::Contiguous).strides() == Strides{20, 20, 5, 1});
  const Tensor fresh = empty({2, 1, 4, 5}, {.memory_format = MemoryFormat::ChannelsLast});
  CHECK(fresh.strides() == Strides{20, 1, 5, 1});
  CHECK(fresh.suggest_memory_format() == MemoryFormat::ChannelsLast);  // PyTorch's strides, read as NHWC
  const Tensor pooled = empty({2, 3, 1, 1}, {.memory_format = MemoryFormat::ChannelsLast});
  CHECK(pooled.strides() == Strides{3, 1, 3, 3});
  CHECK(pooled.suggest_memory_format() == MemoryFormat::ChannelsLast);
  CHECK(empty({2, 3, 1, 1}).suggest_memory_format() == MemoryFormat::Contiguous);
  CHECK(empty({0, 3, 4, 5}).is_contiguous(MemoryFormat::ChannelsLast));  // no elements
}

TEST_CASE("views of channels-last tensors keep suggesting channels-last", "[core][memory_format]") {
  const Tensor y = randn({2, 3, 6, 5}).to(MemoryFormat::ChannelsLast);
  const Tensor rows = y.slice(2, 0, 6, 2);  // every other row: strided, not dense
  CHECK_FALSE(rows.is_contiguous(MemoryFormat::ChannelsLast));
  CHECK(rows.suggest_memory_format() == MemoryFormat::ChannelsLast);
  CHECK(rows.to(MemoryFormat::ChannelsLast).is_contiguous(MemoryFormat::ChannelsLast));
  CHECK(values(rows.to(MemoryFormat::ChannelsLast)) == values(rows));
  // an NHWC tensor permuted to [N, C, H, W] is channels-last by strides
  const Tensor nhwc = randn({2, 6, 5, 3});
  const Tensor p = nhwc.permute({0, 3, 1, 2});
  CHECK(p.is_contiguous(MemoryFormat::ChannelsLast));
  CHECK(p.suggest_memory_format() == MemoryFormat::ChannelsLast);
  // a transposed NCHW tensor is neither
  const Tensor t = randn({2, 3, 6, 5}).transpose(2, 3);
  CHECK(t.suggest_memory_format() == MemoryFormat::Contiguous);
}

TEST_CASE("to(ChannelsLast) is differentiable", "[core][memory_format][grad]") {
  Tensor x = randn({2, 3, 4, 4}).requires_grad_();
  const Tensor w = randn({2, 3, 4, 4});
  const Tensor y = x.to(MemoryFormat::ChannelsLast);
  CHECK(y.requires_grad());
  (y * w).sum().backward();
  CHECK(values(x.grad()) == values(w));
}

TEST_CASE("channels-last on a non-4-D tensor is a clear error", "[core][memory_format][errors]") {
  const Tensor x3 = randn({3, 4, 5});
  const std::string e = error_of([&] { (void)x3.to(MemoryFormat::ChannelsLast); });
  CHECK(e.find("channels_last needs a 4-D tensor [N, C, H, W], got shape [3, 4, 5]") != std::string::npos);
  CHECK(e.find("hint:") != std::string::npos);
  CHECK_THROWS_AS(x3.contiguous(MemoryFormat::ChannelsLast), ShapeError);
  CHECK_THROWS_AS(empty({2, 3}, {.memory_format = MemoryFormat::ChannelsLast}), ShapeError);
  CHECK_FALSE(x3.is_contiguous(MemoryFormat::ChannelsLast));
  CHECK(error_of([&] { (void)x3.is_contiguous(MemoryFormat::Preserve); }).find("Preserve is not a layout") !=
        std::string::npos);
  CHECK(error_of([&] { (void)empty({2, 3, 4, 5}, {.memory_format = MemoryFormat::Preserve}); })
            .find("empty: MemoryFormat::Preserve") != std::string::npos);
}
