// CosineSimilarity and PairwiseDistance: PyTorch's layers over mg::cosine_similarity and
// mg::pairwise_distance (ops/distance.h), two inputs, no parameters.
//
//   nn::CosineSimilarity cos({.dim = 1});
//   mg::Tensor s = cos.forward(a, b);   // a, b [N, D] -> [N]
#pragma once
#include <cstdint>

#include "mixgrad/nn/module.h"

namespace mg::nn {

struct CosineSimilarityOptions {
  int64_t dim = 1;
  double eps = 1e-8;
};

class CosineSimilarity : public Module {
 public:
  using Options = CosineSimilarityOptions;
  explicit CosineSimilarity(Options options = {});
  Tensor forward(const Tensor& x1, const Tensor& x2);

 protected:
  std::string extra_repr() const override;

 private:
  Options options_;
};

struct PairwiseDistanceOptions {
  double p = 2.0;
  double eps = 1e-6;
  bool keepdim = false;
};

class PairwiseDistance : public Module {
 public:
  using Options = PairwiseDistanceOptions;
  explicit PairwiseDistance(Options options = {});
  Tensor forward(const Tensor& x1, const Tensor& x2);

 protected:
  std::string extra_repr() const override;

 private:
  Options options_;
};

}  // namespace mg::nn
