// The engine's side of queue_callback (autograd/hooks.h): one BackwardCallbacks lives for each
// backward()/grad() call; while it lives, queue_callback on this thread appends to it, and the
// engine calls run() after the last node ran. Nested backward calls (a hook that runs backward)
// get their own list and restore the outer one.
#pragma once
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
  bool joined_ = false;
  bool join_before_ = false;  // JoinRunningPass's flag, cleared for this pass's lifetime
};

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
