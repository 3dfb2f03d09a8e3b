// The autograd graph. Every differentiable op records a Node whose next_edges point at the nodes
// of its inputs; leaves that require grad end in an AccumulateGrad node. The engine calls
// apply() with the gradients of a node's outputs and routes the returned input gradients along
// next_edges.
#pragma once
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "mixgrad/core/tensor.h"

namespace mg::autograd {

class Node;

// Where a gradient goes: input slot `input_nr` of `node` (= the output_nr of the tensor).
struct Edge {
  std::shared_ptr<Node> node;
  uint32_t input_nr = 0;
  bool valid() const { return node != nullptr; }
};

class Node : public std::enable_shared_from_this<Node> {
 public:
  explicit Node(uint32_t num_outputs);
  // Frees the nodes this one alone kept alive iteratively, not by recursion: a graph of a few
  // hundred thousand nodes in a chain (a loss summed over many steps, a long unroll) would
  // otherwise overflow the stack when its last output goes.
  virtual ~Node();

  // Gradients of this node's forward outputs in, gradients for next_edges out (same order and
  // length as next_edges; an undefined Tensor means "no gradient").
  virtual Tensors apply(Tensors&& grad_outputs) = 0;
  // "mul_backward", "AccumulateGrad", ...
  virtual std::string name() const = 0;
  // Frees saved tensors after a backward without retain_graph.
  virtual void release_saved() {}
  // Whether forward output `output_nr` shares memory with one of the node's inputs (a custom
  // function or a checkpoint that returned an input, or a view of one): writing into it in place
  // would bypass the node's backward, so the dispatcher refuses it.
  virtual bool output_aliases_input(uint32_t output_nr) const {
    (void)output_nr;
    return false;
  }

  // Runs the pre-hooks of output `output_nr` on its gradient (tensor hooks live here), then adds
  // the result into the .grad of the tensor that retains output `output_nr`'s gradient, if any
  // (Tensor::retain_grad: .grad is the gradient after every hook, as in PyTorch).
  Tensor run_pre_hooks(uint32_t output_nr, Tensor grad) const;
  // Returns an id for remove_pre_hook (false when no hook has it).
  uint64_t add_pre_hook(uint32_t output_nr, TensorHook hook);
  bool remove_pre_hook(uint64_t id);
  // The tensor whose .grad receives output `output_nr`'s gradient (held weakly), and its removal
  // when an in-place op gives that tensor a new grad_fn.
  void set_retained(uint32_t output_nr, const std::shared_ptr<TensorImpl>& tensor);
  void clear_retained(uint32_t output_nr);

  std::vector<Edge> next_edges;
  uint32_t num_outputs() const { return num_outputs_; }
  // Creation order; the engine runs later nodes first.
  uint64_t sequence_nr() const { return sequence_nr_; }
  bool released() const { return released_.load(std::memory_order_relaxed); }
  void mark_released() { released_.store(true, std::memory_order_relaxed); }
  // Held by the engine around apply() and release_saved() (AccumulateGrad locks for itself), so
  // two threads running backward through one shared graph take turns on each node, as PyTorch's
  // per-node mutex: with retain_graph both passes read what the node saved, and one pass freeing
  // it makes the other's read a clean "second time" error instead of a use-after-free. Recursive:
  // a node's backward that starts a nested backward on this thread may come back to it.
  std::recursive_mutex& apply_mutex() const { return apply_mutex_; }

  // The module path current when the node was recorded ("layer1.0.conv2"), kept only while an op
  // observer is installed (core/op_observer.h); the engine reports the node under it.
  std::shared_ptr<const std::string> module_path;

 private:
  uint32_t num_outputs_;
  uint64_t sequence_nr_;
  std::atomic<bool> released_{false};
  mutable std::recursive_mutex apply_mutex_;

 protected:
  // Guards the hook and retained-tensor lists (and AccumulateGrad's post-hooks): held only while a
  // list is copied or changed, never while a hook runs, so hooks may add or remove hooks.
  mutable std::mutex hooks_mutex_;

 private:
  struct PreHook {
    uint32_t output_nr;
    uint64_t id;
    TensorHook hook;
  };
  std::vector<PreHook> pre_hooks_;
  std::vector<std::pair<uint32_t, std::weak_ptr<TensorImpl>>> retained_;
};

// Called with the leaf after its gradient of this backward was added into its .grad (autograd/hooks.h).
using PostAccumulateHook = std::function<void(const Tensor& leaf)>;

// Sink of a leaf tensor: adds the incoming gradient into the leaf's .grad, then runs the leaf's
// post-accumulate hooks in registration order.
class AccumulateGrad final : public Node {
 public:
  explicit AccumulateGrad(const std::shared_ptr<TensorImpl>& leaf);
  Tensors apply(Tensors&& grads) override;
  std::string name() const override { return "AccumulateGrad"; }

  // Returns an id for remove_post_hook (ids are unique in the process).
  uint64_t add_post_hook(PostAccumulateHook hook);
  // False when no hook has this id.
  bool remove_post_hook(uint64_t id);

 private:
  std::weak_ptr<TensorImpl> leaf_;  // the leaf owns this node; a dead leaf drops its gradient
  std::vector<std::pair<uint64_t, PostAccumulateHook>> post_hooks_;
};

// The edge a gradient for tensor `t` must follow: its grad_fn, or its AccumulateGrad (created on
// first use) when it is a leaf that requires grad; invalid when it needs no gradient.
Edge gradient_edge(const Tensor& t);

// A view whose base was written in place after the view was taken (through another view of the
// base, or the base itself) has a history that describes its old values. make_view_current gives
// such a view the history "its elements of the base's current value" (GradMath::refresh_view,
// ops/inplace_view.h) and returns false when it cannot: then the caller refuses the view rather
// than follow the old history to a wrong gradient. True for every other tensor. Every entry
// point that turns a user's tensor into a graph edge (recorded ops, backward/grad, hooks, custom
// Functions, the reentrant checkpoint) calls it first.
bool make_view_current(const Tensor& t);

// Makes `node` the grad_fn of the floating outputs (output j -> input slot j of the node), and,
// while an op observer is installed, records the current module path in the node.
void set_history(const Tensors& outputs, const std::shared_ptr<Node>& node);

// Tensor math the engine needs, installed by the ops layer (which sits above autograd) when the
// library initialises: adding gradients and materialising a dense copy.
struct GradMath {
  Tensor (*add)(const Tensor& a, const Tensor& b) = nullptr;
  // A copy without history, dense in `like`'s layout (contiguous, or channels-last for a
  // channels-last leaf: PyTorch's gradient layout contract).
  Tensor (*dense_copy)(const Tensor& a, const Tensor& like) = nullptr;
  Tensor (*copy)(const Tensor& a) = nullptr;        // clone() recorded when grad mode is on
  void (*add_inplace)(const Tensor& dst, const Tensor& src) = nullptr;
  bool (*refresh_view)(const Tensor& view) = nullptr;  // ops/inplace_view.h's refresh_view_history
};
GradMath& grad_math();

}  // namespace mg::autograd
