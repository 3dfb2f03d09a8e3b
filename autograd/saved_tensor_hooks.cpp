#include "mixgrad/autograd/saved_tensor_hooks.h"

#include "mixgrad/autograd/grad_mode.h"

namespace mg::autograd {
namespace {

std::shared_ptr<const SavedTensorHookPair>& current() {
  thread_local std::shared_ptr<const SavedTensorHookPair> hooks;
  return hooks;
}

// What SaveOnCpu keeps for one tensor: its CPU copy and where it came from.
struct CpuCopy {
  Tensor host;
  Device device;
};

}  // namespace

SavedTensorHooks::SavedTensorHooks(PackHook pack, UnpackHook unpack) : previous_(current()) {
  MG_CHECK(pack && unpack, Error, "SavedTensorHooks: both a pack and an unpack function are needed");
  current() = std::make_shared<const SavedTensorHookPair>(SavedTensorHookPair{std::move(pack), std::move(unpack)});
}

SavedTensorHooks::~SavedTensorHooks() { current() = std::move(previous_); }

const std::shared_ptr<const SavedTensorHookPair>& current_saved_tensor_hooks() { return current(); }

NoSavedTensorHooks::NoSavedTensorHooks() : previous_(std::move(current())) { current() = nullptr; }
NoSavedTensorHooks::~NoSavedTensorHooks() { current() = std::move(previous_); }

SaveOnCpu::SaveOnCpu(bool pin_memory)
    : hooks_(
          [pin_memory](const Tensor& t) -> std::any {
            if (t.device().is_cpu()) return CpuCopy{t, t.device()};
            // to(cpu, true) lands in page-locked memory without waiting; the copy back is
            // ordered after it on the same stream.
            return CpuCopy{t.to(Device::cpu(), pin_memory), t.device()};
          },
          [pin_memory](const std::any& packed) {
            const auto& c = std::any_cast<const CpuCopy&>(packed);
            return c.device.is_cpu() ? c.host : c.host.to(c.device, pin_memory);
          }) {}

}  // namespace mg::autograd
