// SyncBatchNorm and convert_sync_batchnorm in one process: without a group and with a one-rank
// group it is BatchNorm bit for bit (forward, gradients, running statistics); conversion keeps a
// ResNet-20's layers, state dict and batch-norm identity and can be undone. The multi-process
// comparisons with the global batch are in test_dist_data.cpp.
#include <catch2/catch.hpp>

#include "core/factory.h"
#include "distributed/ddp.h"
#include "distributed/gloo_process_group.h"
#include "distributed/solo_group.h"
#include "distributed/sync_batch_norm.h"
#include "nn/models/resnet.h"
#include "ops/ops.h"
#include "test_util.h"

using namespace mg;
using namespace mg::distributed;
using namespace std::chrono_literals;

namespace {


// Two steps of training through `bn` and through a BatchNorm2d with the same parameters: every
// result bitwise equal.
void check_same_as_batch_norm(nn::BatchNorm& bn, DType dtype) {
  nn::BatchNorm2d ref({.features = 3});
  {
    NoGradGuard no_grad;
    bn.weight.copy_(from_vector<float>({1.f, 0.5f, -2.f}));
    ref.weight.copy_(bn.weight);
  }
  Generator gen(3);
  for (int s = 0; s < 2; ++s) {
    const Tensor x0 = (randn({4, 3, 5, 2}, {}, &gen) * 2.0 + 1.0).to(dtype);
    const Tensor g = randn({4, 3, 5, 2}, {}, &gen);
    Tensor x1 = x0.clone().requires_grad_(), x2 = x0.clone().requires_grad_();
    bn.zero_grad();
    ref.zero_grad();
    const Tensor y1 = bn(x1), y2 = ref(x2);
    sum(to(y1, DType::F32) * g).backward();
    sum(to(y2, DType::F32) * g).backward();
    CHECK(test::values(y1) == test::values(y2));
    CHECK(test::values(x1.grad()) == test::values(x2.grad()));
    CHECK(test::values(bn.weight.grad()) == test::values(ref.weight.grad()));
    CHECK(test::values(bn.bias.grad()) == test::values(ref.bias.grad()));
    CHECK(test::values(bn.running_mean) == test::values(ref.running_mean));
    CHECK(test::values(bn.running_var) == test::values(ref.running_var));
  }
  CHECK(bn.num_batches_tracked.item<int64_t>() == 2);
}

}  // namespace

TEST_CASE("SyncBatchNorm without a group or with one rank is BatchNorm", "[distributed]") {
  for (DType t : {DType::F32, DType::F16}) {
    SyncBatchNorm alone({.features = 3});
    check_same_as_batch_norm(alone, t);
    SyncBatchNorm one({.features = 3}, test::solo_group());
    check_same_as_batch_norm(one, t);
    CHECK(one.layer_name() ==
          "SyncBatchNorm(3, eps=1e-05, momentum=0.1, affine=true, track_running_stats=true, sync=gloo:1)");
  }
  SyncBatchNorm bn({.features = 2});
  CHECK(bn.type_name() == "SyncBatchNorm");
  CHECK(nn::is_batch_norm(bn));
  std::vector<std::string> keys;
  for (const auto& entry : bn.state_dict()) keys.push_back(entry.first);
  CHECK(keys == std::vector<std::string>{"weight", "bias", "running_mean", "running_var", "num_batches_tracked"});
  // Any [N, C, ...] with 2 to 5 dims.
  CHECK(bn(randn({4, 2})).shape() == Shape{4, 2});
  CHECK(bn(randn({2, 2, 3, 2, 2})).shape() == Shape{2, 2, 3, 2, 2});
  CHECK_THAT(test::error_of([&] { bn(randn({2, 3, 4})); }), Catch::Contains("SyncBatchNorm"));
}

TEST_CASE("convert_sync_batchnorm on a ResNet-20 keeps its layers and state dict", "[distributed]") {
  manual_seed(1);
  nn::models::ResNet model(nn::models::ResNetConfig::cifar(20));
  const nn::NamedTensors before = model.state_dict();
  const std::string repr_before = model.str();
  auto pg = test::solo_group();
  CHECK(convert_sync_batchnorm(model, pg) == 19);
  const nn::NamedTensors after = model.state_dict();
  REQUIRE(after.size() == before.size());
  for (std::size_t i = 0; i < before.size(); ++i) {
    CHECK(after[i].first == before[i].first);
    CHECK(after[i].second.is_same(before[i].second));  // the same tensors, not copies
  }
  CHECK(model.bn1->sync() != nullptr);
  CHECK(model.bn1->type_name() == "BatchNorm2d");
  CHECK_THAT(model.str(), Catch::Contains("BatchNorm2d(16, eps=1e-05, momentum=0.1, affine=true, "
                                          "track_running_stats=true, sync=gloo:1)"));
  // With one rank the converted model computes what the plain one does, bit for bit.
  manual_seed(1);
  nn::models::ResNet plain(nn::models::ResNetConfig::cifar(20));
  const Tensor x = randn({2, 3, 8, 8});
  CHECK(test::values(model(x)) == test::values(plain(x)));
  // A null group undoes the conversion.
  CHECK(convert_sync_batchnorm(model, nullptr) == 19);
  CHECK(model.bn1->sync() == nullptr);
  CHECK(model.str() == repr_before);
}

TEST_CASE("DistributedDataParallel refuses a model whose SyncBatchNorm shares its group", "[distributed]") {
  // The SyncBatchNorm backward would all_reduce on the training thread while DDP's communication
  // thread owns the same group: refused with a clear error, before anything is communicated.
  auto pg = test::solo_group();
  auto model = std::make_shared<nn::models::ResNet>(nn::models::ResNetConfig::cifar(20));
  REQUIRE(convert_sync_batchnorm(*model, pg) == 19);
  REQUIRE_THROWS_AS(DistributedDataParallel(model, pg), NotImplementedError);
  REQUIRE_THROWS_WITH(DistributedDataParallel(model, pg),
                      Catch::Matchers::Contains("SyncBatchNorm 'bn1'") && Catch::Matchers::Contains("separate process groups"));
  // Local batch norm again: DDP accepts the model.
  REQUIRE(convert_sync_batchnorm(*model, nullptr) == 19);
  DistributedDataParallel ddp(model, pg);
  CHECK(&ddp.group() == pg.get());
}
