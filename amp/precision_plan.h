// The precision plan: for a model at an opt level, which parameters are stored in which dtype,
// which modules run in which dtype, where master weights live, and what each costs in memory.
// Printed by the examples' --precision-plan; call it after amp::initialize (it describes the
// model as it is then, with the resolved properties).
//
//   std::cout << mg::amp::precision_plan(*net, &opt);
#pragma once
#include <string>

#include "mixgrad/amp/properties.h"
#include "mixgrad/nn/module.h"
#include "mixgrad/optim/optimizer.h"

namespace mg::amp {

// With the properties amp was initialized with (O0's when amp is not initialized).
std::string precision_plan(const nn::Module& model, const optim::Optimizer* optimizer = nullptr);
std::string precision_plan(const nn::Module& model, const Properties& properties, const optim::Optimizer* optimizer);

}  // namespace mg::amp
