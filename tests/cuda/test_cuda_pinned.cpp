// Pinned host memory and asynchronous host<->device copies: the errors without a usable device
// (run everywhere), and on a GPU ([gpu], skipped without one) pinned round trips in every dtype,
// non_blocking copies around a kernel without a host wait, sync_count, event-gated reuse of a block
// freed during a copy, the statistics, and a DataLoader with pin_memory. The cache's policy is
// tested on the CPU in test_pinned_cache.cpp.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstring>
#include <memory>
#include <random>

#include "core/factory.h"
#include "core/pinned_memory.h"
#include "cuda/cuda.h"
#include "cuda_test_util.h"
#include "data/loader.h"
#include "data/tensor_dataset.h"
#include "ops/ops.h"
#include "test_util.h"

using namespace mg;
using mg::test::gpu;

namespace {

// `n` elements of `dt` whose bytes are random (bool: 0 or 1), so every bit pattern class occurs:
// NaNs with payloads, infinities, subnormals, negative zero.
Tensor random_bits(DType dt, int64_t n, uint32_t seed) {
  const std::size_t nbytes = std::size_t(n) * dtype_size(dt);
  Tensor raw = empty({int64_t(nbytes)}, {.dtype = DType::U8});
  std::mt19937 rng(seed);
  auto* p = raw.data<uint8_t>();
  for (std::size_t i = 0; i < nbytes; ++i) p[i] = dt == DType::Bool ? uint8_t(rng() & 1) : uint8_t(rng());
  return make_tensor(raw.impl()->storage, {n}, {1}, 0, dt);
}

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.numel() == b.numel() && a.dtype() == b.dtype() &&
         std::memcmp(a.data_ptr(), b.data_ptr(), std::size_t(a.numel()) * a.element_size()) == 0;
}

std::shared_ptr<data::TensorDataset> small_dataset() {
  return std::make_shared<data::TensorDataset>(std::vector<std::pair<std::string, Tensor>>{
      {"x", arange(0, 30, 1, {.dtype = DType::F32}).reshape({10, 3})},
      {"y", arange(0, 10)}});
}

}  // namespace

TEST_CASE("without a usable device, pinning is a DeviceError with the reason", "[cuda][pinned]") {
  if (cuda::is_available()) return;  // the [gpu] tests below cover the device
  const std::string reason = cuda::built_with_cuda() ? cuda::unavailable_reason()
                                                     : "mixgrad was built without the CUDA backend";
  const Tensor x = ones({4});
  REQUIRE_FALSE(x.is_pinned());
  MG_REQUIRE_ERROR(x.pin_memory(), "pin_memory: pinned host memory needs a usable CUDA device: " + reason);
  MG_REQUIRE_ERROR(x.pin_memory(), "hint:");
  MG_REQUIRE_ERROR(empty_pinned({2, 3}, DType::F16), "pin_memory: pinned host memory needs a usable CUDA device");
  try {
    (void)x.pin_memory();
    FAIL("no error");
  } catch (const DeviceError&) {
    SUCCEED("a DeviceError");
  }
  MG_REQUIRE_ERROR(check_pin_memory_available("loader"), "loader: pinned host memory needs a usable CUDA device: " + reason);
  // The DataLoader refuses the option at construction, naming it and the reason; without it, fine.
  MG_REQUIRE_ERROR(data::DataLoader(small_dataset(), {.batch_size = 4, .pin_memory = true}),
                   "DataLoader: pin_memory: pinned host memory needs a usable CUDA device: " + reason);
  data::DataLoader plain(small_dataset(), {.batch_size = 4});
  REQUIRE_FALSE(plain.next()->at("x").is_pinned());
  // non_blocking changes nothing about the device checks; a move to the same device is a no-op.
  REQUIRE(x.to(Device::cpu(), true).is_same(x));
  MG_REQUIRE_ERROR(x.to(Device::cuda(0), true), cuda::built_with_cuda() ? "cuda:0 is not available" : "no CUDA support");
  // The statistics answer (all zero) and emptying the cache is harmless.
  const cuda::PinnedMemoryStats s = cuda::pinned_memory_stats();
  REQUIRE(s.allocated == 0);
  REQUIRE(s.reserved == 0);
  REQUIRE(s.num_host_allocs == 0);
  cuda::empty_pinned_cache();
  REQUIRE(cuda::sync_count() == 0);
}

TEST_CASE("pin_memory of an undefined tensor is an mg::Error", "[cuda][pinned]") {
  MG_REQUIRE_ERROR(Tensor().pin_memory(), "pin_memory: the tensor is undefined");
}

TEST_CASE("empty_pinned refuses a layout or a size it cannot make before asking for a device", "[cuda][pinned]") {
  MG_REQUIRE_ERROR(empty_pinned({2, 3}, DType::F32, MemoryFormat::ChannelsLast), "empty_pinned");
  MG_REQUIRE_ERROR(empty_pinned({2, 3}, DType::F32, MemoryFormat::ChannelsLast), "4-D");
  MG_REQUIRE_ERROR(empty_pinned({2, 3, 4, 5}, DType::F32, MemoryFormat::Preserve), "no layout to preserve");
  // The byte count is checked as empty()'s: 2^62 f32 elements wrapped to a 0-byte block before.
  REQUIRE_THROWS_AS(empty_pinned({int64_t(1) << 62}, DType::F32), ShapeError);
  MG_REQUIRE_ERROR(empty_pinned({int64_t(1) << 62}, DType::F32), "empty_pinned: shape [4611686018427387904] of f32 needs more than 2^63 bytes");
  MG_REQUIRE_ERROR(empty_pinned({int64_t(1) << 61}, DType::F64), "needs more than 2^63 bytes");
  MG_REQUIRE_ERROR(empty_pinned({-3, -5}, DType::F32), "empty_pinned: negative size in shape [-3, -5]");
  MG_REQUIRE_ERROR(empty_pinned({-1}, DType::F32), "negative size");
}

TEST_CASE("pinned round trips keep every bit, in every dtype", "[cuda][gpu][pinned]") {
  uint32_t seed = 1;
  for (DType dt : {DType::F64, DType::F32, DType::F16, DType::BF16, DType::I64, DType::I32, DType::U8, DType::Bool}) {
    INFO(dtype_name(dt));
    const Tensor x = random_bits(dt, 4097, seed++);
    const Tensor p = x.pin_memory();
    REQUIRE(p.is_pinned());
    REQUIRE_FALSE(x.is_pinned());
    REQUIRE(p.device() == Device::cpu());
    REQUIRE(same_bytes(p, x));
    REQUIRE(p.pin_memory().is_same(p));  // already pinned: itself
    const Tensor d = p.to(gpu(), /*non_blocking=*/true);
    const Tensor back = d.to(Device::cpu(), /*non_blocking=*/true);
    REQUIRE(back.is_pinned());
    cuda::synchronize();
    REQUIRE(same_bytes(back, x));
    const Tensor blocking = p.to(gpu()).to(Device::cpu());  // the blocking path from pinned memory
    REQUIRE_FALSE(blocking.is_pinned());
    REQUIRE(same_bytes(blocking, x));
  }
  // A strided source gives a contiguous pinned copy with the same values.
  const Tensor m = randn({33, 17});
  const Tensor pt = m.t().pin_memory();
  REQUIRE(pt.is_pinned());
  REQUIRE(pt.is_contiguous());
  REQUIRE(mg::test::values(pt) == mg::test::values(m.t()));
  // A channels-last source stays channels-last, dense or not (as to(device) keeps the layout).
  const Tensor cl = randn({2, 3, 4, 5}).to(MemoryFormat::ChannelsLast);
  for (const Tensor& src : {cl, cl.slice(1, 0, 2)}) {
    const Tensor pc = src.pin_memory();
    REQUIRE(pc.is_pinned());
    REQUIRE(pc.is_contiguous(MemoryFormat::ChannelsLast));
    REQUIRE_FALSE(pc.is_contiguous());
    REQUIRE(mg::test::values(pc) == mg::test::values(src));
  }
  // pin_memory is differentiable like clone.
  const Tensor w = randn({5}).requires_grad_();
  const Tensor pw = w.pin_memory();
  REQUIRE(pw.is_pinned());
  mul(pw, full({5}, 3.0)).sum().backward();
  REQUIRE(mg::test::values(w.grad()) == std::vector<double>(5, 3.0));
  // CUDA tensors cannot be pinned.
  MG_REQUIRE_ERROR(ones({2}, {.device = gpu()}).pin_memory(), "pin_memory: only CPU tensors can be pinned");
  mg::test::require_no_pending_cuda_error();
}

TEST_CASE("non_blocking copies around a kernel do not wait and give the right values", "[cuda][gpu][pinned]") {
  const Tensor x = randn({1 << 20}).pin_memory();
  const Tensor expect = mul(add(x, x), x);  // CPU reference, same f32 operations as the GPU
  const uint64_t before = cuda::sync_count();
  const Tensor d = x.to(gpu(), /*non_blocking=*/true);
  const Tensor y = mul(add(d, d), d);
  const Tensor h = y.to(Device::cpu(), /*non_blocking=*/true);
  REQUIRE(cuda::sync_count() == before);  // no host wait so far
  REQUIRE(h.is_pinned());
  cuda::current_stream().synchronize();   // the user's synchronisation
  REQUIRE(cuda::sync_count() == before + 1);
  REQUIRE(same_bytes(h, expect));
  // From pageable memory non_blocking is accepted, stays correct and does not wait either.
  const Tensor pageable = randn({4096});
  const uint64_t before2 = cuda::sync_count();
  const Tensor d2 = pageable.to(gpu(), true);
  REQUIRE(cuda::sync_count() == before2);
  REQUIRE(same_bytes(d2.to(Device::cpu()), pageable));  // a blocking D2H: one counted wait
  REQUIRE(cuda::sync_count() == before2 + 1);
  // Blocking copies from pinned memory wait (the DMA reads the buffer after the call returns).
  const uint64_t before3 = cuda::sync_count();
  const Tensor d3 = x.to(gpu());
  REQUIRE(cuda::sync_count() == before3 + 1);
  (void)d3;
  mg::test::require_no_pending_cuda_error();
}

TEST_CASE("a pinned block freed during an asynchronous copy is not reused before the copy is done", "[cuda][gpu][pinned]") {
  cuda::synchronize();
  cuda::empty_pinned_cache();
  const int64_t n = int64_t(1) << 24;  // 64 MiB of f32: the copy takes milliseconds
  Tensor src = full({n}, 1.0).pin_memory();
  const cuda::PinnedMemoryStats s0 = cuda::pinned_memory_stats();
  REQUIRE(s0.allocated >= std::size_t(n) * 4);
  const Tensor d = src.to(gpu(), /*non_blocking=*/true);
  src = Tensor();  // freed while the copy may still read it
  // A new pinned tensor of the same size, written at once: if it got the block in flight, the copy
  // above would read 2s.
  Tensor other = empty_pinned({n}, DType::F32);
  std::fill_n(other.data<float>(), n, 2.0f);
  cuda::synchronize();
  REQUIRE(sum(d).item<double>() == double(n));
  // Once the copy is done, the block is reused: no new cudaHostAlloc.
  other = Tensor();
  const uint64_t host_allocs = cuda::pinned_memory_stats().num_host_allocs;
  const Tensor again = empty_pinned({n}, DType::F32);
  const cuda::PinnedMemoryStats s1 = cuda::pinned_memory_stats();
  REQUIRE(s1.num_host_allocs == host_allocs);
  REQUIRE(s1.pending == 0);
  REQUIRE(s1.allocated >= std::size_t(n) * 4);
  mg::test::require_no_pending_cuda_error();
}

TEST_CASE("pinned memory statistics count bytes pinned and cached", "[cuda][gpu][pinned]") {
  cuda::synchronize();
  cuda::empty_pinned_cache();
  const cuda::PinnedMemoryStats s0 = cuda::pinned_memory_stats();
  Tensor p = empty_pinned({1000}, DType::F32);  // 4000 bytes -> a 4 KiB block
  cuda::PinnedMemoryStats s = cuda::pinned_memory_stats();
  REQUIRE(s.allocated == s0.allocated + 4096);
  REQUIRE(s.reserved == s0.reserved + 4096);
  REQUIRE(s.peak_allocated >= s.allocated);
  p = Tensor();
  s = cuda::pinned_memory_stats();
  REQUIRE(s.allocated == s0.allocated);
  REQUIRE(s.cached == s0.cached + 4096);
  REQUIRE(s.num_frees == s0.num_frees + 1);
  cuda::empty_pinned_cache();
  s = cuda::pinned_memory_stats();
  REQUIRE(s.cached == 0);
  REQUIRE(s.reserved == s.allocated + s.pending);
  REQUIRE(s.num_host_frees > s0.num_host_frees);
  mg::test::require_no_pending_cuda_error();
}

TEST_CASE("a DataLoader with pin_memory yields pinned batches", "[cuda][gpu][pinned][data]") {
  for (int prefetch : {0, 2}) {
    INFO("prefetch " << prefetch);
    data::DataLoader loader(small_dataset(), {.batch_size = 4, .prefetch = prefetch, .pin_memory = true});
    int64_t rows = 0;
    double total = 0;
    const uint64_t before = cuda::sync_count();
    while (auto batch = loader.next()) {
      const Tensor& x = batch->at("x");
      REQUIRE(x.is_pinned());
      REQUIRE(batch->at("y").is_pinned());
      REQUIRE(x.data<float>()[0] == float(3 * batch->indices[0]));
      rows += x.size(0);
      total += sum(x.to(gpu(), /*non_blocking=*/true)).item<double>();  // item() waits once
    }
    REQUIRE(rows == 10);
    REQUIRE(total == 435.0);  // 0 + 1 + ... + 29
    REQUIRE(cuda::sync_count() == before + 3);  // the three item() calls, not the copies
  }
  mg::test::require_no_pending_cuda_error();
}
