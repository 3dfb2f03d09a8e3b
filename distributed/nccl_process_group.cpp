// ProcessGroupNccl over cuda::NcclComm (see nccl_process_group.h).
// Decision: one mutex (Impl::mu) orders everything: the caller's enqueues, the watchdog's polls
// and the abort; it is taken before the communicator's own lock, never after. NCCL never blocks
// here (a non-blocking communicator), so neither lock is ever held while waiting for a peer.
#include "mixgrad/distributed/nccl_process_group.h"

#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

#include "mixgrad/autograd/grad_mode.h"
#include "mixgrad/core/factory.h"
#include "mixgrad/cuda/cuda.h"
#include "mixgrad/cuda/nccl_comm.h"
#include "mixgrad/distributed/error.h"

namespace mg::distributed {
namespace {

using Clock = std::chrono::steady_clock;

std::string prefix(int world_size) { return "mg/pg/nccl/" + std::to_string(world_size) + "/"; }

}  // namespace

cuda::NcclRedOp nccl_red_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return cuda::NcclRedOp::Sum;
    case ReduceOp::Avg: return cuda::NcclRedOp::Avg;
    case ReduceOp::Max: return cuda::NcclRedOp::Max;
    case ReduceOp::Min: return cuda::NcclRedOp::Min;
  }
  return cuda::NcclRedOp::Sum;
}

cuda::NcclUniqueId exchange_nccl_unique_id(TcpStore& store, int rank, int world_size,
                                           const std::function<cuda::NcclUniqueId()>& make,
                                           const std::string& prefix_arg) {
  const std::string base = prefix_arg.empty() ? prefix(world_size) : prefix_arg;
  // Every rank adds 1: group g's ranks draw the values g*W+1 .. g*W+W, in any order.
  const int64_t ticket = store.add(base + "groups", 1);
  const std::string key = base + std::to_string((ticket - 1) / world_size) + "/id";
  cuda::NcclUniqueId id;
  if (rank == 0) {
    id = make();
    store.set(key, std::vector<char>(id.bytes.begin(), id.bytes.end()));
    return id;
  }
  const std::vector<char> bytes = store.get(key);
  MG_CHECK(bytes.size() == id.bytes.size(), distributed::DistributedError, "ProcessGroupNccl: rank ", rank,
           " read a unique id of ", bytes.size(), " bytes under '", key, "', expected ", id.bytes.size(),
           "\n  hint: is another program using the same MASTER_ADDR and MASTER_PORT?");
  std::copy(bytes.begin(), bytes.end(), id.bytes.begin());
  return id;
}

// A collective in flight: done when its event has completed on the device.
struct Pending {
  uint64_t seq = 0;
  std::unique_ptr<cuda::Event> event;
  std::vector<Tensor> keep;  // the tensors its kernels use: alive until it is done
  Clock::time_point deadline;
  std::string what;
};

struct ProcessGroupNccl::Impl {
  std::unique_ptr<cuda::NcclComm> comm;
  std::mutex mu;
  std::condition_variable cv;
  std::deque<Pending> pending;
  uint64_t next_seq = 1;
  std::string broken;           // why the group is unusable ("" while it works)
  bool broken_by_timeout = false;
  bool stop = false;
  std::thread watchdog;
  Tensor barrier_buf;           // [1] f32 on the group's device

  // Under mu: marks the group broken, aborts the communicator (its kernels exit), drops the
  // collectives in flight and wakes every waiter.
  void fail(std::string why, bool timeout) {
    if (broken.empty()) {
      broken = std::move(why);
      broken_by_timeout = timeout;
    }
    if (comm) comm->abort();
    pending.clear();
    cv.notify_all();
  }
};

ProcessGroupNccl::ProcessGroupNccl(std::shared_ptr<TcpStore> store, int rank, int world_size, NcclOptions options)
    : rank_(rank), world_size_(world_size), options_(options), store_(std::move(store)) {
  MG_CHECK(store_ != nullptr, Error, "ProcessGroupNccl: the store is null");
  MG_CHECK(world_size_ >= 1, Error, "ProcessGroupNccl: world size must be >= 1, got ", world_size_);
  MG_CHECK(rank_ >= 0 && rank_ < world_size_, Error, "ProcessGroupNccl: rank ", rank_, " is not in [0, ",
           world_size_, ")");
  MG_CHECK(options_.timeout.count() > 0, Error, "ProcessGroupNccl: the timeout must be positive, got ",
           options_.timeout.count(), " ms");
  MG_CHECK(options_.poll_interval.count() > 0, Error, "ProcessGroupNccl: the poll interval must be positive, got ",
           options_.poll_interval.count(), " ms");
  MG_CHECK(options_.device >= -1, Error, "ProcessGroupNccl: device ", options_.device,
           " is not a CUDA device index (or -1 for the current device)");
  const std::string why = cuda::nccl_unavailable_reason();
  MG_CHECK(why.empty(), DeviceError, "ProcessGroupNccl: rank ", rank_, " cannot use NCCL: ", why,
           "\n  hint: the nccl backend needs a CUDA device per rank; use the gloo backend for CPU tensors");
  device_ = options_.device >= 0 ? options_.device : cuda::current_device();
  cuda::check_device(Device::cuda(device_));

  // Arrival round, as ProcessGroupGloo's: every rank announces itself, so a missing one is named.
  const auto deadline = Clock::now() + options_.timeout;
  prefix_ = options_.store_prefix.empty() ? prefix(world_size_) : options_.store_prefix;
  const cuda::NcclUniqueId id =
      exchange_nccl_unique_id(*store_, rank_, world_size_, [] { return cuda::nccl_unique_id(); }, prefix_);
  std::string tag;  // the id's first 8 bytes in hex: names this group's keys
  for (int i = 0; i < 8; ++i) tag += str_cat("0123456789abcdef"[(id.bytes[i] >> 4) & 15], "0123456789abcdef"[id.bytes[i] & 15]);
  const std::string group = prefix_ + tag + "/";
  store_->set(group + "arrived/" + std::to_string(rank_), std::to_string(::getpid()));
  std::vector<std::string> keys;
  for (int r = 0; r < world_size_; ++r) keys.push_back(group + "arrived/" + std::to_string(r));
  for (;;) {
    const std::vector<std::string> left = store_->missing(keys);
    if (left.empty()) break;
    if (Clock::now() >= deadline) {
      std::string ranks;
      for (const auto& k : left) ranks += (ranks.empty() ? "" : ", ") + k.substr(k.rfind('/') + 1);
      MG_THROW(distributed::DistributedTimeoutError, "ProcessGroupNccl: rank ", rank_, " of ", world_size_,
               " waited ", options_.timeout.count(), " ms at the rendezvous but rank", left.size() > 1 ? "s " : " ",
               ranks, " never arrived\n  hint: did every rank start, with the same MASTER_ADDR, MASTER_PORT and WORLD_SIZE?");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }

  impl_ = std::make_unique<Impl>();
  impl_->comm = std::make_unique<cuda::NcclComm>(id, world_size_, rank_, device_);
  for (;;) {  // the non-blocking creation: connects to the peers in the background
    cuda::NcclState state;
    try {
      state = impl_->comm->poll();
    } catch (const Error& e) {
      impl_->comm->abort();
      MG_THROW(distributed::DistributedError, "ProcessGroupNccl: rank ", rank_, " of ", world_size_,
               " could not create the NCCL communicator on cuda:", device_, ": ", e.what());
    }
    if (state == cuda::NcclState::Ready) break;
    if (Clock::now() >= deadline) {
      impl_->comm->abort();
      MG_THROW(distributed::DistributedTimeoutError, "ProcessGroupNccl: rank ", rank_, " of ", world_size_,
               ": the NCCL communicator was not ready within ", options_.timeout.count(),
               " ms (aborted)\n  hint: can the ranks reach each other (NCCL_SOCKET_IFNAME, NCCL_DEBUG=INFO)?");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  impl_->barrier_buf = zeros({1}, {.dtype = DType::F32, .device = Device::cuda(device_)});

  impl_->watchdog = std::thread([this] {
    Impl& s = *impl_;
    std::unique_lock<std::mutex> lock(s.mu);
    while (!s.stop) {
      if (s.pending.empty() || !s.broken.empty()) {
        s.cv.wait(lock, [&] { return s.stop || (!s.pending.empty() && s.broken.empty()); });
        continue;
      }
      try {
        (void)s.comm->poll();  // throws when NCCL reported an asynchronous error
        cuda::DeviceGuard guard(device_);
        while (!s.pending.empty() && s.pending.front().event->query()) s.pending.pop_front();
        if (!s.pending.empty() && Clock::now() >= s.pending.front().deadline) {
          s.fail(str_cat(s.pending.front().what, " did not finish within ", options_.timeout.count(),
                         " ms: a peer did not take part (the communicator was aborted)\n  hint: is a rank "
                         "stuck or dead, or calling collectives in a different order or with other sizes?"),
                 true);
        }
      } catch (const std::exception& e) {
        s.fail(str_cat("NCCL failed during ", s.pending.empty() ? "a collective" : s.pending.front().what,
                       " (the communicator was aborted): ", e.what()),
               false);
      }
      s.cv.notify_all();
      s.cv.wait_for(lock, options_.poll_interval, [&] { return s.stop; });
    }
  });
}

ProcessGroupNccl::~ProcessGroupNccl() {
  if (!impl_) return;
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->stop = true;
    if (impl_->comm && !impl_->comm->closed()) impl_->comm->abort();
    impl_->pending.clear();
  }
  impl_->cv.notify_all();
  if (impl_->watchdog.joinable()) impl_->watchdog.join();
}

void ProcessGroupNccl::check_tensor(const char* what, const Tensor& t) const {
  MG_CHECK(t.defined(), Error, "ProcessGroupNccl::", what, ": the tensor is undefined");
  MG_CHECK(t.device() == Device::cuda(device_), DeviceError, "ProcessGroupNccl::", what, ": expected a tensor on cuda:",
           device_, " (this rank's device), got ", describe(t),
           t.device().is_cpu() ? "\n  hint: the nccl backend takes CUDA tensors; use the gloo backend for CPU tensors"
                               : "\n  hint: move it with .to(mg::Device::cuda(pg.device()))");
}

void ProcessGroupNccl::check_reducible(const char* what, const Tensor& t, ReduceOp op) const {
  check_tensor(what, t);
  MG_CHECK(cuda::nccl_dtype_code(t.dtype(), true) >= 0, DTypeError, "ProcessGroupNccl::", what, ": ",
           reduce_op_name(op), " takes f64, f32, f16, bf16, i64 or i32 tensors, got ", describe(t));
  MG_CHECK(cuda::nccl_op_code(nccl_red_op(op), t.dtype()) >= 0, DTypeError, "ProcessGroupNccl::", what,
           ": avg needs a floating tensor (an integer mean would truncate), got ", describe(t),
           "\n  hint: use sum and divide, or convert to f32/f64 first");
}

void ProcessGroupNccl::agree(const char* what, const Tensor* t, ReduceOp op, int root,
                             const std::exception_ptr& refusal) {
  if (!options_.check_consistency || world_size_ == 1 || !impl_ || !store_) {  // (run() reports a shut-down group)
    if (refusal) std::rethrow_exception(refusal);  // unchecked: the ranks' calls may now be out of step
    return;
  }
  check_calls_through_store(*store_, prefix_ + "calls/", calls_checked_++, rank_, world_size_,
                            make_call_header(what, t, op, root, refusal != nullptr), refusal, "ProcessGroupNccl", what);
}

template <typename F>
void ProcessGroupNccl::run(const char* what, std::vector<Tensor> keep, F&& enqueue) {
  MG_CHECK(impl_ != nullptr, distributed::DistributedError, "ProcessGroupNccl::", what, ": rank ", rank_,
           ": the group is unusable: shut down");
  Impl& s = *impl_;
  uint64_t seq = 0;
  {
    std::unique_lock<std::mutex> lock(s.mu);
    if (!s.broken.empty()) {
      const std::string msg = str_cat("ProcessGroupNccl::", what, ": rank ", rank_, " of ", world_size_,
                                      ": the group is unusable: ", s.broken);
      if (s.broken_by_timeout) throw DistributedTimeoutError(msg);
      throw DistributedError(msg);
    }
    cuda::DeviceGuard guard(device_);
    const cuda::Stream stream = cuda::current_stream(device_);
    const auto deadline = Clock::now() + options_.timeout;
    try {
      enqueue(*s.comm, stream);
      // A non-blocking communicator may still be queueing the call: wait until it has (host
      // work only, never a peer), so the next call starts from a clean state.
      while (s.comm->poll() == cuda::NcclState::InProgress) {
        if (Clock::now() >= deadline) {
          s.fail(str_cat(what, " was not enqueued within ", options_.timeout.count(), " ms"), true);
          throw DistributedTimeoutError(str_cat("ProcessGroupNccl::", what, ": rank ", rank_, ": ", s.broken));
        }
        std::this_thread::yield();
      }
    } catch (const DistributedError&) {
      throw;
    } catch (const CudaError& e) {
      s.fail(str_cat(what, " failed"), false);
      throw DistributedError(str_cat("ProcessGroupNccl::", what, ": rank ", rank_, " of ", world_size_, ": ", e.what()));
    }
    Pending p;
    p.seq = seq = s.next_seq++;
    p.event = std::make_unique<cuda::Event>(false);
    p.event->record(stream);
    p.keep = std::move(keep);
    p.deadline = deadline;
    p.what = str_cat(what, " #", p.seq);
    s.pending.push_back(std::move(p));
  }
  s.cv.notify_all();
  if (!options_.blocking_wait && std::string(what) != "barrier") return;
  std::unique_lock<std::mutex> lock(s.mu);
  s.cv.wait(lock, [&] { return !s.broken.empty() || s.pending.empty() || s.pending.front().seq > seq; });
  if (!s.broken.empty()) {
    const std::string msg = str_cat("ProcessGroupNccl::", what, ": rank ", rank_, " of ", world_size_, ": ", s.broken);
    if (s.broken_by_timeout) throw DistributedTimeoutError(msg);
    throw DistributedError(msg);
  }
}

void ProcessGroupNccl::all_reduce(Tensor& tensor, ReduceOp op) {
  const std::exception_ptr refusal = refusal_of([&] {
    check_reducible("all_reduce", tensor, op);
  });
  agree("all_reduce", &tensor, op, 0, refusal);
  if (tensor.numel() == 0) return;
  NoGradGuard no_grad;
  Tensor work = tensor.is_contiguous() ? tensor : tensor.contiguous();
  run("all_reduce", {work}, [&](cuda::NcclComm& comm, const cuda::Stream& stream) {
    comm.all_reduce(work.data_ptr(), work.data_ptr(), std::size_t(work.numel()), work.dtype(), nccl_red_op(op), stream);
  });
  if (!work.is_same(tensor)) tensor.copy_(work);  // stream-ordered after the collective
  else tensor.bump_version();
}

void ProcessGroupNccl::broadcast(Tensor& tensor, int root) {
  const std::exception_ptr refusal = refusal_of([&] {
    check_tensor("broadcast", tensor);
    MG_CHECK(root >= 0 && root < world_size_, Error, "ProcessGroupNccl::broadcast: root ", root,
             " is not a rank in [0, ", world_size_, ")");
  });
  agree("broadcast", &tensor, ReduceOp::Sum, root, refusal);
  if (tensor.numel() == 0) return;
  NoGradGuard no_grad;
  Tensor work = tensor.is_contiguous() ? tensor : tensor.contiguous();
  run("broadcast", {work}, [&](cuda::NcclComm& comm, const cuda::Stream& stream) {
    comm.broadcast(work.data_ptr(), work.data_ptr(), std::size_t(work.numel()), work.dtype(), root, stream);
  });
  if (!work.is_same(tensor)) tensor.copy_(work);
  else tensor.bump_version();
}

Tensor ProcessGroupNccl::all_gather(const Tensor& input) {
  agree("all_gather", &input, ReduceOp::Sum, 0, refusal_of([&] { check_tensor("all_gather", input); }));
  Shape shape = input.shape();
  shape.insert(shape.begin(), int64_t(world_size_));
  Tensor out = empty(shape, {.dtype = input.dtype(), .device = Device::cuda(device_)});  // [W, *input.shape]
  if (input.numel() == 0) return out;
  NoGradGuard no_grad;
  Tensor in = input.contiguous();
  run("all_gather", {in, out}, [&](cuda::NcclComm& comm, const cuda::Stream& stream) {
    comm.all_gather(in.data_ptr(), out.data_ptr(), std::size_t(in.numel()), in.dtype(), stream);
  });
  return out;
}

Tensor ProcessGroupNccl::reduce_scatter(const Tensor& input, ReduceOp op) {
  const std::exception_ptr refusal = refusal_of([&] {
    check_reducible("reduce_scatter", input, op);
    MG_CHECK(input.dim() >= 1 && input.size(0) % world_size_ == 0, ShapeError,
             "ProcessGroupNccl::reduce_scatter: the input's first dimension must split into ", world_size_,
             " equal blocks, got ", describe(input));
  });
  agree("reduce_scatter", &input, op, 0, refusal);
  Shape shape = input.shape();
  shape[0] /= world_size_;
  Tensor out = empty(shape, {.dtype = input.dtype(), .device = Device::cuda(device_)});  // [n, ...]
  if (out.numel() == 0) return out;
  NoGradGuard no_grad;
  Tensor in = input.contiguous();
  run("reduce_scatter", {in, out}, [&](cuda::NcclComm& comm, const cuda::Stream& stream) {
    comm.reduce_scatter(in.data_ptr(), out.data_ptr(), std::size_t(out.numel()), in.dtype(), nccl_red_op(op), stream);
  });
  return out;
}

void ProcessGroupNccl::barrier() {
  Tensor buf = impl_ ? impl_->barrier_buf : Tensor();
  agree("barrier", nullptr, ReduceOp::Sum, 0, nullptr);
  run("barrier", {buf}, [&](cuda::NcclComm& comm, const cuda::Stream& stream) {
    comm.all_reduce(buf.data_ptr(), buf.data_ptr(), 1, DType::F32, cuda::NcclRedOp::Sum, stream);
  });
}

std::shared_ptr<ProcessGroup> ProcessGroupNccl::new_group(const std::vector<int>& ranks) {
  const std::vector<int> members = new_group_members("ProcessGroupNccl", ranks, world_size_);
  MG_CHECK(impl_ != nullptr && store_ != nullptr, distributed::DistributedError, "ProcessGroupNccl::new_group: rank ",
           rank_, ": the group is unusable: shut down");
  const uint64_t index = groups_made_++;  // counted on non-members too: every rank's next call agrees
  const auto me = std::find(members.begin(), members.end(), rank_);
  if (me == members.end()) return nullptr;
  NcclOptions options = options_;
  options.device = device_;
  options.store_prefix = new_group_prefix(prefix_, index, members);
  return std::make_shared<ProcessGroupNccl>(store_, int(me - members.begin()), int(members.size()), options);
}

void ProcessGroupNccl::shutdown() {
  if (!impl_) return;
  std::string why;
  bool healthy = false;
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    healthy = impl_->broken.empty();
  }
  if (healthy) {
    try {
      barrier();
    } catch (const Error& e) {
      why = e.what();
      healthy = false;
    }
  }
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->stop = true;
  }
  impl_->cv.notify_all();
  if (impl_->watchdog.joinable()) impl_->watchdog.join();
  cuda::NcclComm& comm = *impl_->comm;
  if (healthy) {
    try {
      comm.finalize();  // flushes the queue, in the background
      const auto deadline = Clock::now() + options_.timeout;
      while (comm.poll() == cuda::NcclState::InProgress) {
        if (Clock::now() >= deadline) {
          why = str_cat("ncclCommFinalize did not finish within ", options_.timeout.count(), " ms");
          break;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
      if (why.empty()) comm.destroy();
    } catch (const Error& e) {
      why = e.what();
    }
  }
  if (!comm.closed()) comm.abort();
  impl_.reset();
  store_.reset();  // on rank 0 this stops the store server; every rank is past the barrier
  if (!why.empty()) MG_THROW(distributed::DistributedError, "ProcessGroupNccl::shutdown: ", why);
}

}  // namespace mg::distributed
