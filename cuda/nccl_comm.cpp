// NcclComm over NCCL (see nccl_comm.h); built only when cmake found NCCL (cmake/cuda.cmake).
// Decision: every NCCL call is made under the communicator's mutex with the device set, and its
// status checked: ncclInProgress is not an error on a non-blocking communicator (poll() says when
// the work left the queue); anything else throws CudaError with the call, ncclGetErrorString and
// NCCL's last error text.
#include "mixgrad/cuda/nccl_comm.h"

#include <cstring>
#include <mutex>

#include <nccl.h>

#include "mixgrad/core/error.h"
#include "mixgrad/cuda/check.h"

namespace mg::cuda {

// The host-side mapping (cuda/host/nccl_types.h) must match this NCCL's enums.
static_assert(kNcclInt8 == ncclInt8 && kNcclUint8 == ncclUint8 && kNcclInt32 == ncclInt32 &&
              kNcclInt64 == ncclInt64 && kNcclFloat16 == ncclFloat16 && kNcclFloat32 == ncclFloat32 &&
              kNcclFloat64 == ncclFloat64 && kNcclBfloat16 == ncclBfloat16);
static_assert(kNcclSum == ncclSum && kNcclMax == ncclMax && kNcclMin == ncclMin && kNcclAvg == ncclAvg);
static_assert(sizeof(NcclUniqueId::bytes) == sizeof(ncclUniqueId));

namespace {

[[noreturn]] void throw_nccl(ncclResult_t status, const char* call, ncclComm_t comm, int device) {
  const char* last = ncclGetLastError(comm);
  MG_THROW(CudaError, "NCCL error: ", call, " returned ", ncclGetErrorString(status), " (", int(status),
           ") on cuda:", device, last && *last ? str_cat(": ", last) : std::string(),
           status == ncclRemoteError || status == ncclSystemError
               ? "\n  hint: a peer process probably died or its network connection failed"
               : "");
}

// A call on a non-blocking communicator: success or "in progress" are fine.
void check_nccl(ncclResult_t status, const char* call, ncclComm_t comm, int device) {
  if (status != ncclSuccess && status != ncclInProgress) throw_nccl(status, call, comm, device);
}

#define MG_NCCL_CHECK(call) check_nccl((call), #call, impl_->comm, device_)

ncclDataType_t data_type(const char* what, DType dtype, bool reduction) {
  const int code = nccl_dtype_code(dtype, reduction);
  MG_CHECK(code >= 0, DTypeError, "NcclComm::", what, ": NCCL cannot ", reduction ? "reduce " : "move ",
           dtype_name(dtype), " tensors", reduction ? " (it reduces f64, f32, f16, bf16, i64 and i32)" : "");
  return ncclDataType_t(code);
}

ncclRedOp_t red_op(const char* what, NcclRedOp op, DType dtype) {
  const int code = nccl_op_code(op, dtype);
  MG_CHECK(code >= 0, DTypeError, "NcclComm::", what, ": ", nccl_red_op_name(op), " needs a floating dtype, got ",
           dtype_name(dtype));
  return ncclRedOp_t(code);
}

}  // namespace

struct NcclComm::Impl {
  std::mutex mu;
  ncclComm_t comm = nullptr;
  bool closed = false;
};

bool nccl_built() { return true; }

std::string nccl_unavailable_reason() {
  return is_available() ? std::string() : unavailable_reason();
}

int nccl_version() {
  int v = 0;
  if (ncclGetVersion(&v) != ncclSuccess) return 0;
  return v;
}

NcclUniqueId nccl_unique_id() {
  ncclUniqueId raw;
  const ncclResult_t status = ncclGetUniqueId(&raw);
  if (status != ncclSuccess) throw_nccl(status, "ncclGetUniqueId(&id)", nullptr, current_device());
  NcclUniqueId id;
  std::memcpy(id.bytes.data(), raw.internal, sizeof(raw.internal));
  return id;
}

NcclComm::NcclComm(const NcclUniqueId& id, int world_size, int rank, int device)
    : impl_(std::make_unique<Impl>()), rank_(rank), world_size_(world_size), device_(device) {
  check_device(Device::cuda(device));
  MG_CHECK(world_size >= 1 && rank >= 0 && rank < world_size, Error, "NcclComm: rank ", rank,
           " is not in [0, ", world_size, ")");
  DeviceGuard guard(device);
  ncclUniqueId raw;
  std::memcpy(raw.internal, id.bytes.data(), sizeof(raw.internal));
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;  // no call waits for a peer; poll() reports progress and errors
  MG_NCCL_CHECK(ncclCommInitRankConfig(&impl_->comm, world_size, raw, rank, &config));
}

NcclComm::~NcclComm() {
  if (impl_ && !impl_->closed && impl_->comm != nullptr) {
    DeviceGuard guard(device_);
    (void)ncclCommAbort(impl_->comm);
  }
}

NcclState NcclComm::poll() {
  std::lock_guard<std::mutex> lock(impl_->mu);
  MG_CHECK(!impl_->closed, CudaError, "NcclComm::poll: the communicator is closed");
  ncclResult_t state = ncclSuccess;
  MG_NCCL_CHECK(ncclCommGetAsyncError(impl_->comm, &state));
  if (state == ncclInProgress) return NcclState::InProgress;
  if (state != ncclSuccess) throw_nccl(state, "ncclCommGetAsyncError (an earlier operation failed)", impl_->comm, device_);
  return NcclState::Ready;
}

namespace {
cudaStream_t raw(const Stream& s) { return static_cast<cudaStream_t>(s.handle()); }
}  // namespace

#define MG_NCCL_ENQUEUE(what, stream, call)                                                          \
  do {                                                                                               \
    std::lock_guard<std::mutex> lock(impl_->mu);                                                     \
    MG_CHECK(!impl_->closed, CudaError, "NcclComm::" what ": the communicator is closed");           \
    MG_CHECK((stream).device() == device_, DeviceError, "NcclComm::" what ": the communicator is on cuda:", \
             device_, " but the stream is on cuda:", (stream).device());                             \
    DeviceGuard guard(device_);                                                                      \
    MG_NCCL_CHECK(call);                                                                             \
  } while (0)

void NcclComm::all_reduce(const void* send, void* recv, std::size_t count, DType dtype, NcclRedOp op,
                          const Stream& stream) {
  const ncclDataType_t t = data_type("all_reduce", dtype, true);
  const ncclRedOp_t o = red_op("all_reduce", op, dtype);
  MG_NCCL_ENQUEUE("all_reduce", stream, ncclAllReduce(send, recv, count, t, o, impl_->comm, raw(stream)));
}

void NcclComm::broadcast(const void* send, void* recv, std::size_t count, DType dtype, int root,
                         const Stream& stream) {
  const ncclDataType_t t = data_type("broadcast", dtype, false);
  MG_NCCL_ENQUEUE("broadcast", stream, ncclBroadcast(send, recv, count, t, root, impl_->comm, raw(stream)));
}

void NcclComm::all_gather(const void* send, void* recv, std::size_t count, DType dtype, const Stream& stream) {
  const ncclDataType_t t = data_type("all_gather", dtype, false);
  MG_NCCL_ENQUEUE("all_gather", stream, ncclAllGather(send, recv, count, t, impl_->comm, raw(stream)));
}

void NcclComm::reduce_scatter(const void* send, void* recv, std::size_t recv_count, DType dtype, NcclRedOp op,
                              const Stream& stream) {
  const ncclDataType_t t = data_type("reduce_scatter", dtype, true);
  const ncclRedOp_t o = red_op("reduce_scatter", op, dtype);
  MG_NCCL_ENQUEUE("reduce_scatter", stream,
                  ncclReduceScatter(send, recv, recv_count, t, o, impl_->comm, raw(stream)));
}

void NcclComm::finalize() {
  std::lock_guard<std::mutex> lock(impl_->mu);
  if (impl_->closed) return;
  DeviceGuard guard(device_);
  MG_NCCL_CHECK(ncclCommFinalize(impl_->comm));
}

void NcclComm::destroy() {
  std::lock_guard<std::mutex> lock(impl_->mu);
  if (impl_->closed) return;
  impl_->closed = true;
  DeviceGuard guard(device_);
  MG_NCCL_CHECK(ncclCommDestroy(impl_->comm));
}

void NcclComm::abort() {
  std::lock_guard<std::mutex> lock(impl_->mu);
  if (impl_->closed) return;
  impl_->closed = true;
  DeviceGuard guard(device_);
  (void)ncclCommAbort(impl_->comm);  // never blocks; its status does not change what we do next
}

bool NcclComm::closed() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->closed;
}

}  // namespace mg::cuda
