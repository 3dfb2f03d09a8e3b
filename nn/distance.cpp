#include "mixgrad/nn/distance.h"

#include "mixgrad/ops/distance.h"

namespace mg::nn {

CosineSimilarity::CosineSimilarity(Options o) : Module("CosineSimilarity"), options_(o) {}

Tensor CosineSimilarity::forward(const Tensor& x1, const Tensor& x2) {
  auto scope = module_scope(*this);
  return cosine_similarity(x1, x2, options_.dim, options_.eps);
}

std::string CosineSimilarity::extra_repr() const { return str_cat("dim=", options_.dim, ", eps=", options_.eps); }

PairwiseDistance::PairwiseDistance(Options o) : Module("PairwiseDistance"), options_(o) {}

Tensor PairwiseDistance::forward(const Tensor& x1, const Tensor& x2) {
  auto scope = module_scope(*this);
  return pairwise_distance(x1, x2, options_.p, options_.eps, options_.keepdim);
}

std::string PairwiseDistance::extra_repr() const {
  std::string s = str_cat("p=", options_.p, ", eps=", options_.eps);
  if (options_.keepdim) s += ", keepdim=true";
  return s;
}

}  // namespace mg::nn
