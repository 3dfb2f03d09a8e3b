// Adafactor's fused CPU step (internal to optim/adafactor.cpp): the formulas of optim/adafactor.h
// in three passes over the gradient and one over the parameter, with no tensor of the parameter's
// size made — where the generic path (public ops) makes five (g^2, V, u, the scaled u, and an f32
// copy of an f16/bf16 parameter) and launches about twenty ops per parameter.
#pragma once
#include <cstdint>

#include "mixgrad/core/tensor.h"
#include "mixgrad/optim/adafactor.h"

namespace mg::optim::detail {

// Update t (>= 1) of a contiguous CPU parameter (f32, f64, f16 or bf16) with its contiguous gradient of
// the same dtype and its opmath state: row [B, n] and col [B, m] for a parameter of two or more
// dimensions viewed as [B, n, m], else var (its numel values); the others null. The sums follow
// the summation rule (core/cascade_sum.h) and run on the worker threads; the result does not
// depend on the thread count.
void adafactor_cpu_step(const Tensor& param, const Tensor& grad, void* row, void* col, void* var,
                        const AdafactorOptions& o, int64_t t);

}  // namespace mg::optim::detail
