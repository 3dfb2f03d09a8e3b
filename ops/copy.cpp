// Copies and casts: clone, to(dtype), to(device), copy_ (via the `copy` op) and fill_. Casts are
// differentiable, so an f32 weight used in an f16 op receives an f32 gradient (DESIGN §4): the
// backward of to_dtype is the cast back, which the dispatcher applies to every gradient anyway.
#include "mixgrad/ops/backward_ctx.h"
#include "mixgrad/ops/dispatcher.h"
#include "mixgrad/ops/infer.h"
#include "mixgrad/ops/layout.h"
#include "mixgrad/ops/ops.h"
#include "mixgrad/ops/register.h"

namespace mg {
namespace {

// attrs.mode: the copy's MemoryFormat (0 Contiguous, the default; 1 ChannelsLast; 2 Preserve).
InferResult infer_clone(const Tensors& in, const OpAttrs& a) {
  MemoryFormat f = MemoryFormat(a.mode);
  if (f == MemoryFormat::Preserve) f = layout_of(in[0]);
  if (f == MemoryFormat::ChannelsLast) check_channels_last_shape("contiguous", in[0].shape());
  return {{{in[0].shape(), in[0].dtype(), f}}, in[0].dtype()};
}
// A cast keeps the layout (PyTorch's preserve_format), so autocast keeps an NHWC network NHWC.
InferResult infer_to_dtype(const Tensors& in, const OpAttrs& a) {
  return {{{in[0].shape(), a.dtype, layout_of(in[0])}}, in[0].dtype()};
}
// A move keeps the layout too (PyTorch's preserve_format): a channels-last model moved to a GPU
// stays channels-last, so cuDNN runs it NHWC without a reorder per convolution.
InferResult infer_to_device(const Tensors& in, const OpAttrs&) {
  return {{{in[0].shape(), in[0].dtype(), layout_of(in[0])}}, in[0].dtype()};
}
InferResult infer_copy(const Tensors& in, const OpAttrs&) {
  const Shape b = broadcast_shapes(in[0].shape(), in[1].shape(), "copy_");
  MG_CHECK(b == in[0].shape(), ShapeError, "copy_: source ", describe(in[1]),
           " cannot be broadcast to destination ", describe(in[0]));
  return {{{in[0].shape(), in[0].dtype()}}, in[1].dtype()};
}

// d clone = identity; d to_dtype = cast back (by the dispatcher)
Tensors identity_bw(const BackwardCtx&, const Tensors& g) { return {g[0]}; }
// d to_device = move back to the source's device (a CPU leaf moved to a GPU gets a CPU gradient)
Tensors to_device_bw(const BackwardCtx& c, const Tensors& g) { return {to(g[0], c.input_device(0))}; }
// d copy(dst, src) = (0, 1) — the old destination values are overwritten
Tensors copy_bw(const BackwardCtx&, const Tensors& g) { return {Tensor(), g[0]}; }

}  // namespace

void register_copy_rules() {
  set_op_rule(OpId::clone, {.infer = infer_clone, .backward = identity_bw});
  set_op_rule(OpId::to_dtype, {.infer = infer_to_dtype, .backward = identity_bw});
  set_op_rule(OpId::to_device, {.infer = infer_to_device, .backward = to_device_bw});
  set_op_rule(OpId::copy, {.infer = infer_copy, .backward = copy_bw});
}

Tensor clone(const Tensor& x) { return dispatch1(OpId::clone, {x}); }
Tensor contiguous(const Tensor& x) { return x.is_contiguous() ? x : clone(x); }
Tensor clone(const Tensor& x, MemoryFormat f) { return dispatch1(OpId::clone, {x}, {.mode = int64_t(f)}); }
Tensor contiguous(const Tensor& x, MemoryFormat f) {
  if (f == MemoryFormat::ChannelsLast) check_channels_last_shape("contiguous", x.shape());
  if (f == MemoryFormat::Preserve) f = layout_of(x);
  return x.is_contiguous(f) ? x : clone(x, f);
}

Tensor to(const Tensor& x, DType dtype) {
  return x.dtype() == dtype ? x : dispatch1(OpId::to_dtype, {x}, {.dtype = dtype});
}
Tensor to(const Tensor& x, Device device) {
  return x.device() == device ? x : dispatch1(OpId::to_device, {x}, {.device = device});
}
// attrs.mode 1: non_blocking (the dispatcher allocates a CUDA -> CPU result in pinned memory).
Tensor to(const Tensor& x, Device device, bool non_blocking) {
  return x.device() == device
             ? x
             : dispatch1(OpId::to_device, {x}, {.mode = non_blocking ? 1 : 0, .device = device});
}

}  // namespace mg
