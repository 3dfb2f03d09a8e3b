// NcclComm (cuda/nccl_comm.h) in a build without NCCL (no CUDA backend, or CUDA without NCCL):
// nothing can be made, and every entry point throws DeviceError saying why and what to do.
#include "mixgrad/core/error.h"
#include "mixgrad/cuda/nccl_comm.h"

namespace mg::cuda {
namespace {

std::string reason() {
  return built_with_cuda()
             ? "mixgrad was built without NCCL (cmake found none: 'mixgrad: CUDA backend: ... no NCCL')"
             : "mixgrad was built without the CUDA backend, so without NCCL";
}

[[noreturn]] void unavailable(const char* what) {
  MG_THROW(DeviceError, what, ": NCCL is not available: ", reason(),
           "\n  hint: use the gloo backend (CPU tensors), or rebuild with the CUDA Toolkit's NCCL "
           "(-DNCCL_ROOT=<NCCL folder>)");
}

}  // namespace

struct NcclComm::Impl {};

bool nccl_built() { return false; }
std::string nccl_unavailable_reason() { return reason(); }
int nccl_version() { return 0; }
NcclUniqueId nccl_unique_id() { unavailable("nccl_unique_id"); }
NcclComm::NcclComm(const NcclUniqueId&, int, int, int) { unavailable("NcclComm"); }
NcclComm::~NcclComm() = default;
NcclState NcclComm::poll() { unavailable("NcclComm::poll"); }
void NcclComm::all_reduce(const void*, void*, std::size_t, DType, NcclRedOp, const Stream&) {
  unavailable("NcclComm::all_reduce");
}
void NcclComm::broadcast(const void*, void*, std::size_t, DType, int, const Stream&) {
  unavailable("NcclComm::broadcast");
}
void NcclComm::all_gather(const void*, void*, std::size_t, DType, const Stream&) {
  unavailable("NcclComm::all_gather");
}
void NcclComm::reduce_scatter(const void*, void*, std::size_t, DType, NcclRedOp, const Stream&) {
  unavailable("NcclComm::reduce_scatter");
}
void NcclComm::finalize() {}
void NcclComm::destroy() {}
void NcclComm::abort() {}
bool NcclComm::closed() const { return true; }

}  // namespace mg::cuda
