// The CUDA runtime layer: graceful degradation without a device (runs everywhere), and on a GPU
// ([gpu], skipped without one): device errors, copies, streams, events, the sync counter and the
// device allocator's statistics.
#include <catch2/catch.hpp>

#include "core/factory.h"
#include "cuda/cuda.h"
#include "cuda_test_util.h"
#include "ops/ops.h"
#include "test_util.h"

using namespace mg;
using mg::test::gpu;

TEST_CASE("without a usable device, CUDA requests are clear DeviceErrors", "[cuda]") {
  if (cuda::is_available()) {
    REQUIRE(cuda::unavailable_reason().empty());
    REQUIRE(cuda::device_count() >= 1);
    return;  // the [gpu] tests below cover the device
  }
  REQUIRE(cuda::device_count() == 0);
  const std::string reason = cuda::unavailable_reason();
  REQUIRE_FALSE(reason.empty());
  if (!cuda::built_with_cuda()) REQUIRE_THAT(reason, Catch::Matchers::Contains("built without the CUDA backend"));
  // The process runs CPU-only; only asking for a device fails, with the reason.
  REQUIRE(add(ones({2}), ones({2})).data<float>()[1] == 2.0f);
  if (cuda::built_with_cuda()) {  // no driver or no device: the reason
    MG_REQUIRE_ERROR(zeros({2}, {.device = Device::cuda(0)}), "cuda:0 is not available: " + reason);
    MG_REQUIRE_ERROR(ones({3}).to(Device::parse("cuda:1")), "cuda:1 is not available");
  } else {  // core has no CUDA allocator at all (tests/ops/test_dispatch.cpp checks the same text)
    MG_REQUIRE_ERROR(zeros({2}, {.device = Device::cuda(0)}), "no allocator for device cuda:0; this build of mixgrad has no CUDA support");
    MG_REQUIRE_ERROR(ones({3}).to(Device::parse("cuda:1")), "this build of mixgrad has no CUDA support");
  }
  MG_REQUIRE_ERROR(cuda::synchronize(), "is not available");
  MG_REQUIRE_ERROR(cuda::Stream::create(0), "is not available");
  try {
    (void)zeros({2}, {.device = Device::cuda(0)});
    FAIL("no error");
  } catch (const DeviceError&) {
    SUCCEED("a DeviceError");
  }
  REQUIRE(cuda::sync_count() == 0);
}

TEST_CASE("device strings parse and print", "[cuda]") {
  REQUIRE(Device::parse("cuda") == Device::cuda(0));
  REQUIRE(Device::parse("cuda:1") == Device::cuda(1));
  REQUIRE(Device::cuda(3).str() == "cuda:3");
  MG_REQUIRE_ERROR(Device::parse("cuda:x"), "cuda:x");
}

TEST_CASE("a device index out of range names the devices there are", "[cuda][gpu]") {
  const int n = cuda::device_count();
  MG_REQUIRE_ERROR(zeros({2}, {.device = Device::cuda(n)}), "cuda:" + std::to_string(n) + " is out of range: this machine has");
  MG_REQUIRE_ERROR(cuda::set_device(n + 6), "is out of range");
  mg::test::require_no_pending_cuda_error();
}

TEST_CASE("host-device round trips keep every bit, in every dtype", "[cuda][gpu]") {
  for (DType dt : {DType::F64, DType::F32, DType::F16, DType::BF16, DType::I64, DType::I32, DType::U8, DType::Bool}) {
    INFO(dtype_name(dt));
    // Odd size, values of many magnitudes; u8 from in-range values (a float outside [0, 255]
    // cast to u8 is undefined behaviour).
    const Tensor v = mul(randn({4097}), full({1}, 50.0));
    const Tensor x = to(dt == DType::U8 ? clamp(abs(v), 0, 255) : v, dt);
    const Tensor d = x.to(gpu());
    REQUIRE(d.device() == gpu());
    REQUIRE(d.dtype() == dt);
    const Tensor back = d.to(Device::cpu());
    REQUIRE(std::memcmp(back.data_ptr(), x.data_ptr(), x.numel() * x.element_size()) == 0);
  }
  // A non-contiguous source is made dense on its own device first.
  const Tensor m = randn({33, 17});
  REQUIRE(mg::test::values(m.t().to(gpu())) == mg::test::values(m.t()));
  REQUIRE(mg::test::values(m.to(gpu()).t().to(Device::cpu())) == mg::test::values(m.t()));
  // Empty tensors move too.
  REQUIRE(zeros({0, 3}).to(gpu()).to(Device::cpu()).shape() == Shape{0, 3});
  mg::test::require_no_pending_cuda_error();
}

TEST_CASE("moves between devices keep channels-last (PyTorch's preserve_format)", "[cuda][gpu][memory_format]") {
  const auto cl = MemoryFormat::ChannelsLast;
  const Tensor x = randn({3, 5, 4, 7}).to(cl);
  const Tensor d = x.to(gpu());
  REQUIRE(d.is_contiguous(cl));
  REQUIRE_FALSE(d.is_contiguous());
  REQUIRE(mg::test::values(d) == mg::test::values(x));
  const Tensor back = d.to(Device::cpu());
  REQUIRE(back.is_contiguous(cl));
  REQUIRE(std::memcmp(back.data_ptr(), x.data_ptr(), x.numel() * x.element_size()) == 0);
  // Into pinned memory too, laid out the same way.
  const Tensor pinned = d.to(Device::cpu(), /*non_blocking=*/true);
  cuda::synchronize();
  REQUIRE(pinned.is_pinned());
  REQUIRE(pinned.is_contiguous(cl));
  REQUIRE(mg::test::values(pinned) == mg::test::values(x));
  // A channels-last view that is not dense moves dense in its suggested layout.
  const Tensor sliced = randn({2, 6, 5, 5}).to(cl).slice(1, 1, 5);
  const Tensor ds = sliced.to(gpu());
  REQUIRE(ds.is_contiguous(cl));
  REQUIRE(mg::test::values(ds) == mg::test::values(sliced));
  // A gradient flows back through the move in the source's layout.
  const Tensor leaf = randn({2, 3, 4, 4}).to(cl).detach().requires_grad_(true);
  mg::sum(mul(leaf.to(gpu()), full({1}, 2.0, {.device = gpu()}))).backward();
  REQUIRE(leaf.grad().device().is_cpu());
  REQUIRE(mg::test::values(leaf.grad()) == std::vector<double>(std::size_t(leaf.numel()), 2.0));
  mg::test::require_no_pending_cuda_error();
}

TEST_CASE("streams, guards and events", "[cuda][gpu]") {
  const cuda::Stream def = cuda::current_stream();
  REQUIRE(def.handle() == nullptr);
  const cuda::Stream s = cuda::Stream::create(0);
  REQUIRE(s.handle() != nullptr);
  {
    cuda::StreamGuard guard(s);
    REQUIRE(cuda::current_stream() == s);
    cuda::Event start, end;
    start.record();
    const Tensor y = add(ones({1 << 20}, {.device = gpu()}), ones({1 << 20}, {.device = gpu()}));
    end.record();
    end.synchronize();
    REQUIRE(end.query());
    REQUIRE(start.elapsed_ms(end) >= 0.0f);
    REQUIRE(y.to(Device::cpu()).data<float>()[12345] == 2.0f);
  }
  REQUIRE(cuda::current_stream() == def);
  mg::test::require_no_pending_cuda_error();
}

TEST_CASE("reading a value synchronises and is counted", "[cuda][gpu]") {
  const Tensor x = full({8}, 3.0, {.device = gpu()});
  const uint64_t before = cuda::sync_count();
  const Tensor y = mul(x, x);  // a launch alone does not wait
  REQUIRE(cuda::sync_count() == before);
  REQUIRE(y.to(Device::cpu()).data<float>()[7] == 9.0f);
  REQUIRE(cuda::sync_count() == before + 1);
  mg::test::require_no_pending_cuda_error();
}

TEST_CASE("the device allocator caches, reuses and reports", "[cuda][gpu][allocator]") {
  cuda::empty_cache();
  const cuda::DeviceMemoryStats s0 = cuda::memory_stats();
  {
    const Tensor a = empty({1 << 20}, {.device = gpu()});  // 4 MiB
    const cuda::DeviceMemoryStats s1 = cuda::memory_stats();
    REQUIRE(s1.allocated >= s0.allocated + (std::size_t(4) << 20));
    REQUIRE(s1.peak_allocated >= s1.allocated);
    REQUIRE(s1.reserved >= s1.allocated);
  }
  const cuda::DeviceMemoryStats s2 = cuda::memory_stats();
  REQUIRE(s2.allocated == s0.allocated);
  // The freed block is reused: a thousand allocations of the same size make no new cudaMalloc.
  // With MG_CUDA_CACHING_ALLOCATOR=0 (the memory checkers' runs) each is its own.
  for (int i = 0; i < 1000; ++i) (void)empty({1 << 20}, {.device = gpu()});
  const uint64_t mallocs = cuda::memory_stats().num_device_mallocs - s2.num_device_mallocs;
  REQUIRE(mallocs == (cuda::caching_allocator_enabled() ? 0u : 1000u));
  REQUIRE(cuda::memory_stats().num_device_frees - s2.num_device_frees == mallocs);
  cuda::reset_peak_memory();
  REQUIRE(cuda::memory_stats().peak_allocated == cuda::memory_stats().allocated);
  cuda::empty_cache();
  REQUIRE(cuda::memory_stats().reserved <= s2.reserved);
  mg::test::require_no_pending_cuda_error();
}

TEST_CASE("an impossible allocation is an OutOfMemoryError, and the device stays usable", "[cuda][gpu][allocator]") {
  const int64_t huge = int64_t(1) << 40;  // 4 TiB of f32
  try {
    (void)empty({huge}, {.device = gpu()});
    FAIL("no error");
  } catch (const OutOfMemoryError& e) {
    REQUIRE_THAT(e.what(), Catch::Matchers::Contains("out of memory on cuda:0"));
    REQUIRE_THAT(e.what(), Catch::Matchers::Contains("4096.00 GiB"));
  }
  REQUIRE(cuda::memory_stats().num_ooms >= 1);
  REQUIRE(add(ones({4}, {.device = gpu()}), ones({4}, {.device = gpu()})).to(Device::cpu()).data<float>()[0] == 2.0f);
  mg::test::require_no_pending_cuda_error();
}

TEST_CASE("mixing devices and missing kernels are clear errors", "[cuda][gpu]") {
  const Tensor c = ones({2});
  const Tensor g = ones({2}, {.device = gpu()});
  MG_REQUIRE_ERROR(add(c, g), "add: expected all tensors on the same device, got [2] f32 cpu and [2] f32 cuda:0");
  mg::test::require_no_pending_cuda_error();
}

// CTest runs each case in its own process, and this one calls no op before allocating: the
// allocation itself must register the backends (mg::init()), not report a build without CUDA.
TEST_CASE("a CUDA tensor as a process's first call finds the backend", "[cuda]") {
  std::string message;
  try {
    const Tensor t = randn({4, 3}, {.device = Device::cuda(0)});
    CHECK(t.device() == Device::cuda(0));
    CHECK(cuda::is_available());
  } catch (const DeviceError& e) {
    message = e.what();
  }
  if (cuda::built_with_cuda()) {
    CHECK(message.find("no CUDA support") == std::string::npos);
    if (!cuda::is_available()) CHECK(message.find(cuda::unavailable_reason()) != std::string::npos);
  } else {
    CHECK(message.find("no CUDA support") != std::string::npos);
  }
}

// Peer copies (cuda/copy.cpp): queued on the source device's stream, after the destination's
// stream has done what it had queued (the destination block may be one it just freed), and before
// the destination's later work. Under the emulator's deferred streams each stream runs as late as
// its waits allow, so a missing wait shows as stale or overwritten values.
TEST_CASE("a tensor copied between two GPUs arrives whole, and each device's later work sees it", "[cuda][gpu][gpu2]") {
  const Device gpu0 = Device::cuda(0), gpu1 = Device::cuda(1);
  const Tensor host = arange(0, 4096, 1, {.dtype = DType::F32});
  const Tensor x = host.to(gpu0);
  {
    // A block of cuda:1 written by queued work and freed: the copy below may get it.
    const Tensor old = full({4096}, 7.0, {.device = gpu1});
  }
  const Tensor y = x.to(gpu1);
  cuda::synchronize(0);  // cuda:0 runs first: the copy must still come after cuda:1's fill
  const Tensor doubled = mul(y, y);  // cuda:1's work after the copy
  const Tensor back = add(doubled.to(gpu0), x);  // and cuda:0's after the copy back
  const std::vector<double> got = mg::test::values(back.to(Device::cpu()));
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double v = double(i);
    if (got[i] != v * v + v) FAIL("element " << i << ": " << got[i] << ", expected " << v * v + v);
  }
  CHECK(mg::test::values(y.to(Device::cpu())) == mg::test::values(host));
  mg::test::require_no_pending_cuda_error();
}
