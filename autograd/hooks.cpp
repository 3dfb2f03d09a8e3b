// Post-accumulate hooks live in the leaf's AccumulateGrad node; queued callbacks in the graph
// task of the running backward (engine.cpp runs them, through the list this file keeps per thread).
#include "mixgrad/autograd/hooks.h"

#include <atomic>
#include <memory>
#include <vector>

#include "mixgrad/autograd/backward_callbacks.h"

namespace mg::autograd {
namespace {

thread_local std::vector<std::function<void()>>* t_callbacks = nullptr;
thread_local std::vector<std::function<void()>>* t_cleanups = nullptr;
thread_local uint64_t t_pass_id = 0;
thread_local bool t_join_running_pass = false;  // JoinRunningPass
std::atomic<uint64_t> g_next_pass_id{1};

AccumulateGrad& accumulator_of(const Tensor& leaf, const char* api) {
  MG_CHECK(leaf.defined() && leaf.requires_grad() && leaf.is_leaf(), AutogradError, api,
           ": expected a leaf tensor that requires grad, got ",
           leaf.defined() ? describe(leaf) + (leaf.is_leaf() ? "" : " (not a leaf)") : std::string("undefined"));
  const Edge edge = gradient_edge(leaf);
  auto* acc = dynamic_cast<AccumulateGrad*>(edge.node.get());
  MG_ASSERT(acc != nullptr, api, ": the leaf's gradient edge is not an AccumulateGrad");
  return *acc;
}

}  // namespace

uint64_t register_post_accumulate_grad_hook(const Tensor& leaf, PostAccumulateHook hook) {
  return accumulator_of(leaf, "register_post_accumulate_grad_hook").add_post_hook(std::move(hook));
}

bool remove_post_accumulate_grad_hook(const Tensor& leaf, uint64_t id) {
  // Works whatever the tensor became since the hook was registered (frozen with
  // requires_grad_(false), moved into a graph): a removal must never fail, as PyTorch's handle's
  // (DistributedDataParallel removes its hooks in its destructor).
  if (!leaf.defined()) return false;
  auto* acc = dynamic_cast<AccumulateGrad*>(leaf.impl()->autograd.grad_accumulator.get());
  return acc != nullptr && acc->remove_post_hook(id);
}

void queue_callback(std::function<void()> callback) {
  MG_CHECK(t_callbacks != nullptr, AutogradError,
           "queue_callback: no backward pass is running on this thread",
           "\n  hint: queue callbacks from a hook that runs during backward()");
  t_callbacks->push_back(std::move(callback));
}

bool in_backward() { return t_callbacks != nullptr; }

uint64_t current_pass_id() { return t_pass_id; }

void at_pass_end(std::function<void()> cleanup) {
  MG_CHECK(t_cleanups != nullptr, AutogradError, "at_pass_end: no backward pass is running on this thread");
  t_cleanups->push_back(std::move(cleanup));
}

BackwardCallbacks::BackwardCallbacks()
    : previous_(t_callbacks), previous_cleanups_(t_cleanups), previous_id_(t_pass_id),
      join_before_(t_join_running_pass) {
  joined_ = t_join_running_pass && t_callbacks != nullptr;
  if (!joined_) {
    t_callbacks = &callbacks_;
    t_cleanups = &cleanups_;
    t_pass_id = g_next_pass_id.fetch_add(1, std::memory_order_relaxed);
  }
  t_join_running_pass = false;  // consumed: passes started inside this one are their own
}

BackwardCallbacks::~BackwardCallbacks() {
  t_callbacks = previous_;
  t_cleanups = previous_cleanups_;
  t_pass_id = previous_id_;
  t_join_running_pass = join_before_;
  for (auto& cleanup : cleanups_) {
    try {
      cleanup();
    } catch (...) {  // a destructor, maybe during unwinding: a cleanup must not throw
    }
  }
}

JoinRunningPass::JoinRunningPass() : previous_(t_join_running_pass) { t_join_running_pass = true; }

JoinRunningPass::~JoinRunningPass() { t_join_running_pass = previous_; }

void BackwardCallbacks::run() {
  if (joined_) return;  // the running pass runs them
  // Index loop: a callback may queue more (they run in this same loop).
  for (std::size_t i = 0; i < callbacks_.size(); ++i) {
    std::function<void()> cb = std::move(callbacks_[i]);
    cb();
  }
  callbacks_.clear();
}

}  // namespace mg::autograd
