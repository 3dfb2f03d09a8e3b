#include "mixgrad/optim/master_grad_check.h"

#include <algorithm>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "mixgrad/optim/optimizer.h"

namespace mg::optim::detail {
namespace {

// Never destroyed: an optimizer that outlives main (a global) still unregisters safely.
std::mutex& registry_mutex() {
  static auto* m = new std::mutex;
  return *m;
}

// Live optimizers with master weights; usually one, so a vector.
std::vector<const Optimizer*>& registry() {
  static auto* r = new std::vector<const Optimizer*>;
  return *r;
}

// Where a tensor sits in an optimizer's master pairs.
struct PairSide {
  const Optimizer* opt;
  const MasterPair* pair;
  bool is_model;  // the f16/bf16 model tensor (else the f32 master)
};

}  // namespace

void register_master_optimizer(const Optimizer* opt) {
  std::lock_guard lock(registry_mutex());
  registry().push_back(opt);
}

void unregister_master_optimizer(const Optimizer* opt) {
  std::lock_guard lock(registry_mutex());
  auto& r = registry();
  r.erase(std::remove(r.begin(), r.end(), opt), r.end());
}

void check_clip_targets(const Tensors& params, const char* op) {
  std::lock_guard lock(registry_mutex());
  if (registry().empty()) return;
  std::unordered_map<const TensorImpl*, PairSide> sides;
  for (const Optimizer* opt : registry()) {
    for (const MasterPair& m : opt->master_pairs()) {
      sides.emplace(m.model.impl(), PairSide{opt, &m, true});
      sides.emplace(m.master.impl(), PairSide{opt, &m, false});
    }
  }
  for (std::size_t k = 0; k < params.size(); ++k) {
    if (!params[k].defined()) continue;  // the caller names an undefined parameter itself
    const auto it = sides.find(params[k].impl());
    if (it == sides.end()) continue;
    const PairSide& s = it->second;
    const Tensor& model = s.pair->model;
    const std::string low = dtype_name(model.dtype());
    if (s.is_model) {
      // amp::scale_loss drops the model gradient once the master holds it: the clip would skip it.
      MG_CHECK(!s.opt->master_grads_synced() || !s.pair->master.grad().defined(), Error, op, ": parameter ", k,
               " is ", low == "f16" ? "an " : "a ", low, " model parameter whose gradient ", s.opt->name(),
               " already took into its f32 master weight (GradScaler::unscale_, amp::scale_loss or "
               "sync_master_grads); the step reads the master, so clipping this parameter would change nothing",
               "\n  hint: clip the optimizer's parameters, the f32 masters: ", op,
               "(opt.parameters(), ...) or amp::master_params(opt)");
    } else {
      MG_CHECK(s.opt->master_grads_synced() || !model.grad().defined(), Error, op, ": parameter ", k,
               " is an f32 master weight of ", s.opt->name(),
               " whose gradient does not hold this step's gradient yet (step() copies it from the ", low,
               " model parameter, which would undo the clip)",
               "\n  hint: call scaler.unscale_(opt) first (with a GradScaler), or opt.sync_master_grads() (without one)");
    }
  }
}

}  // namespace mg::optim::detail
