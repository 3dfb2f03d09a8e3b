// The public op API: free functions, each a one-liner into the dispatcher. Dims may be negative
// (counted from the end). Binary ops broadcast (numpy rules) and promote dtypes (DESIGN §3); a
// plain C++ scalar takes the tensor's dtype and never widens it.
//
//   mg::Tensor h = mg::gelu(mg::linear(x, w, b));            // x [B, 784], w [H, 784], b [H]
//   mg::Tensor loss = mg::mean(mg::pow(h - y, 2.0));
#pragma once
#include <utility>
#include <vector>

#include "mixgrad/core/factory.h"
#include "mixgrad/core/tensor.h"

namespace mg {

// ---- unary elementwise (floating inputs; neg/abs/sign/relu/clamp and the rounding ops also take
// i64, i32 and u8) ----
Tensor neg(const Tensor& x);
Tensor abs(const Tensor& x);
Tensor sign(const Tensor& x);
// To integral values in x's dtype (integers unchanged), with a zero gradient, as PyTorch's:
// round is half to even (round(0.5) = 0, round(1.5) = 2).
Tensor floor(const Tensor& x);
Tensor ceil(const Tensor& x);
Tensor trunc(const Tensor& x);
Tensor round(const Tensor& x);
Tensor exp(const Tensor& x);
Tensor log(const Tensor& x);
Tensor log1p(const Tensor& x);
Tensor expm1(const Tensor& x);
Tensor sqrt(const Tensor& x);
Tensor rsqrt(const Tensor& x);
Tensor reciprocal(const Tensor& x);
Tensor sin(const Tensor& x);
Tensor cos(const Tensor& x);
Tensor tanh(const Tensor& x);
Tensor sigmoid(const Tensor& x);
// The activations' backward ops, grad * f'(x) from the forward's input x in one pass: f'(x) in f32
// (f64 for f64), times grad, rounded once to the dtype; with grad = 1 within 1 ulp of the exact
// derivative for every f16/bf16 input (docs/numerics.md). What the backward of tanh, sigmoid, silu,
// erf, reciprocal and rsqrt runs; not differentiable themselves. They take the input x — unlike
// PyTorch's tanh_backward/sigmoid_backward, which take the output. grad and x: the same shape and
// floating dtype.
Tensor tanh_backward(const Tensor& grad, const Tensor& x);     // grad * (1 - tanh^2 x)
Tensor sigmoid_backward(const Tensor& grad, const Tensor& x);  // grad * sigmoid(x) sigmoid(-x)
Tensor silu_backward(const Tensor& grad, const Tensor& x);     // grad * sigmoid(x) (1 + x sigmoid(-x))
Tensor erf_backward(const Tensor& grad, const Tensor& x);      // grad * 2 / sqrt(pi) e^(-x^2)
Tensor reciprocal_backward(const Tensor& grad, const Tensor& x);  // grad * -1 / x^2
Tensor rsqrt_backward(const Tensor& grad, const Tensor& x);       // grad * -x^(-3/2) / 2
Tensor relu(const Tensor& x);
// grad where y > 0, else 0, in one pass: relu's backward from its output y = relu(x) (not
// differentiable itself). grad and y: the same shape and floating dtype.
Tensor relu_backward(const Tensor& grad, const Tensor& y);
enum class GeluApprox { None, Tanh };
Tensor gelu(const Tensor& x, GeluApprox approximate = GeluApprox::None);
// grad * d gelu(x) / dx in one pass (what gelu's backward runs; not differentiable itself).
// grad and x: the same shape and floating dtype.
Tensor gelu_backward(const Tensor& grad, const Tensor& x, GeluApprox approximate = GeluApprox::None);
Tensor silu(const Tensor& x);
// log(1 + exp(beta x)) / beta, linear above `threshold` (beta x > threshold), as PyTorch; beta may
// be negative, not 0.
Tensor softplus(const Tensor& x, double beta = 1.0, double threshold = 20.0);
Tensor erf(const Tensor& x);
// ---- the piecewise activations (ops/activation.cpp), PyTorch's definitions; f64/f32/f16/bf16,
// computed in opmath and rounded once; their backward is the fused op below ----
// x where x > 0, else negative_slope * x (any finite slope).
Tensor leaky_relu(const Tensor& x, double negative_slope = 0.01);
// x where x > 0, else alpha (e^x - 1) (finite alpha).
Tensor elu(const Tensor& x, double alpha = 1.0);
// scale * elu(x, alpha) with SELU's fixed constants (Klambauer et al. 2017), in one pass.
inline constexpr double kSeluAlpha = 1.6732632423543772848170429916717;
inline constexpr double kSeluScale = 1.0507009873554804934193349852946;
Tensor selu(const Tensor& x);
// max(0, x) + min(0, alpha (e^{x / alpha} - 1)) (alpha finite, not 0).
Tensor celu(const Tensor& x, double alpha = 1.0);
// x relu6(x + 3) / 6 and relu6(x + 3) / 6 (MobileNetV3).
Tensor hardswish(const Tensor& x);
Tensor hardsigmoid(const Tensor& x);
// x tanh(softplus(x)) (Misra 2019), without the cancellation of its composite for x < 0.
Tensor mish(const Tensor& x);
// clamp(x, min_val, max_val) and clamp(x, 0, 6): their gradient is 0 at the bounds, as PyTorch's.
Tensor hardtanh(const Tensor& x, double min_val = -1.0, double max_val = 1.0);
Tensor relu6(const Tensor& x);
// Their fused backward ops, grad * f'(x) from the input x (not differentiable themselves; grad and
// x: the same shape and floating dtype). elu_backward covers the family: scale = 1 for ELU,
// kSeluScale (with kSeluAlpha) for SELU, celu_input_scale for CELU's e^{x / alpha}.
Tensor leaky_relu_backward(const Tensor& grad, const Tensor& x, double negative_slope);
Tensor elu_backward(const Tensor& grad, const Tensor& x, double alpha, double scale = 1.0,
                    bool celu_input_scale = false);
Tensor hardswish_backward(const Tensor& grad, const Tensor& x);
// grad * softplus'(x) = grad * sigmoid(beta x), or grad where beta x > threshold.
Tensor softplus_backward(const Tensor& grad, const Tensor& x, double beta = 1.0, double threshold = 20.0);
Tensor hardsigmoid_backward(const Tensor& grad, const Tensor& x);
Tensor mish_backward(const Tensor& grad, const Tensor& x);
Tensor pow(const Tensor& x, double exponent);
Tensor clamp(const Tensor& x, double min, double max);
Tensor clamp_min(const Tensor& x, double min);
Tensor clamp_max(const Tensor& x, double max);

// ---- binary elementwise with broadcasting ----
Tensor add(const Tensor& a, const Tensor& b, double alpha = 1.0);  // a + alpha * b
Tensor sub(const Tensor& a, const Tensor& b, double alpha = 1.0);  // a - alpha * b
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor pow(const Tensor& a, const Tensor& b);
// Division rounded toward zero (Trunc: C's integer division) or toward -inf (Floor: Python's //),
// as PyTorch's div(a, b, rounding_mode): integers stay integers (an integer divisor holding a 0 is
// refused, which reads it on the host: a synchronisation on CUDA), floats round the exact quotient
// (floor of -7 / 2 is -4; x / 0 is inf or NaN). A zero gradient. floor_divide is the Floor mode.
enum class RoundingMode { None, Trunc, Floor };
Tensor div(const Tensor& a, const Tensor& b, RoundingMode mode);
Tensor div(const Tensor& a, double b, RoundingMode mode);  // a scalar divisor: checked with no device read
Tensor floor_divide(const Tensor& a, const Tensor& b);
Tensor floor_divide(const Tensor& a, double b);
// a - b floor(a / b), with the divisor's sign (Python's %, torch.remainder, operator%), and
// a - b trunc(a / b), with the dividend's sign (C's fmod, torch.fmod). Exact for floats, integer
// divisors as div's. Gradient (1, -floor(a / b)) and (1, -trunc(a / b)).
Tensor remainder(const Tensor& a, const Tensor& b);
Tensor remainder(const Tensor& a, double b);
Tensor fmod(const Tensor& a, const Tensor& b);
Tensor fmod(const Tensor& a, double b);
Tensor maximum(const Tensor& a, const Tensor& b);
Tensor minimum(const Tensor& a, const Tensor& b);
// Comparisons return bool tensors and are not differentiable.
Tensor eq(const Tensor& a, const Tensor& b);
Tensor ne(const Tensor& a, const Tensor& b);
Tensor lt(const Tensor& a, const Tensor& b);
Tensor le(const Tensor& a, const Tensor& b);
Tensor gt(const Tensor& a, const Tensor& b);
Tensor ge(const Tensor& a, const Tensor& b);
// cond ? a : b elementwise (cond bool, all three broadcast).
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);
// A 0-d tensor holding `value` in `like`'s dtype (f32 when `like` is integral and value is not
// a whole number) on `like`'s device.
Tensor scalar_like(double value, const Tensor& like);

Tensor operator-(const Tensor& x);
Tensor operator+(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& a, const Tensor& b);
Tensor operator*(const Tensor& a, const Tensor& b);
Tensor operator/(const Tensor& a, const Tensor& b);
Tensor operator+(const Tensor& a, double b);
Tensor operator-(const Tensor& a, double b);
Tensor operator*(const Tensor& a, double b);
Tensor operator/(const Tensor& a, double b);
Tensor operator+(double a, const Tensor& b);
Tensor operator-(double a, const Tensor& b);
Tensor operator*(double a, const Tensor& b);
Tensor operator/(double a, const Tensor& b);
Tensor operator%(const Tensor& a, const Tensor& b);  // remainder(a, b)
Tensor operator%(const Tensor& a, double b);

// ---- reductions: `dims` empty means all dims; accumulate in f32 for f16/bf16 ----
Tensor sum(const Tensor& x, const std::vector<int64_t>& dims = {}, bool keepdim = false);
Tensor mean(const Tensor& x, const std::vector<int64_t>& dims = {}, bool keepdim = false);
Tensor prod(const Tensor& x, const std::vector<int64_t>& dims = {}, bool keepdim = false);
Tensor amax(const Tensor& x, const std::vector<int64_t>& dims = {}, bool keepdim = false);
Tensor amin(const Tensor& x, const std::vector<int64_t>& dims = {}, bool keepdim = false);
// Maximum over all elements (0-d).
Tensor max(const Tensor& x);
Tensor min(const Tensor& x);
// (values, i64 indices) along `dim`; the first index wins ties.
std::pair<Tensor, Tensor> max(const Tensor& x, int64_t dim, bool keepdim = false);
std::pair<Tensor, Tensor> min(const Tensor& x, int64_t dim, bool keepdim = false);
Tensor argmax(const Tensor& x, int64_t dim, bool keepdim = false);
Tensor argmin(const Tensor& x, int64_t dim, bool keepdim = false);
// correction = 1 gives the unbiased estimator (Bessel), 0 the population variance.
Tensor var(const Tensor& x, const std::vector<int64_t>& dims = {}, double correction = 1.0,
           bool keepdim = false);
Tensor std(const Tensor& x, const std::vector<int64_t>& dims = {}, double correction = 1.0,
           bool keepdim = false);
// p-norm over dims (p may be INFINITY).
Tensor norm(const Tensor& x, double p = 2.0, const std::vector<int64_t>& dims = {}, bool keepdim = false);
Tensor logsumexp(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim = false);
Tensor cumsum(const Tensor& x, int64_t dim);
// The running product along dim, as PyTorch's: in opmath in order, each output rounded once;
// integers and bool give i64 (wrapping). Its gradient is exact where x holds zeros too.
Tensor cumprod(const Tensor& x, int64_t dim);
// Sums a broadcast tensor back to `shape` (the reverse of expand).
Tensor sum_to(const Tensor& x, const Shape& shape);

// ---- linear algebra ----
// numpy matmul: 1-D·1-D dot, 2-D mm, batched with broadcast batch dims.
Tensor matmul(const Tensor& a, const Tensor& b);
Tensor mm(const Tensor& a, const Tensor& b);                  // [n, k] @ [k, m]
Tensor bmm(const Tensor& a, const Tensor& b);                 // [B, n, k] @ [B, k, m]
Tensor addmm(const Tensor& c, const Tensor& a, const Tensor& b, double beta = 1.0, double alpha = 1.0);
Tensor baddbmm(const Tensor& c, const Tensor& a, const Tensor& b, double beta = 1.0, double alpha = 1.0);
// x [..., in] @ weight[out, in]^T + bias[out]. As PyTorch's: a 1-D weight [in] gives [...] (the
// feature dim dropped), and a 0-d or [1] bias is added to every output feature.
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor());

// ---- views (share storage with the input) ----
Tensor view(const Tensor& x, const Shape& shape);  // one size may be -1
Tensor reshape(const Tensor& x, const Shape& shape);  // a view when possible, else a copy
Tensor permute(const Tensor& x, const std::vector<int64_t>& dims);
Tensor transpose(const Tensor& x, int64_t d0, int64_t d1);
Tensor expand(const Tensor& x, const Shape& shape);  // -1 keeps a size
Tensor slice(const Tensor& x, int64_t dim, int64_t start, int64_t end, int64_t step = 1);
Tensor narrow(const Tensor& x, int64_t dim, int64_t start, int64_t length);
Tensor select(const Tensor& x, int64_t dim, int64_t index);
Tensor squeeze(const Tensor& x);
Tensor squeeze(const Tensor& x, int64_t dim);
Tensor unsqueeze(const Tensor& x, int64_t dim);
Tensor flatten(const Tensor& x, int64_t start_dim = 0, int64_t end_dim = -1);

// ---- copies and casts ----
Tensor clone(const Tensor& x);
Tensor contiguous(const Tensor& x);  // x itself when already contiguous
// A copy laid out in memory format `f` (clone(x) is clone(x, Contiguous); Preserve keeps x's).
Tensor clone(const Tensor& x, MemoryFormat f);
// x itself when already dense in `f`, else clone(x, f). ChannelsLast needs a 4-D x (ShapeError).
Tensor contiguous(const Tensor& x, MemoryFormat f);
Tensor to(const Tensor& x, DType dtype);
Tensor to(const Tensor& x, Device device);
// non_blocking: see Tensor::to(Device, bool) and docs/cuda.md (the to_device op with attrs.mode 1).
Tensor to(const Tensor& x, Device device, bool non_blocking);
// A dense copy of a CPU tensor in page-locked host memory, contiguous or channels-last as x is
// (x itself when already pinned).
Tensor pin_memory(const Tensor& x);

// ---- shape and indexing ----
// Joins along dim; dtypes promote. As PyTorch, a 1-D tensor of size 0 beside tensors of another
// rank is skipped (it still takes part in the promotion).
Tensor cat(const Tensors& xs, int64_t dim = 0);
Tensor stack(const Tensors& xs, int64_t dim = 0);
Tensors split(const Tensor& x, int64_t split_size, int64_t dim = 0);
Tensors split(const Tensor& x, const std::vector<int64_t>& sizes, int64_t dim = 0);
Tensors chunk(const Tensor& x, int64_t chunks, int64_t dim = 0);
// The x.size(dim) slices along dim (views, each without that dim), as PyTorch's unbind; their
// gradients are stacked once in backward (O(n), where n select()s cost O(n^2): each one's
// backward fills a zero tensor of x's size).
Tensors unbind(const Tensor& x, int64_t dim = 0);
Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index);
// out[i][j] = x[index[i][j]][j] (dim 0); out has index's shape. A 0-d operand counts as 1-D with
// one element (gather and scatter_add), as in PyTorch.
Tensor gather(const Tensor& x, int64_t dim, const Tensor& index);
// self with src added at index along dim: out[index[i][j]][j] += src[i][j] (dim 0).
Tensor scatter_add(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src);
// x with `value` where mask is set; x and mask broadcast together (out of place; in place,
// Tensor::masked_fill_, the mask must broadcast to x).
Tensor masked_fill(const Tensor& x, const Tensor& mask, double value);
Tensor one_hot(const Tensor& index, int64_t num_classes);

}  // namespace mg
