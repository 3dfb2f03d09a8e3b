// Grad mode: whether ops record the graph on this thread. NoGradGuard turns recording off for a
// scope (inference, optimizer updates); EnableGradGuard turns it back on inside one.
//
//   { mg::NoGradGuard no_grad;  w.sub_(lr * g); }
#pragma once

namespace mg {

class GradMode {
 public:
  static bool is_enabled();
  static void set_enabled(bool enabled);
};

class NoGradGuard {
 public:
  NoGradGuard() : prev_(GradMode::is_enabled()) { GradMode::set_enabled(false); }
  ~NoGradGuard() { GradMode::set_enabled(prev_); }
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool prev_;
};

class EnableGradGuard {
 public:
  explicit EnableGradGuard(bool enabled = true) : prev_(GradMode::is_enabled()) {
    GradMode::set_enabled(enabled);
  }
  ~EnableGradGuard() { GradMode::set_enabled(prev_); }
  EnableGradGuard(const EnableGradGuard&) = delete;
  EnableGradGuard& operator=(const EnableGradGuard&) = delete;

 private:
  bool prev_;
};

}  // namespace mg
