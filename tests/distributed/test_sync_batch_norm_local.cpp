// SyncBatchNorm and convert_sync_batchnorm in one process: without a group and with a one-rank
// group it is BatchNorm bit for bit (forward, gradients, running statistics); conversion keeps a
// ResNet-20's layers, state dict and batch-norm identity and can be undone; DDP takes a converted
// model (on a private group) unless the group cannot make one. The multi-process comparisons with
// the global batch are in test_dist_data.cpp and test_groups.cpp.
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
    CHECK(after[i].second.data_ptr() == before[i].second.data_ptr());  // the same memory, not copies
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

namespace {

// A ProcessGroup that forwards to another but cannot make new groups (ProcessGroup's default
// new_group), as a user-defined backend might.
class NoSubgroups : public ProcessGroup {
 public:
  explicit NoSubgroups(std::shared_ptr<ProcessGroup> pg) : pg_(std::move(pg)) {}
  int rank() const override { return pg_->rank(); }
  int world_size() const override { return pg_->world_size(); }
  std::string backend() const override { return "custom"; }
  using ProcessGroup::all_reduce;
  using ProcessGroup::reduce_scatter;
  void all_reduce(Tensor& t, ReduceOp op) override { pg_->all_reduce(t, op); }
  void broadcast(Tensor& t, int root) override { pg_->broadcast(t, root); }
  Tensor all_gather(const Tensor& t) override { return pg_->all_gather(t); }
  Tensor reduce_scatter(const Tensor& t, ReduceOp op) override { return pg_->reduce_scatter(t, op); }
  void barrier() override { pg_->barrier(); }
  void shutdown() override { pg_->shutdown(); }
  std::chrono::milliseconds timeout() const override { return pg_->timeout(); }

 private:
  std::shared_ptr<ProcessGroup> pg_;
};

}  // namespace

TEST_CASE("DistributedDataParallel takes a SyncBatchNorm on the user's group: it communicates on its own",
          "[distributed]") {
  auto pg = test::solo_group();
  auto model = std::make_shared<nn::models::ResNet>(nn::models::ResNetConfig::cifar(20));
  REQUIRE(convert_sync_batchnorm(*model, pg) == 19);
  DistributedDataParallel ddp(model, pg);
  CHECK(&ddp.group() == pg.get());
  CHECK(&ddp.comm_group() != pg.get());
  CHECK(ddp.comm_group().world_size() == 1);
  CHECK(ddp.comm_group().backend() == "gloo");
  // A step: SyncBatchNorm's collectives on pg from this thread, the buckets on DDP's group.
  manual_seed(2);
  (*model)(randn({2, 3, 8, 8})).pow(2.0).mean().backward();
  CHECK(ddp.reduced_backwards() == 1);
  CHECK(model->bn1->weight.grad().defined());
}

TEST_CASE("DistributedDataParallel refuses a SyncBatchNorm on a group that cannot make a private one",
          "[distributed]") {
  // The SyncBatchNorm backward would all_reduce on the training thread while DDP's communication
  // thread owns the same group: refused with a clear error, before anything is communicated.
  auto pg = std::make_shared<NoSubgroups>(test::solo_group());
  CHECK_THROWS_AS(pg->new_group(), NotImplementedError);
  auto model = std::make_shared<nn::models::ResNet>(nn::models::ResNetConfig::cifar(20));
  REQUIRE(convert_sync_batchnorm(*model, pg) == 19);
  REQUIRE_THROWS_AS(DistributedDataParallel(model, pg), NotImplementedError);
  REQUIRE_THROWS_WITH(DistributedDataParallel(model, pg),
                      Catch::Matchers::StartsWith("DistributedDataParallel: the SyncBatchNorm 'bn1'") &&
                          Catch::Matchers::Contains("its custom group cannot make a private one with new_group") &&
                          Catch::Matchers::Contains("hint: give SyncBatchNorm and DistributedDataParallel separate groups"));
  // Local batch norm again: DDP accepts the model and communicates on the user's group.
  REQUIRE(convert_sync_batchnorm(*model, nullptr) == 19);
  DistributedDataParallel ddp(model, pg);
  CHECK(&ddp.comm_group() == pg.get());
}
