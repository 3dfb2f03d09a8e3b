// In-place ops on views while autograd records (PyTorch's CopySlices). Writing into a view V of a
// base B changes B's values, so both need new history:
//   B_new = B_old with V's elements replaced by the op's result R     (node CopySlices)
//   V_new = V's elements of B_new                                     (node ViewOfBase)
// The dispatcher (ops/dispatcher.cpp) computes R out of place, writes it into V, then calls
// rebase_view_history. Other views of B taken before the write keep their old history; the
// dispatcher's version check refuses them in recorded ops (take the view again).
//
// The one decision a reader must know: both nodes' backward are written with differentiable ops
// over B's elements in storage order (index_select, masked_fill and scatter_add with an index of
// V's positions), so they run on every device and double backward works through them. The graph
// keeps only the geometry (O(1) per write, as PyTorch's); the backward of a write makes an int64
// index per element of V and a bool mask per element of B, and passes over B's gradient (as
// PyTorch's CopySlices clones it).
#pragma once
#include "mixgrad/core/tensor.h"

namespace mg {

// `self` is a differentiable view (TensorImpl::view_base set) that now holds `result`, the value
// of an in-place op computed out of place with history. Gives the base and the view their new
// history as above. Refuses (before anything changes) a view of a leaf that requires grad, and a
// base that is not dense (a base's elements must fill its storage without gaps or overlap).
void check_view_rebase(const Tensor& self, const char* op);
void rebase_view_history(const Tensor& self, const Tensor& result);

// Gives a view whose history no longer describes its values (its base was written in place after
// the view was taken: another view of it, or the base itself) the history "the view's elements of
// the base's current value" (PyTorch regenerates such a view's grad_fn the same way). False, and
// nothing changed, when the view has no differentiable base (detach()), the base needs no gradient
// or does not fill its memory densely, or the base was given other data.
bool refresh_view_history(const Tensor& view);

// The view checks of a recorded call (the dispatcher's ops, custom Functions, the reentrant
// checkpoint) on input `i`, named `op` in errors:
// - an input that requires grad and is a stale view gets its base's current history
//   (autograd::make_view_current), and is refused where it cannot;
// - an input that needs no gradient but is a view of a base that has gained gradient history
//   since the view was taken (an in-place op through another view) is refused: recorded as a
//   constant, it would silently lose the gradient of what was written into it.
// Call it for every input that requires grad, and for the others when the call records at all.
void check_recorded_input_view(const char* op, std::size_t i, const Tensor& t);

}  // namespace mg
