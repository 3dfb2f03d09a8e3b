#include "mixgrad/nn/activation_more.h"

#include "mixgrad/autograd/grad_mode.h"
#include "mixgrad/core/factory.h"

namespace mg::nn {

PReLU::PReLU(Options o) : UnaryModule("PReLU"), options_(o) {
  MG_CHECK(o.num_parameters >= 1, Error, "PReLU: num_parameters must be >= 1, got ", o.num_parameters);
  weight = register_parameter("weight", empty({o.num_parameters}));
  reset_parameters();
}

void PReLU::reset_parameters() {
  NoGradGuard no_grad;
  weight.fill_(options_.init);
}

}  // namespace mg::nn
