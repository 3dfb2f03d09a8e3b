#include "mixgrad/amp/update_averaged.h"

#include <unordered_map>

namespace mg::amp {

void update_averaged(nn::AveragedModelBase& averaged, const nn::Module& model, const optim::Optimizer& optimizer) {
  std::unordered_map<const TensorImpl*, Tensor> master_of;
  for (const optim::MasterPair& m : optimizer.master_pairs()) master_of.emplace(m.model.impl(), m.master);
  averaged.update_parameters(model, [&](const Tensor& p) {
    const auto it = master_of.find(p.impl());
    return it == master_of.end() ? Tensor() : it->second.detach();
  });
}

}  // namespace mg::amp
