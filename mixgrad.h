// The umbrella header: everything a program needs to write tensor math with autograd.
//
//   #include "mixgrad.h"
//   mg::Tensor y = mg::gelu(mg::linear(x, w, b));
#pragma once

#include "autograd/engine.h"      // backward, grad
#include "autograd/grad_mode.h"   // NoGradGuard, EnableGradGuard
#include "core/factory.h"         // zeros, ones, randn, from_vector, manual_seed, ...
#include "core/parallel.h"        // set_num_threads
#include "core/storage.h"         // cpu_memory_stats
#include "core/tensor.h"          // Tensor, DType, Device
#include "ops/custom_function.h"  // Function<Derived>: user-defined forward/backward
#include "ops/ops.h"              // every op
