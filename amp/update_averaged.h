// Weight averaging (nn::AveragedModel: SWA, EMA) of a model trained at O2: the model holds f16/bf16
// copies of the optimizer's f32 master weights, and averaging those copies averages values already
// rounded to a bf16 ulp (0.4% of the weight), where the masters hold the weights the optimizer
// steps. update_averaged folds each parameter's master into the average instead (the model's own
// tensor where it has none: O0/O1/O3, f32 parameters kept at O2, batch-norm statistics).
//
//   nn::AveragedModel<Net> ema(std::make_shared<Net>(), *net, {.averaging = nn::Averaging::Exponential});
//   ...  opt.step();  amp::update_averaged(ema, *net, opt);
//
// Keep the averaged copy in f32 (build it before amp::initialize casts the model, or cast it back):
// an f16/bf16 copy rounds the average again.
#pragma once
#include "mixgrad/nn/averaged_model.h"
#include "mixgrad/optim/optimizer.h"

namespace mg::amp {

// averaged.update_parameters(model) with every parameter of `model` that has an f32 master in
// `optimizer` replaced by that master (optim/master_weights.h).
void update_averaged(nn::AveragedModelBase& averaged, const nn::Module& model, const optim::Optimizer& optimizer);

}  // namespace mg::amp
