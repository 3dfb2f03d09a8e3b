// Tests of the core tensor plumbing: Tensor metadata and its error texts, Device parsing, shape
// helpers (wrap_dim, broadcast_shapes, contiguous strides), 64-byte aligned storage and
// parallel_for (each index once, exceptions from workers reach the caller).
#include <catch2/catch.hpp>

#include <atomic>
#include <cstdint>
#include <limits>
#include <mutex>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "core/factory.h"
#include "core/parallel.h"
#include "core/storage.h"
#include "core/tensor.h"
#include "ops/ops.h"
#include "test_util.h"

using Catch::Matchers::Message;
using mg::DType;

TEST_CASE("tensor: metadata of a dense tensor", "[core]") {
  const mg::Tensor t = mg::zeros({2, 3, 4});
  CHECK(t.defined());
  CHECK(t.shape() == mg::Shape{2, 3, 4});
  CHECK(t.strides() == mg::Strides{12, 4, 1});
  CHECK(t.dim() == 3);
  CHECK(t.numel() == 24);
  CHECK(t.size(0) == 2);
  CHECK(t.size(-1) == 4);
  CHECK(t.stride(-3) == 12);
  CHECK(t.offset() == 0);
  CHECK(t.element_size() == 4);
  CHECK(t.is_contiguous());
  CHECK(t.is_floating_point());
  CHECK_FALSE(mg::zeros({2}, {.dtype = DType::I32}).is_floating_point());
  CHECK(mg::describe(t) == "[2, 3, 4] f32 cpu");
  CHECK(mg::describe(mg::zeros({2, 3})) == "[2, 3] f32 cpu");
  CHECK(mg::describe(mg::zeros({}, {.dtype = DType::BF16})) == "[] bf16 cpu");
  CHECK(mg::describe(mg::Tensor()) == "(undefined tensor)");
  CHECK_THROWS_MATCHES(t.size(3), mg::IndexError,
                       Message("size: dim 3 is out of range for a 3-d tensor (expected a dim in "
                               "[-3, 2])"));
}

TEST_CASE("tensor: strided views into a storage", "[core]") {
  auto storage = std::make_shared<mg::Storage>(6 * sizeof(float), mg::Device::cpu());
  float* base = static_cast<float*>(storage->data());
  for (int i = 0; i < 6; ++i) base[i] = float(i);
  // A transposed [3, 2] view of a [2, 3] buffer is not contiguous.
  const mg::Tensor tr = mg::make_tensor(storage, {3, 2}, {1, 3}, 0, DType::F32);
  CHECK_FALSE(tr.is_contiguous());
  // Size-1 dims do not care about their stride.
  CHECK(mg::make_tensor(storage, {1, 3}, {99, 1}, 0, DType::F32).is_contiguous());
  // An offset view starts at storage + offset elements.
  const mg::Tensor off = mg::make_tensor(storage, {2}, {1}, 4, DType::F32);
  CHECK(off.data_ptr() == static_cast<void*>(base + 4));
  CHECK(off.data<float>()[1] == 5.0f);
  const mg::Tensor one = mg::make_tensor(storage, {}, {}, 5, DType::F32);
  CHECK(one.item<float>() == 5.0f);
  CHECK(one.item<int64_t>() == 5);
  // Views share the storage's version counter.
  const uint64_t v0 = tr.version();
  off.bump_version();
  CHECK(tr.version() == v0 + 1);
}

TEST_CASE("tensor: item and data errors", "[core]") {
  const mg::Tensor h = mg::full({1, 1}, 0.1, {.dtype = DType::F16});
  CHECK(h.item<float>() == float(mg::Half(0.1f)));  // 0.0999755859375
  CHECK(h.item<double>() == 0.0999755859375);
  CHECK(mg::full({1}, 7, {.dtype = DType::I64}).item<int>() == 7);
  CHECK_THROWS_MATCHES(mg::zeros({2}).item<float>(), mg::ShapeError,
                       Message("item: expected a tensor with one element, got [2] f32 cpu"));
  const mg::Tensor t = mg::zeros({2, 3});
  CHECK_THROWS_MATCHES(t.data<double>(), mg::DTypeError,
                       Message("Tensor::data: tensor is f32 but data<f64>() was requested"));
  CHECK_THROWS_MATCHES(h.data<mg::BFloat16>(), mg::DTypeError,
                       Message("Tensor::data: tensor is f16 but data<bf16>() was requested"));
  CHECK_NOTHROW(h.data<mg::Half>());
  const mg::Tensor undefined;
  CHECK_FALSE(undefined.defined());
  CHECK_THROWS_MATCHES(undefined.shape(), mg::Error,
                       Message("Tensor: operation on an undefined tensor"));
  CHECK_FALSE(undefined.requires_grad());
}

TEST_CASE("tensor: item<integer> refuses what the integer cannot hold, size() of a 0-d tensor is an error",
          "[core]") {
  using mg::full;
  CHECK(full({}, 2.7).item<int64_t>() == 2);  // truncated, as a C++ cast
  CHECK(full({}, -2.7).item<int32_t>() == -2);
  CHECK(full({}, double(int64_t(1) << 62), {.dtype = DType::I64}).item<int64_t>() == (int64_t(1) << 62));  // exact
  MG_REQUIRE_ERROR(full({}, NAN).item<int64_t>(), "item<int64>: the value nan of [] f32 cpu cannot be converted");
  MG_REQUIRE_ERROR(full({}, INFINITY).item<int64_t>(), "cannot be converted to int64 without overflow");
  MG_REQUIRE_ERROR(full({}, 1e10, {.dtype = DType::F64}).item<int32_t>(), "item<int32>: the value 1e+10");
  MG_REQUIRE_ERROR(full({}, 300, {.dtype = DType::I64}).item<uint8_t>(), "item<uint8>: the value 300");
  MG_REQUIRE_ERROR(full({}, -1, {.dtype = DType::I32}).item<uint8_t>(), "item<uint8>: the value -1");
  CHECK(full({}, 255, {.dtype = DType::I64}).item<uint8_t>() == 255);
  MG_REQUIRE_ERROR(mg::scalar_tensor(1.0).size(0), "size(0): the tensor [] f32 cpu has no dimensions");
  MG_REQUIRE_ERROR(mg::scalar_tensor(1.0).stride(-1), "stride(-1): the tensor [] f32 cpu has no dimensions");
}

TEST_CASE("tensor: empty validates the shape", "[core]") {
  CHECK_THROWS_MATCHES(mg::empty({2, -1}), mg::ShapeError,
                       Message("empty: negative size in shape [2, -1]"));
  CHECK(mg::empty({3, 0}).numel() == 0);
}

TEST_CASE("device: parse and print", "[core]") {
  CHECK(mg::Device::parse("cpu") == mg::Device::cpu());
  CHECK(mg::Device::parse("cuda") == mg::Device::cuda(0));
  const mg::Device d = mg::Device::parse("cuda:3");
  CHECK(d.is_cuda());
  CHECK(d.index == 3);
  CHECK(d.str() == "cuda:3");
  CHECK(mg::Device::cpu().str() == "cpu");
  CHECK(mg::Device::parse("cuda:12").index == 12);
  CHECK(mg::Device::cuda(1) != mg::Device::cuda(2));
  CHECK(mg::Device::parse("cuda:0").index == 0);
  for (const char* bad : {"gpu", "CPU", "cuda:", "cuda:x", "cuda:-1", "cuda:1a", " cpu", "", "cuda:01", "cuda:00"}) {
    INFO(bad);
    CHECK_THROWS_MATCHES(mg::Device::parse(bad), mg::DeviceError,
                         Message(std::string("Device: cannot parse \"") + bad +
                                 "\"; expected \"cpu\", \"cuda\" or \"cuda:N\""));
  }
}

TEST_CASE("shape: helpers and their error texts", "[core]") {
  CHECK(mg::shape_numel({}) == 1);
  CHECK(mg::shape_numel({2, 0, 3}) == 0);
  CHECK(mg::shape_str({2, 3}) == "[2, 3]");
  CHECK(mg::shape_str({}) == "[]");
  CHECK(mg::contiguous_strides({2, 3, 4}) == mg::Strides{12, 4, 1});
  CHECK(mg::contiguous_strides({}).empty());

  CHECK(mg::wrap_dim(1, 2, "sum") == 1);
  CHECK(mg::wrap_dim(-1, 2, "sum") == 1);
  CHECK(mg::wrap_dim(-2, 2, "sum") == 0);
  CHECK(mg::wrap_dim(0, 0, "sum") == 0);  // a 0-d tensor accepts dim 0 and -1
  CHECK(mg::wrap_dim(-1, 0, "sum") == 0);
  CHECK_THROWS_MATCHES(mg::wrap_dim(3, 2, "sum"), mg::IndexError,
                       Message("sum: dim 3 is out of range for a 2-d tensor (expected a dim in "
                               "[-2, 1])"));
  CHECK_THROWS_MATCHES(mg::wrap_dim(-3, 2, "softmax"), mg::IndexError,
                       Message("softmax: dim -3 is out of range for a 2-d tensor (expected a dim "
                               "in [-2, 1])"));
  CHECK_THROWS_AS(mg::wrap_dim(1, 0, "sum"), mg::IndexError);

  CHECK(mg::broadcast_shapes({2, 3}, {3}, "add") == mg::Shape{2, 3});
  CHECK(mg::broadcast_shapes({2, 1}, {1, 4}, "add") == mg::Shape{2, 4});
  CHECK(mg::broadcast_shapes({}, {5}, "add") == mg::Shape{5});
  CHECK(mg::broadcast_shapes({0, 3}, {1, 3}, "add") == mg::Shape{0, 3});
  CHECK(mg::broadcast_shapes({4, 1, 2}, {3, 1}, "mul") == mg::Shape{4, 3, 2});
  CHECK_THROWS_MATCHES(mg::broadcast_shapes({2, 3}, {4, 3}, "add"), mg::ShapeError,
                       Message("add: shapes [2, 3] and [4, 3] cannot be broadcast together (dim "
                               "0: 2 vs 4)"));
  CHECK_THROWS_MATCHES(mg::broadcast_shapes({5, 2}, {3}, "mul"), mg::ShapeError,
                       Message("mul: shapes [5, 2] and [3] cannot be broadcast together (dim 1: "
                               "2 vs 3)"));
}

TEST_CASE("storage: CPU allocations are 64-byte aligned", "[core]") {
  for (int64_t n : {0, 1, 3, 17, 100, 1000, 1 << 20}) {
    for (DType dt : {DType::F32, DType::F16, DType::U8, DType::F64}) {
      const mg::Tensor t = mg::empty({n}, {.dtype = dt});
      INFO(n << " " << mg::dtype_name(dt));
      CHECK(t.data_ptr() != nullptr);
      CHECK(reinterpret_cast<uintptr_t>(t.data_ptr()) % 64 == 0);
      CHECK(t.storage().nbytes() == std::size_t(n) * mg::dtype_size(dt));
    }
  }
  mg::Storage s(0, mg::Device::cpu());
  CHECK(s.data() != nullptr);
  CHECK(s.version() == 0);
  s.bump_version();
  CHECK(s.version() == 1);
}

namespace {
struct ThreadsGuard {
  int saved = mg::num_threads();
  ~ThreadsGuard() { mg::set_num_threads(saved); }
};
}  // namespace

TEST_CASE("parallel_for: every index exactly once", "[core]") {
  ThreadsGuard guard;
  mg::set_num_threads(4);
  for (auto [begin, end, grain] : std::vector<std::tuple<int64_t, int64_t, int64_t>>{
           {0, 1000003, 1000}, {5, 100005, 32768}, {-50, 50, 1}, {0, 7, 100}}) {
    INFO(begin << " " << end << " " << grain);
    std::vector<std::atomic<int>> hits(size_t(end - begin));
    std::atomic<int> calls{0};
    bool split_in_region = true;
    std::mutex mu;
    const int64_t first = begin;  // clang before 16 cannot capture the structured binding
    mg::parallel_for(begin, end, grain, [&](int64_t b, int64_t e) {
      ++calls;
      if (calls > 1 && !mg::in_parallel_region()) {
        std::lock_guard<std::mutex> lock(mu);
        split_in_region = false;  // several chunks must run inside a parallel region
      }
      for (int64_t i = b; i < e; ++i) hits[size_t(i - first)]++;
    });
    bool once = true;
    for (auto& h : hits) once = once && h.load() == 1;
    CHECK(once);
    CHECK(split_in_region);
    // Chunks: min(threads, ceil(n / grain)), and a range within one grain runs inline in one call.
    const int64_t n = end - begin;
    const int64_t expected = n <= grain ? 1 : std::min<int64_t>(4, (n + grain - 1) / grain);
    CHECK(calls.load() == expected);
  }
  int calls = 0;
  mg::parallel_for(10, 10, 1, [&](int64_t, int64_t) { ++calls; });
  mg::parallel_for(10, 3, 1, [&](int64_t, int64_t) { ++calls; });
  CHECK(calls == 0);
}

TEST_CASE("parallel_for: an exception in a worker reaches the caller", "[core]") {
  ThreadsGuard guard;
  mg::set_num_threads(4);
  // The chunk that does not start at 0 runs on a worker thread when the loop is parallel.
  CHECK_THROWS_MATCHES(
      mg::parallel_for(0, 1 << 20, 1024,
                       [](int64_t b, int64_t) {
                         if (b != 0) throw mg::ShapeError("worker: bad chunk");
                       }),
      mg::ShapeError, Message("worker: bad chunk"));
  // Every chunk throwing: exactly one exception comes out, and the pool still works afterwards.
  CHECK_THROWS_AS(mg::parallel_for(0, 1 << 20, 1024,
                                   [](int64_t, int64_t) { throw std::runtime_error("all"); }),
                  std::runtime_error);
  std::atomic<int64_t> sum{0};
  mg::parallel_for(0, 1 << 16, 1024, [&](int64_t b, int64_t e) { sum += e - b; });
  CHECK(sum.load() == (1 << 16));
  // Nested calls run inline.
  std::atomic<int> inner_calls{0};
  mg::parallel_for(0, 1 << 16, 1024, [&](int64_t, int64_t) {
    mg::parallel_for(0, 1 << 16, 1024, [&](int64_t, int64_t) { ++inner_calls; });
  });
  CHECK(inner_calls.load() == 4);
  CHECK_THROWS_MATCHES(mg::set_num_threads(0), mg::Error,
                       Message("set_num_threads: expected n >= 1, got 0"));
}

TEST_CASE("the CPU allocator caches large blocks and tracks peak memory", "[core][memory]") {
  mg::empty_cpu_cache();
  mg::reset_cpu_peak_memory();
  const mg::MemoryStats before = mg::cpu_memory_stats();
  const void* first = nullptr;
  {
    mg::Tensor big = mg::empty({1 << 20});  // 4 MiB
    first = big.data_ptr();
    REQUIRE(mg::cpu_memory_stats().allocated >= before.allocated + (std::size_t(4) << 20));
  }
  const mg::MemoryStats after_free = mg::cpu_memory_stats();
  REQUIRE(after_free.cached >= (std::size_t(4) << 20));
  REQUIRE(after_free.allocated == before.allocated);
  REQUIRE(after_free.peak_allocated >= before.allocated + (std::size_t(4) << 20));
  {
    mg::Tensor again = mg::empty({1 << 20});  // same size: the cached block comes back
    REQUIRE(again.data_ptr() == first);
  }
  mg::empty_cpu_cache();
  REQUIRE(mg::cpu_memory_stats().cached == 0);
  mg::set_cpu_cache_limit(0);  // disabled: nothing is kept
  { mg::Tensor t = mg::empty({1 << 20}); }
  REQUIRE(mg::cpu_memory_stats().cached == 0);
  mg::set_cpu_cache_limit(std::size_t(1) << 30);
}

TEST_CASE("the CPU allocator's full cache evicts the blocks freed longest ago", "[core][memory]") {
  // An earlier phase's sizes must not hold the cache: the newest freed block stays cached.
  mg::set_cpu_cache_limit(std::size_t(8) << 20);
  const void* large_block = nullptr;
  {
    mg::Tensor old_phase = mg::empty({3 << 20});  // 12 MiB: more than the limit, never cached
  }
  REQUIRE(mg::cpu_memory_stats().cached == 0);
  {
    mg::Tensor a = mg::empty({1 << 20});  // 4 MiB
    mg::Tensor b = mg::empty({(1 << 20) + 4096});  // 4 MiB + 16 KiB
    large_block = b.data_ptr();
    a = mg::Tensor();  // a freed first, then b: both, 8 MiB and more, do not fit, so a is evicted
  }
  const mg::MemoryStats after = mg::cpu_memory_stats();
  CHECK(after.cached == (std::size_t(4) << 20) + (std::size_t(16) << 10));
  {
    mg::Tensor c = mg::empty({1 << 20});  // the cached block fits (within twice the size)
    CHECK(c.data_ptr() == large_block);
    CHECK(mg::cpu_memory_stats().cached == 0);
  }
  {
    // A block larger than the limit frees straight to the OS and evicts nothing.
    mg::Tensor huge = mg::empty({3 << 20});
  }
  CHECK(mg::cpu_memory_stats().cached == (std::size_t(4) << 20) + (std::size_t(16) << 10));
  mg::set_cpu_cache_limit(std::size_t(1) << 30);
}

TEST_CASE("Storage: an allocator whose free throws does not terminate the process", "[core][storage]") {
  // After a sticky CUDA error every event query throws; freeing memory then happens while the
  // error unwinds, and a throwing destructor would end in std::terminate.
  struct ThrowingFree final : mg::Allocator {
    int frees = 0;
    void* allocate(std::size_t nbytes, mg::Device) override { return ::operator new(nbytes == 0 ? 1 : nbytes); }
    void deallocate(void* p, mg::Device) override {
      ++frees;
      ::operator delete(p);
      throw mg::Error("cudaEventQuery: an illegal memory access was encountered (simulated)");
    }
  };
  ThrowingFree allocator;
  {
    mg::Storage s(64, mg::Device::cpu(), allocator);
    REQUIRE(s.data() != nullptr);
  }
  CHECK(allocator.frees == 1);
  { mg::Storage again(8, mg::Device::cpu(), allocator); }  // reported once, then silently
  CHECK(allocator.frees == 2);
}

TEST_CASE("shapes whose element or byte count overflows are a ShapeError, never a short allocation", "[core]") {
  using namespace mg;
  const int64_t max = std::numeric_limits<int64_t>::max();
  MG_REQUIRE_ERROR(empty({4, max / 4 + 2}), "has more than 2^63 - 1 elements");
  MG_REQUIRE_ERROR(zeros({int64_t(1) << 61}, {.dtype = DType::I64}), "needs more than 2^63 bytes");
  // one_hot with a huge num_classes: [1, 2^61] i64 wrapped to a 0-byte buffer and was written past.
  MG_REQUIRE_ERROR(one_hot(from_vector<int64_t>({1}), int64_t(1) << 61), "needs more than 2^63 bytes");
  MG_REQUIRE_ERROR(one_hot(from_vector<int64_t>({1}), max), "2^63");
  MG_REQUIRE_ERROR(ones({3}).expand({max, max, 3}), "has more than 2^63 - 1 elements");
  // A zero size makes any shape empty.
  CHECK(empty({max, max, 0}).numel() == 0);
  CHECK(empty({0, max, max, max}).numel() == 0);
  CHECK(empty({max, 0, max, max}, {.memory_format = MemoryFormat::ChannelsLast}).numel() == 0);
  CHECK(shape_numel({0, max, max}) == 0);
}

TEST_CASE("tensor: transposed copies and conversions (the tiled path) equal the element loop's", "[core]") {
  // contiguous() / to(dtype) of x.transpose(-1, -2) take 32 x 32 tiles; each element must be what
  // a dense conversion of the same values in the same logical order gives.
  mg::Generator gen(17);
  for (const mg::Shape& s : std::vector<mg::Shape>{{70, 33}, {8, 8}, {3, 40, 65}, {1, 2, 100, 9}}) {
    const mg::Tensor base = mg::randn(s, {.dtype = DType::F64}, &gen) * 100.0;
    const int64_t rows = s[s.size() - 2], cols = s.back(), batch = base.numel() / (rows * cols);
    for (DType from : {DType::F64, DType::F32, DType::BF16, DType::F16, DType::I64}) {
      const mg::Tensor dense = mg::to(base, from);
      const mg::Tensor x = dense.transpose(-1, -2);  // strides [..., 1, R]
      REQUIRE_FALSE(x.is_contiguous());
      // x's values in its logical order, by index arithmetic over the dense tensor's (exact in f64).
      const std::vector<double> v = mg::test::values(mg::to(dense, DType::F64));
      std::vector<double> logical(v.size());
      for (int64_t b = 0; b < batch; ++b) {
        for (int64_t i = 0; i < cols; ++i) {
          for (int64_t j = 0; j < rows; ++j) {
            logical[std::size_t(b * rows * cols + i * rows + j)] = v[std::size_t(b * rows * cols + j * cols + i)];
          }
        }
      }
      const mg::Tensor expected = mg::from_vector<double>(logical, x.shape());
      for (DType to : {from, DType::F32, DType::BF16, DType::F64, DType::I32}) {
        INFO(mg::dtype_name(from) << " -> " << mg::dtype_name(to) << ", " << x.dim() << " dims");
        const mg::Tensor tiled = to == from ? x.contiguous() : mg::to(x, to);
        CHECK(tiled.is_contiguous());
        CHECK(mg::test::values(tiled) == mg::test::values(mg::to(expected, to)));  // a dense conversion
      }
    }
  }
}
