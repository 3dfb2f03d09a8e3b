// The engine's side of queue_callback (autograd/hooks.h): one BackwardCallbacks lives for each
// backward()/grad() call; while it lives, queue_callback on this thread appends to it, and the
// engine calls run() after the last node ran. Nested backward calls (a hook that runs backward)
// get their own list and restore the outer one.
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

namespace mg::autograd {

class BackwardCallbacks {
 public:
  BackwardCallbacks();
  ~BackwardCallbacks();
  BackwardCallbacks(const BackwardCallbacks&) = delete;
  BackwardCallbacks& operator=(const BackwardCallbacks&) = delete;
  // Runs the queued callbacks in order, including those they queue (nothing for a pass that
  // joined the running one: that one runs them).
  void run();

 private:
  std::vector<std::function<void()>> callbacks_;
  std::vector<std::function<void()>>* previous_;
  std::vector<std::function<void()>> cleanups_;  // at_pass_end, run by the destructor
  std::vector<std::function<void()>>* previous_cleanups_;
  uint64_t previous_id_;
  bool joined_ = false;
  bool join_before_ = false;  // JoinRunningPass's flag, cleared for this pass's lifetime
};

// The id of the backward pass running on this thread (unique in the process; a pass that joined
// the running one has that one's id), or 0 outside any pass.
uint64_t current_pass_id();
// Runs `cleanup` when the pass running on this thread ends, after its queued callbacks, also when
// it ends by an exception (a checkpoint frees what it recomputed for the pass). It must not throw.
// Outside a pass it is an AutogradError.
void at_pass_end(std::function<void()> cleanup);

// While one lives on this thread, the next backward pass started here is part of the pass already
// running (passes nested deeper, e.g. a hook's own autograd::grad, are their own again) (the nested backward of a checkpointed function's recomputation, ops/checkpoint.cpp):
// the callbacks it queues go to the running pass and run when that one ends, so
// DistributedDataParallel's end-of-backward reduction waits for the whole backward even when its
// first gradient arrives inside a checkpoint.
class JoinRunningPass {
 public:
  JoinRunningPass();
  ~JoinRunningPass();
  JoinRunningPass(const JoinRunningPass&) = delete;
  JoinRunningPass& operator=(const JoinRunningPass&) = delete;

 private:
  bool previous_;
};

}  // namespace mg::autograd
