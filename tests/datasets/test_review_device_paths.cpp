// The training examples' data path on a GPU ([gpu]; skips without a device): batches pinned by the
// DataLoader's thread, copied to the device asynchronously behind queued GPU work and dropped at
// once (examples/common to_device, and cuda::CapturedStep's raw copy into its static inputs),
// arrive intact although the loader pins the next batches meanwhile: a pinned block is not reused
// while a copy from it is in flight.
#include <catch2/catch.hpp>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/factory.h"
#include "core/storage.h"
#include "cuda/cuda.h"
#include "cuda/cuda_test_util.h"
#include "data/loader.h"
#include "data/tensor_dataset.h"
#include "ops/ops.h"
#include "test_util.h"

using namespace mg;
using mg::test::gpu;
using mg::test::values;

TEST_CASE("review: pinned batches dropped right after their non_blocking copy arrive intact", "[data][gpu][pinned]") {
  const int64_t rows = 32, width = int64_t(1) << 18;  // 1 MiB per row, 4 MiB per batch
  auto set = std::make_shared<data::TensorDataset>(std::vector<std::pair<std::string, Tensor>>{
      {"x", arange(0, double(rows * width), 1, {.dtype = DType::F32}).reshape({rows, width})}});
  data::DataLoader loader(set, {.batch_size = 4, .shuffle = true, .seed = 7, .prefetch = 2, .pin_memory = true});
  const Tensor busy = randn({2048, 2048}, {.device = gpu()});
  const Tensor fixed = empty({4, width}, {.device = gpu()});  // as CapturedStep's static input
  std::vector<Tensor> copies, raw;
  std::vector<std::vector<int64_t>> indices;
  while (auto batch = loader.next()) {
    REQUIRE(batch->at("x").is_pinned());
    for (int k = 0; k < 4; ++k) (void)matmul(busy, busy);  // the copies below wait behind this
    copies.push_back(batch->at("x").to(gpu(), /*non_blocking=*/true));
    const Tensor& src = batch->at("x");
    copy_bytes(fixed.data_ptr(), fixed.device(), src.data_ptr(), src.device(), std::size_t(src.numel()) * 4,
               /*non_blocking=*/true);
    raw.push_back(fixed.clone());  // ordered after the copy on the same stream
    indices.push_back(batch->indices);
  }  // each pinned batch is freed here, its copies possibly still queued
  REQUIRE(copies.size() == 8);
  for (std::size_t b = 0; b < copies.size(); ++b) {
    INFO("batch " << b);
    const std::vector<double> want = values(set->get_batch(indices[b], {}).at("x"));
    CHECK(values(copies[b]) == want);
    CHECK(values(raw[b]) == want);
  }
  CHECK(cuda::take_pending_error().empty());
}
