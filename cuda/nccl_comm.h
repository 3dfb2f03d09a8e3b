// NcclComm: a thin C++ API over one NCCL communicator (one rank of a group, one device): raw
// device pointers, mixgrad dtypes and mg::cuda streams in, checked NCCL calls inside. No NCCL or
// CUDA type appears here, so distributed/ (ProcessGroupNccl) builds on it in every build; in a
// build without NCCL every call throws DeviceError saying why (cuda/absent/nccl_absent.cpp).
// Decision: the communicator is non-blocking (ncclConfig_t.blocking = 0): no NCCL call ever
// waits for a peer. Creation and each enqueue may leave work "in progress"; poll() reports that,
// an asynchronous error (a peer died, a network failure) as CudaError, or ready. Timeouts and
// the watchdog are the caller's policy (ProcessGroupNccl); abort() stops a stuck communicator
// (its kernels waiting for a dead peer exit) and never blocks.
// The collectives are enqueued on `stream` and return at once; their results are valid for later
// work on that stream.
//
//   mg::cuda::NcclUniqueId id = mg::cuda::nccl_unique_id();  // rank 0, then sent to the others
//   mg::cuda::NcclComm comm(id, world_size, rank, /*device=*/0);
//   while (comm.poll() == mg::cuda::NcclState::InProgress) { /* check a deadline */ }
//   comm.all_reduce(x, x, n, mg::DType::F16, mg::cuda::NcclRedOp::Sum, mg::cuda::current_stream(0));
#pragma once
#include <array>
#include <cstddef>
#include <memory>
#include <string>

#include "mixgrad/core/dtype.h"
#include "mixgrad/cuda/cuda.h"
#include "mixgrad/cuda/host/nccl_types.h"

namespace mg::cuda {

// NCCL's 128-byte rendezvous token (ncclUniqueId), as plain bytes.
struct NcclUniqueId {
  std::array<char, 128> bytes{};
};

// True when libmixgrad was built with NCCL (whether or not a GPU is present).
bool nccl_built();
// Why a communicator cannot be made here ("" when it can): no NCCL in this build, or no usable
// CUDA device (cuda::unavailable_reason()).
std::string nccl_unavailable_reason();
// NCCL's version as a number (22809 for 2.28.9); 0 without NCCL.
int nccl_version();
// A fresh unique id (ncclGetUniqueId); rank 0 makes it and every rank passes it to NcclComm.
NcclUniqueId nccl_unique_id();

enum class NcclState { Ready, InProgress };

class NcclComm {
 public:
  // Starts joining the communicator of `world_size` ranks named by `id` as `rank`, on `device`
  // (ncclCommInitRankConfig, non-blocking): returns at once; poll() says when it is ready.
  NcclComm(const NcclUniqueId& id, int world_size, int rank, int device);
  // Aborts the communicator unless destroy() ran (never blocks).
  ~NcclComm();
  NcclComm(const NcclComm&) = delete;
  NcclComm& operator=(const NcclComm&) = delete;

  int rank() const { return rank_; }
  int world_size() const { return world_size_; }
  int device() const { return device_; }

  // ncclCommGetAsyncError: Ready, InProgress (creation, an enqueue or finalize still being
  // processed), or throws CudaError naming NCCL's error (the communicator is then unusable:
  // abort it). Thread-safe with the calls below (one lock per communicator).
  NcclState poll();

  // Enqueue on `stream` (a stream of device()); counts are elements of `dtype`. Throw
  // DTypeError for a dtype or op NCCL cannot take (cuda/host/nccl_types.h), CudaError for a
  // failed call. Wait for poll() to leave InProgress before the next call.
  void all_reduce(const void* send, void* recv, std::size_t count, DType dtype, NcclRedOp op,
                  const Stream& stream);
  void broadcast(const void* send, void* recv, std::size_t count, DType dtype, int root,
                 const Stream& stream);
  // recv holds world_size() * count elements, rank r's send at r * count.
  void all_gather(const void* send, void* recv, std::size_t count, DType dtype, const Stream& stream);
  // send holds world_size() * recv_count elements; block r's reduction lands in rank r's recv.
  void reduce_scatter(const void* send, void* recv, std::size_t recv_count, DType dtype, NcclRedOp op,
                      const Stream& stream);

  // Clean shutdown in two steps: finalize() flushes the queued work (ncclCommFinalize; poll()
  // until Ready), destroy() frees the communicator (ncclCommDestroy). abort() instead stops it
  // at once (ncclCommAbort), queued work included. Each is idempotent; after any of them the
  // collectives throw.
  void finalize();
  void destroy();
  void abort();
  bool closed() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  int rank_ = 0;
  int world_size_ = 0;
  int device_ = 0;
};

}  // namespace mg::cuda
