// How the CUDA conv kernels (cuda/conv_kernels.cpp) hand a convolution to cuDNN (cuda/dnn.cpp), as
// plain host code unit-tested on the CPU (tests/cuda/test_dnn_conv_plan.cpp): which engine runs a
// conv (cuDNN, or the im2col path where this file declares it), the memory layout read from the
// strides (NCHW or channels-last NHWC), the descriptors' parameters, the math mode, the key of the
// algorithm cache, the filtering of cuDNN's algorithm list (deterministic mode, strict f32), the
// order in which algorithms are retried when a workspace does not fit, and the error texts.
//
// Decisions:
// - cuDNN's legacy convolution API (cudnnConvolution*, cudnnGet*_v7, cudnnFind*Ex): still shipped
//   and supported in cuDNN 9, and it hands back per algorithm exactly what the selection needs
//   (status, time, workspace, determinism, math type) in one struct; benchmark mode is its Find*Ex.
//   The graph API would add the conv + bias + ReLU fusions, not used here; everything in this file
//   is independent of the API, so a move to the graph API changes cuda/dnn.cpp only.
// - The im2col + cuBLASLt path stays for what conv_engine() names, nothing else (no silent
//   fallback: a configuration cuDNN rejects is an error naming shape, dtype and layout).
// - A conv computes in one layout: NHWC when any operand is channels-last, else NCHW. Operands in
//   the other layout are copied (inputs) or computed into a temporary and copied out (outputs).
//
//   const DnnConvProblem p = make_dnn_conv_problem(ConvDirection::Forward, dtype, g, layout, {...});
//   const std::vector<int64_t> key = dnn_conv_key(p);  // the cache's key
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "mixgrad/core/dtype.h"
#include "mixgrad/core/shape.h"
#include "mixgrad/core/tensor.h"
#include "mixgrad/cuda/host/conv_plan.h"

namespace mg::cuda {

// ---- engine: cuDNN, or the im2col path where declared ----

enum class ConvEngine : uint8_t { Cudnn, Im2col };

// The engine of one conv, and why when it is im2col (nullptr for cuDNN). The declared im2col cases:
// - f64: not a Tensor Core dtype; it keeps the im2col path, the tested f64 reference;
// - a tensor of more than 2^31 - 1 elements (the legacy descriptors take int strides);
// - an input gradient / conv_transpose2d whose gradient g [.., Ho, Wo] is not the forward size of
//   {H, W} (conv_transpose2d with an output_padding not below the stride): cuDNN's backward-data
//   requires dy to be exactly the forward output of dx.
// `g` is the conv's geometry with Ho, Wo as the tensors have them (g's own size for the gradient).
struct ConvEngineChoice {
  ConvEngine engine = ConvEngine::Cudnn;
  const char* reason = nullptr;
};
ConvEngineChoice conv_engine(ConvDirection dir, DType dtype, const ConvDims& g);

// Sizes cuDNN cannot take (a zero dimension anywhere: batch, channels, spatial, kernel): what the
// kernel does instead. The shape checks accept a zero-size input when padding covers the kernel
// (x [1, 3, 0, 5], pad 1, 1x1 kernel: a [1, O, 2, 7] output of zeros plus the bias), as the CPU.
enum class ConvTrivial : uint8_t {
  None,       // a real conv: call cuDNN
  Empty,      // the output has no elements: nothing to do
  Zero,       // the output is 0 (plus the bias): an empty sum (an operand without elements)
};
ConvTrivial conv_trivial(ConvDirection dir, const ConvDims& g);

// Whether a cuDNN status (its integer value) refuses the configuration, so the next algorithm is
// tried: NOT_SUPPORTED and its sub-codes about the problem (shape, data type, layout, padding,
// shared memory, launch parameters, graph pattern, dynamic shape). Not the sub-codes that say the
// installation cannot work (an incompatible driver or CUDA runtime, an architecture mismatch, a
// missing runtime prerequisite or sub-library, CUDA graph native API): those must be raised, not
// reported as "no algorithm".
bool dnn_status_refuses(int status);

// ---- layouts ----

enum class ConvLayout : uint8_t { NCHW, NHWC };
const char* layout_name(ConvLayout layout);

// Which dense layouts a 4-D tensor's strides match: both for shapes where they coincide (C = 1, or
// H = W = 1, or no elements); neither for other strides (a slice, a transpose of H and W).
struct LayoutMatch {
  bool nchw = false;
  bool nhwc = false;
  bool matches(ConvLayout l) const { return l == ConvLayout::NCHW ? nchw : nhwc; }
};
LayoutMatch layout_match(const Shape& shape, const Strides& strides);

// The same for a tensor (its shape and strides).
LayoutMatch layout_match(const Tensor& t);

// Whether t's data starts on a 16-byte boundary: cuDNN's f16/bf16 (and vectorised f32) kernels
// assume it, and a view with an offset (x.narrow(0, 1, n) of f16) need not.
bool aligned_for_cudnn(const Tensor& t);
// t [N, C, H, W] dense in `layout` and aligned_for_cudnn: t itself when it already is, else a copy
// (the strides of a permuted tensor for NHWC: [N, H, W, C] in memory).
Tensor in_layout(const Tensor& t, ConvLayout layout);
// A new [N, C, H, W] tensor dense in `layout`.
Tensor empty_in_layout(const Shape& shape, DType dtype, Device device, ConvLayout layout);

// The layout a conv computes in: NHWC when any operand matches NHWC but not NCHW, else NCHW.
ConvLayout choose_conv_layout(const std::vector<LayoutMatch>& operands);

// Strides of a dense [N, C, H, W] tensor (logical order) in `layout`.
std::array<int64_t, 4> layout_strides(const std::array<int64_t, 4>& dims, ConvLayout layout);

// ---- the problem cuDNN sees ----

// The math a conv runs with. Mirrors cudnnMathType_t: Default (cuDNN chooses; TF32 allowed for
// f32), TensorOp (Tensor Cores), TensorOpAllowConversion (may round inputs down to f16: accepted
// for f16 data only), Fma (no Tensor Cores: strict f32).
enum class DnnMath : uint8_t { Default, TensorOp, TensorOpAllowConversion, Fma };
const char* dnn_math_name(DnnMath m);

// The math type asked for: f16/bf16 TensorOp (f32 accumulation: compute type f32); f32 Fma, or
// Default with allow_tf32 (cuDNN then uses TF32 Tensor Cores); f64 Fma.
DnnMath conv_math(DType dtype, bool allow_tf32);
// cuDNN's compute (accumulation) type: f32 for f16/bf16/f32, f64 for f64.
DType conv_compute_dtype(DType dtype);

struct DnnConvProblem {
  ConvDirection dir = ConvDirection::Forward;
  DType dtype = DType::F32;
  ConvLayout layout = ConvLayout::NCHW;
  DnnMath math = DnnMath::Fma;
  bool deterministic = false;  // set_cudnn_deterministic
  bool benchmark = false;      // set_cudnn_benchmark
  ConvDims g{};                // x [N, C, H, W], w [O, C/groups, kH, kW], y [N, O, Ho, Wo]
  int device = 0;
  int alignment = 16;          // the largest of 16/8/4/2 bytes dividing every data pointer
};
struct DnnConvFlags {
  bool allow_tf32 = false;
  bool deterministic = false;
  bool benchmark = false;
  int device = 0;
};
DnnConvProblem make_dnn_conv_problem(ConvDirection dir, DType dtype, const ConvDims& g, ConvLayout layout,
                                     const DnnConvFlags& flags);

// The largest of 16, 8, 4, 2 (or 1) bytes that divides every address.
int pointer_alignment(const std::vector<const void*>& ptrs);

// The algorithm cache's key: everything the choice depends on (direction, dtype, layout, math,
// modes, every size and stride/pad/dilation/groups, device, alignment).
std::vector<int64_t> dnn_conv_key(const DnnConvProblem& p);

// The descriptors' parameters. x and y: [N, C, H, W] / [N, O, Ho, Wo] in p.layout; the filter
// [O, C/groups, kH, kW] in the same layout (NHWC: [O, kH, kW, C/groups] in memory).
struct DnnTensorParams {
  std::array<int64_t, 4> dims{};     // logical N, C, H, W
  std::array<int64_t, 4> strides{};  // of those dims
};
DnnTensorParams dnn_x_params(const DnnConvProblem& p);
DnnTensorParams dnn_y_params(const DnnConvProblem& p);
std::array<int64_t, 4> dnn_filter_dims(const DnnConvProblem& p);  // O, C/groups, kH, kW

// "x [2, 3, 9, 8] f16 NHWC, w [5, 3, 3, 3], y [2, 5, 9, 8], stride [1, 1], padding [1, 1],
// dilation [1, 1], groups 1, math TensorOp"
std::string describe(const DnnConvProblem& p);
const char* dnn_direction_name(ConvDirection dir);  // "forward", "backward-data", "backward-filter"

// ---- choosing among cuDNN's algorithms ----

// One entry of cuDNN's perf list (cudnnConvolution*AlgoPerf_t), as host values.
struct DnnAlgoResult {
  int algo = 0;
  bool ok = false;            // status == CUDNN_STATUS_SUCCESS
  float time_ms = -1;         // measured (Find); -1 from the heuristic (Get_v7)
  std::size_t workspace = 0;  // bytes
  bool deterministic = false;
  DnnMath math = DnnMath::Default;
};
struct DnnAlgoChoice {
  int algo = 0;
  std::size_t workspace = 0;
  DnnMath math = DnnMath::Default;
  bool operator==(const DnnAlgoChoice& o) const {
    return algo == o.algo && workspace == o.workspace && math == o.math;
  }
};
// What filter_conv_algos dropped, for the error message when nothing is left.
struct DnnFilterStats {
  int failed = 0;            // status not success
  int nondeterministic = 0;  // dropped in deterministic mode
  int wrong_math = 0;        // TF32 / f16-conversion math where strict f32 was asked, or conversion
  int no_workspace = 0;      // kept, then dropped: cuDNN gave no workspace size for it (cuda/dnn.cpp)
};
// The candidates in order of preference: cuDNN's order (the heuristic's ranking, or Find's, which
// is by time), then by measured time when `by_time` (stable); without failed entries, without
// nondeterministic ones when `deterministic`, without math the problem does not allow (Fma asked:
// no Tensor Core math, Default run as Fma; TensorOpAllowConversion only for f16 data, where the
// conversion to f16 is a no-op), each (algo, math) once.
std::vector<DnnAlgoChoice> filter_conv_algos(const std::vector<DnnAlgoResult>& results, const DnnConvProblem& p,
                                             bool by_time, DnnFilterStats* stats = nullptr);

// After candidate `failed` could not get its workspace (the allocator was out of memory even after
// emptying its cache): the next candidate to try, the first later one that needs less workspace;
// -1 when none is left.
int next_workspace_fallback(const std::vector<DnnAlgoChoice>& candidates, std::size_t failed);

// The device side of running one conv with a candidate (cuDNN in cuda/dnn.cpp; a fake in tests).
class DnnRunner {
 public:
  virtual ~DnnRunner() = default;
  // Takes a workspace of `bytes` for the next run (replacing the previous one); false when the
  // allocator is out of memory even after emptying its cache.
  virtual bool take_workspace(std::size_t bytes) = 0;
  // Runs candidate `c` on that workspace; false when cuDNN refuses it (CUDNN_STATUS_NOT_SUPPORTED).
  virtual bool run(const DnnAlgoChoice& c) = 0;
};
enum class DnnRunOutcome : uint8_t {
  Ran,          // candidates[index] ran
  OutOfMemory,  // candidates[index]'s workspace did not fit and no later candidate needs less
  AllRefused,   // every candidate tried was refused
};
struct DnnRunResult {
  DnnRunOutcome outcome = DnnRunOutcome::Ran;
  std::size_t index = 0;
  std::vector<std::size_t> refused;  // indices cuDNN refused (to drop from the cache)
};
// Tries the candidates in order: a workspace that does not fit moves to next_workspace_fallback, a
// refused candidate to the next one.
DnnRunResult run_candidates(const std::vector<DnnAlgoChoice>& candidates, DnnRunner& runner);

// The workspace given to cudnnFind*Ex in benchmark mode: the largest any heuristic candidate
// needs, at most `cap` bytes (algorithms needing more are reported failed and dropped).
inline constexpr std::size_t kDnnFindWorkspaceCap = std::size_t(1) << 30;  // 1 GiB
std::size_t find_workspace_bytes(const std::vector<DnnAlgoResult>& heuristic, std::size_t cap = kDnnFindWorkspaceCap);

// The NotImplementedError text when no algorithm is left: names the op, direction, shapes, dtype,
// layout and math, and a hint from what was dropped.
std::string dnn_no_algo_message(const char* op, const DnnConvProblem& p, const DnnFilterStats& s, int offered);

}  // namespace mg::cuda
