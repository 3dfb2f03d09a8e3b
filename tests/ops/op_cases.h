// The table of op cases that drives the generic op tests (DESIGN §8): every op in
// ops/op_list.def has at least one OpCase (tests/ops/test_registry.cpp checks it), and
// tests/ops/test_op_table.cpp runs each case through f64 gradient checks, f16/bf16-vs-f64
// comparisons, elementwise reference values and CUDA-vs-CPU comparisons.
//
// The one decision a reader must know: make_inputs(dtype) builds its values in f64 and rounds
// them to `dtype` once, so a low-precision run and the f64 reference (the same rounded inputs
// cast back to f64) see exactly the same input values; only the op's own rounding differs.
//
//   for (const OpCase& c : mg::optable::all_op_cases()) {
//     mg::Tensors in = c.make_inputs(mg::DType::F64);
//     mg::Tensor y = c.run(in);
//   }
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "ops/op.h"
#include "ops/ops.h"

namespace mg::optable {

// |got - want| <= atol + rtol * |want|
struct Tolerance {
  double rtol;
  double atol;
};

struct OpCase {
  OpId op;                 // the op under test
  std::string name;        // "add/broadcast"
  // Deterministic inputs in `dtype` (integer and bool inputs keep their own dtype).
  std::function<Tensors(DType)> make_inputs;
  // Calls the public API; multi-output ops return their differentiable output.
  std::function<Tensor(const Tensors&)> run;
  std::vector<int> grad_inputs;  // indices of the inputs checked by the gradient tests
  Tolerance f16{1e-2, 1e-3};     // vs the f64 result of the same rounded inputs
  Tolerance bf16{2e-2, 1e-2};
  Tolerance grad{1e-5, 1e-6};    // autograd vs central differences, in f64
  double grad_h = 1e-6;          // central-difference step
  bool skip_lowp = false;        // integer-only ops
  // Floating inputs that keep their own dtype whatever dtype the case is made in (an op's f32
  // statistics input, as the forward returns it for f16/bf16).
  std::vector<int> own_dtype_inputs;
  bool not_differentiable = false;
  // The output dtype when it is not the floating input dtype (bool, i64, a cast's target).
  std::optional<DType> out_dtype;
  // Elementwise reference: the output element from the (broadcast) input elements, in f64.
  std::function<double(const std::vector<double>&)> ref;
  // Golden f64 output (row-major) and shape for fixed inputs, the math in a comment at the case.
  std::vector<double> golden;
  Shape golden_shape;
};

// Every case, built once. Cases are ordered as op_list.def, group by group; the cases for the
// device launchers' special shapes (odd sizes, misaligned, empty) come last.
const std::vector<OpCase>& all_op_cases();
// The neural-network op groups append their cases (tests/ops/op_cases_<group>.cpp).
void add_loss_cases(std::vector<OpCase>& cases);
void add_late_loss_cases(std::vector<OpCase>& cases);  // called last: the earlier seeds stay
void add_late_pool_cases(std::vector<OpCase>& cases);  // likewise
void add_conv_cases(std::vector<OpCase>& cases);
void add_norm_cases(std::vector<OpCase>& cases);
void add_attention_cases(std::vector<OpCase>& cases);  // tests/ops/op_cases_attention.cpp, called last

// ---- builders shared by the op_cases*.cpp files ----
using Gen = std::function<Tensor(DType)>;    // makes one input in the requested dtype
using Run = std::function<Tensor(const Tensors&)>;
// f64 values rounded once into `dt` (an empty shape makes a 0-d tensor).
Tensor make_input(const std::vector<double>& v, const Shape& shape, DType dt);
// Fixed values, rounded into the requested dtype.
Gen fixed(std::vector<double> v, Shape s);
// The transpose of the last two dims of g's tensor (a non-contiguous view).
Gen transposed(Gen g);
// A case from input generators and a run function; not differentiable when grad_inputs is empty.
OpCase make_case(OpId op, std::string name, std::vector<Gen> gens, Run run, std::vector<int> grad_inputs);

// ---- helpers shared by the test files ----
// All elements of t (any dtype, any layout, cpu) as doubles, row-major.
std::vector<double> values(const Tensor& t);
// The storage offset (in elements, from data_ptr) of the k-th element in row-major order.
int64_t element_offset(const Tensor& t, int64_t k);
// Row-major f64 values drawn from the standard normal with a fixed seed.
std::vector<double> randn_values(int64_t n, uint64_t seed);

}  // namespace mg::optable
