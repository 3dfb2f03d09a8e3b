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
  // Runs the queued callbacks in order, including those they queue.
  void run();

 private:
  std::vector<std::function<void()>> callbacks_;
  std::vector<std::function<void()>>* previous_;
};

}  // namespace mg::autograd
