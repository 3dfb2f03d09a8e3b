#include "mixgrad/core/op_observer.h"

namespace mg {
namespace {

// The thread's module path and the module that opened it (for re-entry detection), and the
// mute depth.
struct ObserverThreadState {
  std::shared_ptr<const std::string> path;
  const void* module = nullptr;
  int muted = 0;
};

ObserverThreadState& thread_state() {
  thread_local ObserverThreadState state;
  return state;
}

}  // namespace

const std::string& OpEvent::path() const {
  static const std::string empty;
  return module_path ? *module_path : empty;
}

OpObserver set_op_observer(OpObserver observer) {
  return detail::g_op_observer.exchange(observer, std::memory_order_acq_rel);
}

OpObserver active_op_observer() {
  OpObserver obs = op_observer();
  if (!obs) return nullptr;
  return thread_state().muted > 0 ? nullptr : obs;
}

const std::shared_ptr<const std::string>& current_module_path() { return thread_state().path; }

void ModulePathScope::enter(const void* module, std::string_view name) {
  ObserverThreadState& st = thread_state();
  if (module != nullptr && st.module == module) return;  // re-entry of the innermost module
  active_ = true;
  saved_path_ = st.path;
  saved_module_ = st.module;
  st.module = module;
  if (name.empty()) return;
  if (!st.path || st.path->empty()) {
    st.path = std::make_shared<const std::string>(name);
  } else {
    std::string p;
    p.reserve(st.path->size() + 1 + name.size());
    p.append(*st.path).append(1, '.').append(name);
    st.path = std::make_shared<const std::string>(std::move(p));
  }
}

void ModulePathScope::replace(std::shared_ptr<const std::string> path) {
  ObserverThreadState& st = thread_state();
  active_ = true;
  saved_path_ = std::move(st.path);
  saved_module_ = st.module;
  st.path = std::move(path);
  st.module = nullptr;
}

void ModulePathScope::restore() {
  ObserverThreadState& st = thread_state();
  st.path = std::move(saved_path_);
  st.module = saved_module_;
}

void OpObserverMute::mute(int delta) {
  thread_state().muted += delta;
  active_ = delta > 0;
}

}  // namespace mg
