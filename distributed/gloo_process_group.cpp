// ProcessGroupGloo over Gloo's TCP transport (see gloo_process_group.h).
// Decision: our own arrival round in the store precedes Gloo's connectFullMesh, so a rank that
// never comes is reported by rank number (Gloo's own wait would only name one store key); Gloo's
// exceptions are translated here, once, into DistributedError / DistributedTimeoutError.
#include "mixgrad/distributed/gloo_process_group.h"

#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cmath>
#include <cstring>
#include <thread>

#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/common/error.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>

#include "mixgrad/autograd/grad_mode.h"
#include "mixgrad/core/factory.h"
#include "mixgrad/distributed/call_check.h"
#include "mixgrad/distributed/error.h"
#include "mixgrad/distributed/reduce16.h"

namespace mg::distributed {
namespace {

// gloo::rendezvous::Store over our TcpStore, with a key prefix per group.
class GlooStore : public gloo::rendezvous::Store {
 public:
  GlooStore(TcpStore& store, std::string prefix) : store_(store), prefix_(std::move(prefix)) {}
  void set(const std::string& key, const std::vector<char>& data) override {
    store_.set(prefix_ + key, data);
  }
  std::vector<char> get(const std::string& key) override { return store_.get(prefix_ + key); }
  void wait(const std::vector<std::string>& keys) override { wait(keys, store_.options().timeout); }
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override {
    std::vector<std::string> full;
    for (const auto& k : keys) full.push_back(prefix_ + k);
    store_.wait(full, timeout);
  }

 private:
  TcpStore& store_;
  std::string prefix_;
};

bool is_loopback(const std::string& host) {
  return host == "localhost" || host.rfind("127.", 0) == 0 || host == "::1";
}

// Reduction functions Gloo calls on chunks: c[i] = op(a[i], b[i]). Max and min propagate NaN.
template <typename T>
struct SumFn {
  static T apply(T a, T b) { return a + b; }
};
template <typename T>
struct MaxFn {
  static T apply(T a, T b) {
    if constexpr (std::is_floating_point_v<T>) {
      if (std::isnan(a) || std::isnan(b)) return std::isnan(a) ? a : b;
    }
    return a > b ? a : b;
  }
};
template <typename T>
struct MinFn {
  static T apply(T a, T b) {
    if constexpr (std::is_floating_point_v<T>) {
      if (std::isnan(a) || std::isnan(b)) return std::isnan(a) ? a : b;
    }
    return a < b ? a : b;
  }
};
template <typename T, template <typename> class Op>
void reduce_chunk(void* c, const void* a, const void* b, size_t n) {
  T* out = static_cast<T*>(c);
  const T* x = static_cast<const T*>(a);
  const T* y = static_cast<const T*>(b);
  for (size_t i = 0; i < n; ++i) out[i] = Op<T>::apply(x[i], y[i]);
}

template <typename T>
gloo::AllreduceOptions::Func reduce_function(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum:
    case ReduceOp::Avg: return &reduce_chunk<T, SumFn>;
    case ReduceOp::Max: return &reduce_chunk<T, MaxFn>;
    case ReduceOp::Min: return &reduce_chunk<T, MinFn>;
  }
  return &reduce_chunk<T, SumFn>;
}

bool reducible(DType t) {
  return t == DType::F64 || t == DType::F32 || t == DType::F16 || t == DType::BF16 ||
         t == DType::I64 || t == DType::I32;
}

void check_cpu_tensor(const char* what, const Tensor& t) {
  MG_CHECK(t.defined(), Error, "ProcessGroupGloo::", what, ": the tensor is undefined");
  MG_CHECK(t.device().is_cpu(), DeviceError, "ProcessGroupGloo::", what,
           ": expected a cpu tensor, got ", describe(t),
           "\n  hint: the Gloo backend reduces CPU tensors; move it with .to(mg::Device::cpu())");
}

void check_reducible(const char* what, const Tensor& t, ReduceOp op) {
  MG_CHECK(reducible(t.dtype()), DTypeError, "ProcessGroupGloo::", what, ": ", reduce_op_name(op),
           " takes f64, f32, f16, bf16, i64 or i32 tensors, got ", describe(t));
  MG_CHECK(op != ReduceOp::Avg || is_floating(t.dtype()), DTypeError, "ProcessGroupGloo::", what,
           ": avg needs a floating tensor (an integer mean would truncate), got ", describe(t),
           "\n  hint: use sum and divide, or convert to f32/f64 first");
}

}  // namespace

struct ProcessGroupGloo::Impl {
  std::shared_ptr<gloo::transport::Device> device;
  std::shared_ptr<gloo::rendezvous::Context> context;
};

ProcessGroupGloo::ProcessGroupGloo(std::shared_ptr<TcpStore> store, int rank, int world_size,
                                   GlooOptions options)
    : rank_(rank), world_size_(world_size), options_(std::move(options)), store_(std::move(store)) {
  MG_CHECK(store_ != nullptr, Error, "ProcessGroupGloo: the store is null");
  MG_CHECK(world_size_ >= 1, Error, "ProcessGroupGloo: world size must be >= 1, got ", world_size_);
  MG_CHECK(rank_ >= 0 && rank_ < world_size_, Error, "ProcessGroupGloo: rank ", rank_,
           " is not in [0, ", world_size_, ")");
  MG_CHECK(options_.timeout.count() > 0, Error, "ProcessGroupGloo: the timeout must be positive, got ",
           options_.timeout.count(), " ms");
  // A peer that dies turns our next write on its socket into SIGPIPE, whose default action kills
  // the process before Gloo can report the error; with SIGPIPE ignored the write fails with
  // EPIPE and becomes a DistributedError. A handler the program installed itself is kept.
  struct sigaction old {};
  if (::sigaction(SIGPIPE, nullptr, &old) == 0 && old.sa_handler == SIG_DFL) {
    std::signal(SIGPIPE, SIG_IGN);
  }

  // Arrival round: every rank announces itself, then waits for all others.
  prefix_ = options_.store_prefix.empty() ? "mg/pg/gloo/" + std::to_string(world_size_) + "/" : options_.store_prefix;
  const std::string& group = prefix_;
  store_->set(group + "arrived/" + std::to_string(rank_), std::to_string(::getpid()));
  std::vector<std::string> keys;
  for (int r = 0; r < world_size_; ++r) keys.push_back(group + "arrived/" + std::to_string(r));
  const auto deadline = detail::Clock::now() + options_.timeout;
  std::vector<std::string> left = keys;
  auto rank_list = [&] {
    std::string ranks;
    for (const auto& k : left) ranks += (ranks.empty() ? "" : ", ") + k.substr(k.rfind('/') + 1);
    return ranks;
  };
  for (;;) {
    try {
      left = store_->missing(keys);
    } catch (const DistributedTimeoutError&) {
      throw;
    } catch (const DistributedError& e) {
      MG_THROW(distributed::DistributedError, "ProcessGroupGloo: rank ", rank_, " of ", world_size_,
               " lost the rendezvous store while waiting for rank", left.size() > 1 ? "s " : " ",
               rank_list(), " to arrive (rank 0, its host, probably gave up or exited): ", e.what());
    }
    if (left.empty()) break;
    if (detail::Clock::now() >= deadline) {
      const std::string ranks = rank_list();
      MG_THROW(distributed::DistributedTimeoutError, "ProcessGroupGloo: rank ", rank_, " of ", world_size_,
               " waited ", options_.timeout.count(), " ms at the rendezvous ",
               store_->options().host, ":", store_->port(), " but rank",
               left.size() > 1 ? "s " : " ", ranks, left.size() > 1 ? " never arrived" : " never arrived",
               "\n  hint: did every rank start, with the same MASTER_ADDR, MASTER_PORT and WORLD_SIZE?");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }

  impl_ = std::make_unique<Impl>();
  gloo::transport::tcp::attr attr;
  if (!options_.iface.empty()) {
    attr.iface = options_.iface;
  } else if (!options_.hostname.empty()) {
    attr.hostname = options_.hostname;
  } else if (is_loopback(store_->options().host)) {
    attr.hostname = "127.0.0.1";
  } else {
    char name[256] = {};
    ::gethostname(name, sizeof(name) - 1);
    attr.hostname = name;
  }
  try {
    impl_->device = gloo::transport::tcp::CreateDevice(attr);
    impl_->context = std::make_shared<gloo::rendezvous::Context>(rank_, world_size_);
    impl_->context->setTimeout(options_.timeout);
    GlooStore gloo_store(*store_, group + "gloo/");
    impl_->context->connectFullMesh(gloo_store, impl_->device);
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    MG_THROW(distributed::DistributedError, "ProcessGroupGloo: rank ", rank_, " of ", world_size_,
             " could not connect to its peers: ", e.what(),
             "\n  hint: set GlooOptions.hostname or .iface to an address the other ranks can reach");
  }
}

ProcessGroupGloo::~ProcessGroupGloo() = default;

template <typename F>
void ProcessGroupGloo::run(const char* what, F&& body) {
  MG_CHECK(broken_.empty(), distributed::DistributedError, "ProcessGroupGloo::", what, ": rank ", rank_,
           ": the group is unusable: ", broken_);
  auto fail = [&](const std::string& why) {
    broken_ = str_cat(what, " failed earlier");
    return str_cat("ProcessGroupGloo::", what, ": rank ", rank_, " of ", world_size_, ": ", why);
  };
  try {
    body();
  } catch (const Error&) {
    throw;
  } catch (const gloo::IoException& e) {
    const std::string msg = e.what();
    if (msg.find("Timed out") != std::string::npos) {
      throw DistributedTimeoutError(fail(str_cat(
          "no progress within ", options_.timeout.count(),
          " ms: a peer did not take part\n  hint: is a rank stuck, or calling collectives in a "
          "different order or with other sizes?\n  gloo: ", msg)));
    }
    throw DistributedError(fail(str_cat(
        "a peer's connection broke (did a rank exit or crash?)\n  gloo: ", msg)));
  } catch (const std::exception& e) {
    throw DistributedError(fail(str_cat("Gloo failed: ", e.what())));
  }
}

void ProcessGroupGloo::agree(const char* what, const Tensor* t, ReduceOp op, int root,
                             const std::exception_ptr& refusal) {
  if (!options_.check_consistency || world_size_ == 1) {
    if (refusal) std::rethrow_exception(refusal);  // unchecked: the ranks' calls may now be out of step
    return;
  }
  const CallHeader mine = make_call_header(what, t, op, root, refusal != nullptr);
  std::vector<CallHeader> all(static_cast<std::size_t>(world_size_));
  gloo::AllgatherOptions opts(impl_->context);
  opts.setInput(reinterpret_cast<uint8_t*>(const_cast<CallHeader*>(&mine)), sizeof(CallHeader));
  opts.setOutput(reinterpret_cast<uint8_t*>(all.data()), sizeof(CallHeader) * all.size());
  opts.setTag(next_tag_++);
  opts.setTimeout(options_.timeout);
  gloo::allgather(opts);
  // Every rank sees the same headers, so every rank throws (the refusing rank its own error) and
  // nothing was sent.
  agree_or_rethrow(all, refusal, "ProcessGroupGloo", what, rank_);
}

void ProcessGroupGloo::reduce_in_place(Tensor& t, ReduceOp op) {
  gloo::AllreduceOptions opts(impl_->context);
  const size_t n = size_t(t.numel());
  switch (t.dtype()) {
    case DType::F16:
    case DType::BF16: {
      // 2-byte elements on the wire; every hop adds in f32 and rounds once (reduce16.h).
      opts.setOutput(static_cast<uint16_t*>(t.data_ptr()), n);
      const DType dtype = t.dtype();
      opts.setReduceFunction([dtype, op](void* c, const void* a, const void* b, size_t m) {
        reduce16(dtype, op, c, a, b, m);
      });
      break;
    }
    case DType::F64:
      opts.setOutput(t.data<double>(), n);
      opts.setReduceFunction(reduce_function<double>(op));
      break;
    case DType::F32:
      opts.setOutput(t.data<float>(), n);
      opts.setReduceFunction(reduce_function<float>(op));
      break;
    case DType::I64:
      opts.setOutput(t.data<int64_t>(), n);
      opts.setReduceFunction(reduce_function<int64_t>(op));
      break;
    case DType::I32:
      opts.setOutput(t.data<int32_t>(), n);
      opts.setReduceFunction(reduce_function<int32_t>(op));
      break;
    default:
      MG_ASSERT(false, "reduce_in_place on ", dtype_name(t.dtype()));
  }
  opts.setTag(next_tag_++);
  opts.setTimeout(options_.timeout);
  gloo::allreduce(opts);
  // Avg: the sum divided once, in the accumulation dtype (f32 for f16/bf16, then rounded).
  if (op == ReduceOp::Avg) t.div_(double(world_size_));
}

void ProcessGroupGloo::all_reduce(Tensor& tensor, ReduceOp op) {
  const std::exception_ptr refusal = refusal_of([&] {
    check_cpu_tensor("all_reduce", tensor);
    check_reducible("all_reduce", tensor, op);
  });
  run("all_reduce", [&] {
    agree("all_reduce", &tensor, op, 0, refusal);
    if (tensor.numel() == 0) return;
    NoGradGuard no_grad;
    // f16/bf16 travel as themselves (AllReduceOptions.reduce_in_f32 widens them before this).
    Tensor work = tensor.is_contiguous() ? tensor : tensor.contiguous();
    reduce_in_place(work, op);
    if (!work.is_same(tensor)) tensor.copy_(work);
    else tensor.bump_version();
  });
}

void ProcessGroupGloo::broadcast(Tensor& tensor, int root) {
  const std::exception_ptr refusal = refusal_of([&] {
    check_cpu_tensor("broadcast", tensor);
    MG_CHECK(root >= 0 && root < world_size_, Error, "ProcessGroupGloo::broadcast: root ", root,
             " is not a rank in [0, ", world_size_, ")");
  });
  run("broadcast", [&] {
    agree("broadcast", &tensor, ReduceOp::Sum, root, refusal);
    if (tensor.numel() == 0) return;
    NoGradGuard no_grad;
    Tensor work = tensor.is_contiguous() ? tensor : tensor.contiguous();
    gloo::BroadcastOptions opts(impl_->context);
    opts.setOutput(static_cast<uint8_t*>(work.data_ptr()), size_t(work.numel()) * work.element_size());
    opts.setRoot(root);
    opts.setTag(next_tag_++);
    opts.setTimeout(options_.timeout);
    gloo::broadcast(opts);
    if (!work.is_same(tensor)) tensor.copy_(work);
    else tensor.bump_version();
  });
}

Tensor ProcessGroupGloo::all_gather(const Tensor& input) {
  const std::exception_ptr refusal = refusal_of([&] { check_cpu_tensor("all_gather", input); });
  Tensor out;
  run("all_gather", [&] {
    agree("all_gather", &input, ReduceOp::Sum, 0, refusal);
    Shape shape = input.shape();
    shape.insert(shape.begin(), int64_t(world_size_));
    out = empty(shape, {.dtype = input.dtype()});
    if (input.numel() == 0) return;
    NoGradGuard no_grad;
    Tensor in = input.contiguous();
    const size_t bytes = size_t(in.numel()) * in.element_size();
    gloo::AllgatherOptions opts(impl_->context);
    opts.setInput(static_cast<uint8_t*>(in.data_ptr()), bytes);
    opts.setOutput(static_cast<uint8_t*>(out.data_ptr()), bytes * size_t(world_size_));
    opts.setTag(next_tag_++);
    opts.setTimeout(options_.timeout);
    gloo::allgather(opts);
  });
  return out;
}

Tensor ProcessGroupGloo::reduce_scatter(const Tensor& input, ReduceOp op) {
  const std::exception_ptr refusal = refusal_of([&] {
    check_cpu_tensor("reduce_scatter", input);
    check_reducible("reduce_scatter", input, op);
    MG_CHECK(input.dim() >= 1 && input.size(0) % world_size_ == 0, ShapeError,
             "ProcessGroupGloo::reduce_scatter: the input's first dimension must split into ",
             world_size_, " equal blocks, got ", describe(input));
  });
  Tensor out;
  run("reduce_scatter", [&] {
    agree("reduce_scatter", &input, op, 0, refusal);
    const int64_t n = input.size(0) / world_size_;
    NoGradGuard no_grad;
    // Reduced as an all-reduce of the whole input, of which each rank keeps its block: Gloo
    // 0.5's reduce-scatter is the old halving-doubling class with int counts, so this moves
    // about twice the bytes of a true reduce-scatter but shares all_reduce's tested path.
    Tensor work = input.contiguous();
    if (work.is_same(input)) work = input.clone();
    if (work.numel() > 0) reduce_in_place(work, op);
    out = work.narrow(0, int64_t(rank_) * n, n).clone();
  });
  return out;
}

void ProcessGroupGloo::barrier() {
  run("barrier", [&] {
    agree("barrier", nullptr, ReduceOp::Sum, 0, nullptr);
    gloo::BarrierOptions opts(impl_->context);
    opts.setTag(next_tag_++);
    opts.setTimeout(options_.timeout);
    gloo::barrier(opts);
  });
}

std::shared_ptr<ProcessGroup> ProcessGroupGloo::new_group(const std::vector<int>& ranks) {
  const std::vector<int> members = new_group_members("ProcessGroupGloo", ranks, world_size_);
  MG_CHECK(store_ != nullptr, distributed::DistributedError, "ProcessGroupGloo::new_group: rank ", rank_,
           ": the group is unusable: shut down");
  const uint64_t index = groups_made_++;  // counted on non-members too: every rank's next call agrees
  const auto me = std::find(members.begin(), members.end(), rank_);
  if (me == members.end()) return nullptr;
  GlooOptions options = options_;
  options.store_prefix = new_group_prefix(prefix_, index, members);
  return std::make_shared<ProcessGroupGloo>(store_, int(me - members.begin()), int(members.size()), options);
}

void ProcessGroupGloo::shutdown() {
  if (!impl_) return;
  std::string why;
  if (broken_.empty()) {
    try {
      barrier();
    } catch (const Error& e) {
      why = e.what();
    }
  }
  impl_.reset();
  store_.reset();  // on rank 0 this stops the store server; every rank is past the barrier
  broken_ = "shut down";
  if (!why.empty()) MG_THROW(distributed::DistributedError, "ProcessGroupGloo::shutdown: ", why);
}

}  // namespace mg::distributed
