// The op observer: one process-wide hook that sees every op after it ran — forward ops from the
// dispatcher, backward nodes from the engine — with its inputs, outputs and the module path it
// ran under ("layer3.1.conv2"). Diagnostics (amp::OverflowTracer) install it; nothing does by
// default. The one decision: when no observer is installed every hook point costs one relaxed
// load of a global pointer and a predictable branch — no allocation, no thread-local access.
//
//   void count(const mg::OpEvent& e) { ... e.op, e.backward, *e.outputs, e.path() ... }
//   mg::set_op_observer(count);              // ... run a step ...
//   mg::set_op_observer(nullptr);
//
// Module paths are thread-local and built by nesting: nn modules open a ModulePathScope on entry
// (UnaryModule::operator(), or module_scope(*this) in a multi-input forward), which appends
// ".name" to the enclosing path. The engine runs each backward node under the path recorded when
// its forward ran (autograd::Node::module_path).
#pragma once
#include <atomic>
#include <memory>
#include <string>
#include <string_view>

#include "mixgrad/core/tensor.h"

namespace mg {

struct OpEvent {
  const char* op = "";                 // "conv2d", or "conv2d_backward" for a backward node
  bool backward = false;               // a backward node run by the engine
  bool inplace = false;                // add_/mul_/copy_/...: outputs[0] is the tensor written
  bool view = false;                   // a view op: outputs alias inputs[0]'s memory
  const Tensors* inputs = nullptr;     // forward: the op's inputs (after autocast); in place: the
                                       // operands, with the written tensor's old value when read;
                                       // backward: the incoming gradients (undefined = none)
  const Tensors* outputs = nullptr;    // forward: the results; backward: the gradients produced
                                       // for the node's inputs (undefined = none)
  std::shared_ptr<const std::string> module_path;  // null outside any module
  // The module path, or "" when the op ran outside any module.
  const std::string& path() const;
};

using OpObserver = void (*)(const OpEvent& event);

namespace detail {
inline std::atomic<OpObserver> g_op_observer{nullptr};
}

// Installs `observer` (nullptr uninstalls) and returns the previous one. Events are delivered on
// the thread that ran the op; an observer may throw (the exception leaves the op's caller).
OpObserver set_op_observer(OpObserver observer);

// The installed observer, or nullptr (the zero-cost check every hook point makes).
inline OpObserver op_observer() { return detail::g_op_observer.load(std::memory_order_relaxed); }

// The observer the dispatcher should notify on this thread: op_observer() unless an
// OpObserverMute is active (the engine mutes the ops that make up a backward node).
OpObserver active_op_observer();

// The calling thread's current module path (null outside any module or when no observer was
// installed when the enclosing modules were entered).
const std::shared_ptr<const std::string>& current_module_path();

// Sets the thread's module path for a scope and restores it, also when an exception unwinds.
// Does nothing when no observer is installed at construction.
class ModulePathScope {
 public:
  // Enters module `module` registered as `name`: the path becomes "<enclosing>.name" ("name" at
  // top level; unchanged for an empty name, e.g. the root). Re-entering the innermost module
  // (UnaryModule::operator() calling a forward that opens its own scope) changes nothing.
  ModulePathScope(const void* module, std::string_view name) {
    if (op_observer()) [[unlikely]] enter(module, name);
  }
  // Makes `path` current as is (the engine runs a backward node under its forward's path).
  explicit ModulePathScope(std::shared_ptr<const std::string> path) {
    if (op_observer()) [[unlikely]] replace(std::move(path));
  }
  ~ModulePathScope() {
    if (active_) [[unlikely]] restore();
  }
  ModulePathScope(const ModulePathScope&) = delete;
  ModulePathScope& operator=(const ModulePathScope&) = delete;

 private:
  void enter(const void* module, std::string_view name);
  void replace(std::shared_ptr<const std::string> path);
  void restore();

  bool active_ = false;
  std::shared_ptr<const std::string> saved_path_;
  const void* saved_module_ = nullptr;
};

// Stops the dispatcher from notifying the observer on this thread for a scope (nests). Used for
// the ops that implement a backward node (the node is reported once, as a whole) and for ops an
// observer runs itself. Does nothing when no observer is installed at construction.
class OpObserverMute {
 public:
  OpObserverMute() {
    if (op_observer()) [[unlikely]] mute(+1);
  }
  ~OpObserverMute() {
    if (active_) [[unlikely]] mute(-1);
  }
  OpObserverMute(const OpObserverMute&) = delete;
  OpObserverMute& operator=(const OpObserverMute&) = delete;

 private:
  void mute(int delta);
  bool active_ = false;
};

}  // namespace mg
