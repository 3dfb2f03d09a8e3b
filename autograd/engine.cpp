// The backward engine (single-threaded). Phases: find the graph reachable from the roots (for
// grad(), only nodes that lead to a requested input; a node whose gradient is captured runs only
// when it also leads to another one), count each node's pending gradients, then
// run nodes from a ready queue ordered by creation (latest first; leaves' sinks as soon as they are
// ready), accumulating gradients per
// node input slot. While an op observer is installed (core/op_observer.h) each node is reported
// once after it ran (backward = true, under the module path of its forward), the ops inside it
// are muted, and so is the summing of two gradient contributions, which is reported as
// "grad_sum".
#include "mixgrad/autograd/engine.h"

#include <map>
#include <queue>
#include <unordered_map>
#include <unordered_set>

#include "mixgrad/autograd/backward_callbacks.h"
#include "mixgrad/autograd/grad_mode.h"
#include "mixgrad/core/autocast_state.h"
#include "mixgrad/autograd/node.h"
#include "mixgrad/core/factory.h"
#include "mixgrad/core/op_observer.h"

namespace mg {
// Registers every rule and kernel once, GradMath included (ops/init.cpp; the library is one unit,
// as core/storage.cpp calls it too). Called by backward and grad: a pass whose roots are leaves
// (backward({w, w}, {g1, g2}) first thing in a program) adds gradients before any op ran.
void init();
}  // namespace mg

namespace mg::autograd {
namespace {

struct Capture {
  Node* node;
  uint32_t slot;
};

// node->apply() reported to the observer: incoming gradients in, produced gradients out. Ops the
// node records (create_graph) inherit its module path.
Tensors apply_observed(Node& node, Tensors&& grads) {
  const Tensors incoming = grads;  // handles: the node consumes `grads`
  Tensors produced;
  {
    ModulePathScope scope(node.module_path);
    // The node is reported once, below; its ops are not (backward() muted them only when an
    // observer was already installed as it started: one installed meanwhile, by another thread or
    // a hook, saw them as forward ops).
    OpObserverMute mute;
    produced = node.apply(std::move(grads));
  }
  if (const OpObserver obs = op_observer()) {
    const std::string name = node.name();
    OpEvent event;
    event.op = name.c_str();
    event.backward = true;
    event.inputs = &incoming;
    event.outputs = &produced;
    event.module_path = node.module_path;
    obs(event);
  }
  return produced;
}

// Ready leaves' sinks (AccumulateGrad) first, then later nodes first. A sink runs as soon as its
// gradient is complete (as PyTorch, whose AccumulateGrad has the highest sequence number), so
// post-accumulate hooks (autograd/hooks.h) fire while the rest of backward is still to run:
// DistributedDataParallel's buckets start early instead of all at the end.
bool is_sink(const Node* n) { return dynamic_cast<const AccumulateGrad*>(n) != nullptr; }
struct LaterFirst {
  bool operator()(const Node* a, const Node* b) const {
    const bool sa = is_sink(a), sb = is_sink(b);
    if (sa != sb) return sb;
    return a->sequence_nr() < b->sequence_nr();
  }
};

class GraphTask {
 public:
  // `grad_mode`: recording on or off (create_graph) for every node, restored before each one so a
  // hook that changes it affects its own node only, as in PyTorch.
  GraphTask(bool retain_graph, bool accumulate, bool grad_mode)
      : retain_graph_(retain_graph), accumulate_(accumulate), grad_mode_(grad_mode) {}

  void add_root(const Edge& edge, const Tensor& grad) {
    roots_.push_back(edge.node.get());
    add_grad(edge.node.get(), edge.input_nr, grad);
  }

  // grad(): remember which (node, slot) feeds each requested input.
  void add_capture(const Edge& edge) { captures_.push_back({edge.node.get(), edge.input_nr}); }

  Tensors run() {
    select_nodes();
    std::priority_queue<Node*, std::vector<Node*>, LaterFirst> ready;
    std::unordered_set<Node*> queued;
    for (Node* r : roots_) {
      if (needed_.count(r) && dependencies_[r] == 0 && queued.insert(r).second) ready.push(r);
    }
    Tensors captured(captures_.size());
    while (!ready.empty()) {
      Node* node = ready.top();
      ready.pop();
      GradMode::set_enabled(grad_mode_);
      Tensors grads = std::move(buffers_[node]);
      buffers_.erase(node);
      grads.resize(node->num_outputs());
      for (uint32_t slot = 0; slot < grads.size(); ++slot) {
        grads[slot] = node->run_pre_hooks(slot, std::move(grads[slot]));
      }
      for (std::size_t c = 0; c < captures_.size(); ++c) {
        if (captures_[c].node == node) captured[c] = grads[captures_[c].slot];
      }
      // grad(): a captured node that leads to no other capture has done its part; running it
      // would compute gradients nobody asked for and free what a later backward needs.
      if (!runs_.count(node)) continue;
      const bool is_sink = dynamic_cast<AccumulateGrad*>(node) != nullptr;
      // AccumulateGrad (a leaf's sink) is not reported: its input is a gradient already reported
      // as the output of the node that produced it.
      Tensors input_grads;
      if (is_sink) {
        OpObserverMute mute;  // not reported, nor its ops (see apply_observed)
        input_grads = node->apply(std::move(grads));  // AccumulateGrad locks for itself
      } else {
        // One pass at a time through a node shared by several threads' graphs (Node::apply_mutex).
        std::lock_guard<std::recursive_mutex> lock(node->apply_mutex());
        input_grads = op_observer() ? apply_observed(*node, std::move(grads)) : node->apply(std::move(grads));
        if (!retain_graph_) node->release_saved();
      }
      for (std::size_t j = 0; j < node->next_edges.size(); ++j) {
        const Edge& e = node->next_edges[j];
        Node* next = e.node.get();
        if (!next || !needed_.count(next)) continue;
        if (j < input_grads.size() && input_grads[j].defined()) add_grad(next, e.input_nr, input_grads[j]);
        if (--dependencies_[next] == 0 && queued.insert(next).second) ready.push(next);
      }
    }
    GradMode::set_enabled(grad_mode_);  // for the queued callbacks, whatever the last hook did
    return captured;
  }

 private:
  void add_grad(Node* node, uint32_t slot, const Tensor& g) {
    Tensors& buf = buffers_[node];
    if (buf.size() < node->num_outputs()) buf.resize(node->num_outputs());
    if (!buf[slot].defined()) {
      buf[slot] = g;
      return;
    }
    Tensor sum = grad_math().add(buf[slot], g);
    if (const OpObserver obs = op_observer()) [[unlikely]] {
      const Tensors parts{buf[slot], g}, result{sum};
      OpEvent event;
      event.op = "grad_sum";  // two gradient contributions to one tensor (used twice forward)
      event.backward = true;
      event.inputs = &parts;
      event.outputs = &result;
      event.module_path = node->module_path;
      obs(event);
    }
    buf[slot] = std::move(sum);
  }

  // Marks the nodes to run and counts, for each, the edges that will deliver to it.
  void select_nodes() {
    // Post-order DFS (iterative) from the roots.
    std::vector<Node*> order;
    std::unordered_set<Node*> seen;
    for (Node* root : roots_) {
      if (!seen.insert(root).second) continue;
      std::vector<std::pair<Node*, std::size_t>> stack{{root, 0}};
      while (!stack.empty()) {
        auto& [n, i] = stack.back();
        if (i < n->next_edges.size()) {
          Node* child = n->next_edges[i++].node.get();
          if (child && seen.insert(child).second) stack.push_back({child, 0});
        } else {
          order.push_back(n);
          stack.pop_back();
        }
      }
    }
    // A node is needed when it reaches a capture (grad()) or always (backward()).
    std::unordered_set<Node*> capture_nodes;
    for (const Capture& c : captures_) capture_nodes.insert(c.node);
    for (Node* n : order) {  // children before parents
      bool feeds = false;  // a child needs this node's output
      for (const Edge& e : n->next_edges) feeds = feeds || (e.node && needed_.count(e.node.get()));
      if (accumulate_ || feeds || capture_nodes.count(n)) needed_.insert(n);
      if (accumulate_ || feeds) runs_.insert(n);
    }
    for (Node* n : order) {
      if (!needed_.count(n)) continue;
      for (const Edge& e : n->next_edges) {
        if (e.node && needed_.count(e.node.get())) ++dependencies_[e.node.get()];
      }
    }
  }

  bool retain_graph_;
  bool accumulate_;
  bool grad_mode_;
  std::vector<Node*> roots_;
  std::vector<Capture> captures_;
  std::unordered_set<Node*> needed_;  // receives gradients
  std::unordered_set<Node*> runs_;    // is applied (needed, and not only a capture of grad())
  std::unordered_map<Node*, int> dependencies_;
  std::unordered_map<Node*, Tensors> buffers_;
};

// Validates outputs and their gradients and adds them as roots.
void add_roots(GraphTask& task, const Tensors& outputs, const Tensors& grad_outputs, const char* api) {
  MG_CHECK(!outputs.empty(), AutogradError, api, ": expected at least one output");
  MG_CHECK(grad_outputs.empty() || grad_outputs.size() == outputs.size(), AutogradError, api,
           ": got ", grad_outputs.size(), " gradients for ", outputs.size(), " outputs");
  for (std::size_t i = 0; i < outputs.size(); ++i) {
    const Tensor& out = outputs[i];
    MG_CHECK(out.defined(), AutogradError, api, ": output ", i, " is undefined");
    MG_CHECK(make_view_current(out), AutogradError, api, ": output ", i, " (", describe(out),
             ") is a view whose base was modified in place after the view was taken",
             "\n  hint: take the view again after the in-place operation");
    const Edge edge = gradient_edge(out);
    MG_CHECK(edge.valid(), AutogradError, api, ": output ", i, " (", describe(out),
             ") does not require grad and has no grad_fn",
             "\n  hint: call requires_grad_() on the inputs before computing it, and check that no "
             "NoGradGuard is active");
    Tensor g = grad_outputs.empty() ? Tensor() : grad_outputs[i];
    if (!g.defined()) {
      MG_CHECK(out.numel() == 1, AutogradError, api,
               ": a gradient can be created implicitly only for one-element outputs; output ", i,
               " is ", describe(out), "\n  hint: pass a gradient of the same shape");
      g = ones_like(out);
    } else {
      MG_CHECK(g.shape() == out.shape() && g.dtype() == out.dtype() && g.device() == out.device(),
               AutogradError, api, ": gradient ", describe(g), " does not match output ", i, " ",
               describe(out));
    }
    task.add_root(edge, g);
  }
}

// The kind of the pass running on this thread (pass_accumulates_grad), set for a pass's lifetime.
thread_local bool t_accumulates = true;
class PassKind {
 public:
  explicit PassKind(bool accumulates) : previous_(t_accumulates) { t_accumulates = accumulates; }
  ~PassKind() { t_accumulates = previous_; }
  PassKind(const PassKind&) = delete;
  PassKind& operator=(const PassKind&) = delete;

 private:
  bool previous_;
};

}  // namespace

bool pass_accumulates_grad() { return t_accumulates; }

void backward(const Tensors& outputs, const Tensors& grad_outputs, bool retain_graph, bool create_graph) {
  init();
  OpObserverMute mute;  // the observer sees nodes, not the ops inside them
  PassKind kind(/*accumulates=*/true);
  GraphTask task(retain_graph || create_graph, /*accumulate=*/true, /*grad_mode=*/create_graph);
  // Before the roots: two gradients of one output are summed with a history exactly when
  // create_graph asks for one, whatever the caller's grad mode.
  EnableGradGuard mode(create_graph);
  add_roots(task, outputs, grad_outputs, "backward");
  AutocastOffGuard no_autocast;  // backward ops run in the dtypes the forward chose
  BackwardCallbacks callbacks;   // queue_callback (autograd/hooks.h) during this pass
  task.run();
  callbacks.run();
}

Tensors grad(const Tensors& outputs, const Tensors& inputs, const Tensors& grad_outputs,
             std::optional<bool> retain_graph, bool create_graph, bool allow_unused) {
  init();
  OpObserverMute mute;  // the observer sees nodes, not the ops inside them
  PassKind kind(/*accumulates=*/false);
  GraphTask task(retain_graph.value_or(create_graph), /*accumulate=*/false, /*grad_mode=*/create_graph);
  EnableGradGuard mode(create_graph);  // before the roots, as in backward
  add_roots(task, outputs, grad_outputs, "grad");
  MG_CHECK(!inputs.empty(), AutogradError, "grad: expected at least one input");
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    MG_CHECK(make_view_current(inputs[i]), AutogradError, "grad: input ", i, " (", describe(inputs[i]),
             ") is a view whose base was modified in place after the view was taken",
             "\n  hint: take the view again after the in-place operation");
    const Edge edge = gradient_edge(inputs[i]);
    MG_CHECK(edge.valid(), AutogradError, "grad: input ", i, " (", describe(inputs[i]),
             ") does not require grad");
    task.add_capture(edge);
  }
  AutocastOffGuard no_autocast;  // backward ops run in the dtypes the forward chose
  BackwardCallbacks callbacks;   // queue_callback (autograd/hooks.h) during this pass
  Tensors result = task.run();
  callbacks.run();
  for (std::size_t i = 0; i < result.size(); ++i) {
    MG_CHECK(result[i].defined() || allow_unused, AutogradError, "grad: input ", i, " (",
             describe(inputs[i]), ") was not used to compute the outputs",
             "\n  hint: pass allow_unused=true if this is expected");
  }
  return result;
}

}  // namespace mg::autograd
