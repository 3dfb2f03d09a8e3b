// CPU allocator (64-byte aligned), the allocator registry and byte copies between devices.
#include "core/storage.h"

#include <cstdlib>
#include <cstring>

#include "core/error.h"

namespace mg {
namespace {

class CpuAllocator final : public Allocator {
 public:
  void* allocate(std::size_t nbytes) override {
    // aligned_alloc needs a size that is a multiple of the alignment.
    const std::size_t rounded = ((nbytes + 63) / 64) * 64;
    void* p = std::aligned_alloc(64, rounded == 0 ? 64 : rounded);
    MG_CHECK(p != nullptr, Error, "cpu allocator: out of memory allocating ", nbytes, " bytes");
    return p;
  }
  void deallocate(void* ptr) override { std::free(ptr); }
};

CpuAllocator g_cpu_allocator;
Allocator* g_allocators[2] = {&g_cpu_allocator, nullptr};

void cpu_copy_bytes(void* dst, Device, const void* src, Device, std::size_t nbytes) {
  if (nbytes) std::memcpy(dst, src, nbytes);
}
CopyBytesFn g_copy_fns[2] = {&cpu_copy_bytes, nullptr};

}  // namespace

Allocator& allocator_for(DeviceType type) {
  Allocator* a = g_allocators[int(type)];
  MG_CHECK(a != nullptr, DeviceError, "allocator: no allocator for device ",
           Device{type, 0}.str(), "; this build of mixgrad has no CUDA support",
           "\n  hint: configure with -DMG_WITH_CUDA=ON on a machine with nvcc");
  return *a;
}

Allocator* find_allocator(DeviceType type) { return g_allocators[int(type)]; }

void set_allocator(DeviceType type, Allocator* allocator) { g_allocators[int(type)] = allocator; }

void set_copy_bytes_fn(DeviceType type, CopyBytesFn fn) { g_copy_fns[int(type)] = fn; }

void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device,
                std::size_t nbytes) {
  // Any copy touching a CUDA device goes through the CUDA backend's function.
  const DeviceType t = dst_device.is_cuda() || src_device.is_cuda() ? DeviceType::CUDA : DeviceType::CPU;
  CopyBytesFn fn = g_copy_fns[int(t)];
  MG_CHECK(fn != nullptr, DeviceError, "copy: cannot copy from ", src_device.str(), " to ",
           dst_device.str(), "; this build of mixgrad has no CUDA support");
  fn(dst, dst_device, src, src_device, nbytes);
}

Storage::Storage(std::size_t nbytes, Device device)
    : nbytes_(nbytes), device_(device), allocator_(&allocator_for(device.type)) {
  data_ = allocator_->allocate(nbytes);
}

Storage::Storage(void* data, std::size_t nbytes, Device device, std::function<void(void*)> deleter)
    : data_(data), nbytes_(nbytes), device_(device), deleter_(std::move(deleter)) {}

Storage::~Storage() {
  if (allocator_) {
    allocator_->deallocate(data_);
  } else if (deleter_) {
    deleter_(data_);
  }
}

}  // namespace mg
