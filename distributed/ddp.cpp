// DistributedDataParallel (ddp.h): construction checks and broadcast, the gradient hooks that
// fill and launch buckets, and the end-of-backward callback that completes the reduction.
#include "mixgrad/distributed/ddp.h"

#include <algorithm>
#include <cstring>
#include <sstream>
#include <unordered_map>
#include <unordered_set>

#include "mixgrad/amp/unscale.h"
#include "mixgrad/autograd/grad_mode.h"
#include "mixgrad/autograd/hooks.h"
#include "mixgrad/core/factory.h"
#include "mixgrad/cuda/cuda.h"
#include "mixgrad/distributed/error.h"
#include "mixgrad/distributed/rank_agreement.h"
#include "mixgrad/distributed/sync_batch_norm.h"
#include "mixgrad/nn/normalization.h"
#include "mixgrad/ops/layout.h"
#include "mixgrad/ops/ops.h"

namespace mg::distributed {
namespace {

constexpr const char* kWho = "DistributedDataParallel";

// One line per parameter and buffer: what must be equal on every rank.
std::vector<std::string> describe_model(const nn::NamedTensors& params, const nn::NamedTensors& buffers) {
  std::vector<std::string> lines;
  for (const auto& [name, t] : params) {
    lines.push_back("parameter '" + name + "' " + shape_str(t.shape()) + " " + dtype_name(t.dtype()));
  }
  for (const auto& [name, t] : buffers) {
    lines.push_back("buffer '" + name + "' " + shape_str(t.shape()) + " " + dtype_name(t.dtype()));
  }
  return lines;
}

}  // namespace

double BackwardTimeline::hidden_comm_s() const {
  double s = 0;
  for (const BucketTiming& b : buckets) s += std::max(0.0, std::min(b.finished_s, backward_end_s) - b.started_s);
  return s;
}

double BackwardTimeline::total_comm_s() const {
  double s = 0;
  for (const BucketTiming& b : buckets) s += b.finished_s - b.started_s;
  return s;
}

DistributedDataParallel::DistributedDataParallel(std::shared_ptr<nn::Module> module, std::shared_ptr<ProcessGroup> group,
                                                 DdpOptions options)
    : module_(std::move(module)), group_(std::move(group)), options_(options) {
  MG_CHECK(module_ != nullptr, Error, kWho, ": the module is null");
  MG_CHECK(group_ != nullptr, Error, kWho, ": the process group is null",
           "\n  hint: pass the group init_process_group() returned");
  MG_CHECK(!options_.reduce_dtype || is_floating(*options_.reduce_dtype), DTypeError, kWho,
           ": reduce_dtype must be floating, got ", dtype_name(*options_.reduce_dtype));
  for (std::size_t k = 0; k < options_.optimizers.size(); ++k) {  // checked alike on every rank
    MG_CHECK(options_.optimizers[k] != nullptr, Error, kWho, ": optimizers[", k, "] is null");
  }
  try {
    comm_ = group_->new_group();
  } catch (const NotImplementedError&) {
    comm_ = group_;  // a backend without subgroups: shared, with the SyncBatchNorm check below
  }
  // Trainable parameters, each once (a parameter shared by two layers is listed twice).
  std::unordered_set<const TensorImpl*> seen;
  for (const auto& [name, t] : module_->named_parameters()) {
    if (!t.requires_grad() || !seen.insert(t.impl()).second) continue;
    MG_CHECK(is_floating(t.dtype()), DTypeError, kWho, ": parameter '", name, "' is ", describe(t),
             "; only floating parameters can be trained");
    params_.push_back({.tensor = t, .name = name});
  }
  for (const Param& p : params_) {
    MG_CHECK(p.tensor.device() == params_.front().tensor.device(), DeviceError, kWho, ": parameter '", p.name, "' is ",
             describe(p.tensor), " but '", params_.front().name, "' is on ", params_.front().tensor.device().str(),
             "\n  hint: one replica per process on one device: move the whole model with module.to(device)");
  }
  device_ = params_.empty() ? Device::cpu() : params_.front().tensor.device();
  if (device_.is_cuda()) comm_stream_ = cuda::Stream::create(device_.index);
  check_no_sync_batch_norm_on_group();
  check_models_match();
  check_low_precision_values();
  broadcast_state();

  plan({});
  for (std::size_t i = 0; i < params_.size(); ++i) {
    Param& p = params_[i];
    const int index = int(i);
    p.hook_id = autograd::register_post_accumulate_grad_hook(p.tensor, [this, index](const Tensor&) { on_grad_ready(index); });
  }
  reset_iteration();

  if (options_.agree_found_inf) {
    amp::NonfiniteReducer reducer;
    reducer.count = [this](int64_t local) {
      int64_t agreed = local;
      run_comm([&] {
        Tensor t = from_vector<int64_t>({local}, {1}).to(device_);  // [1] i64
        comm_->all_reduce(t, ReduceOp::Max);
        agreed = t.to(Device::cpu()).data<int64_t>()[0];
      });
      return agreed;
    };
    // The device path (a CUDA GradScaler's flag, NCCL): the all-reduce is enqueued on DDP's stream
    // after the unscale kernels, the caller's stream waits for it there, and the host waits for
    // nothing.
    reducer.flag = [this](Tensor flag) {
      run_comm([&] { comm_->all_reduce(flag, ReduceOp::Max); });  // [1] f32, in place
    };
    reducer_handle_ = amp::push_nonfinite_reducer(std::move(reducer));
  }
}

DistributedDataParallel::~DistributedDataParallel() {
  for (Param& p : params_) autograd::remove_post_accumulate_grad_hook(p.tensor, p.hook_id);
  if (reducer_handle_ >= 0) amp::remove_nonfinite_reducer(reducer_handle_);
}

void DistributedDataParallel::check_no_sync_batch_norm_on_group() const {
  for (const auto& [name, m] : module_->named_modules()) {
    const auto* bn = dynamic_cast<const nn::BatchNorm*>(m);
    if (bn == nullptr || bn->sync() == nullptr) continue;
    MG_CHECK(batch_norm_sync_group(*bn->sync()) != comm_.get(), NotImplementedError, kWho,
             ": the SyncBatchNorm '", name.empty() ? std::string("(the module)") : name,
             "' communicates on the group this DistributedDataParallel reduces gradients on (its ",
             comm_->backend(), " group cannot make a private one with new_group); its backward all_reduce would "
             "run on the training thread while the communication thread uses the group",
             "\n  hint: give SyncBatchNorm and DistributedDataParallel separate groups, or use a Gloo or NCCL "
             "group, from which DistributedDataParallel makes its own");
  }
}

// Compares the ranks' parameter and buffer lists (and the optimizers' master weights, which
// broadcast_state sends from rank 0 too) before anything is broadcast.
void DistributedDataParallel::check_models_match() {
  std::vector<std::string> lines = describe_model(module_->named_parameters(), module_->named_buffers());
  // Each master named by its model parameter: equal counts and sizes are not enough (a
  // ZeroRedundantOptimizer's shards can have both and still hold different parameters).
  std::unordered_map<const TensorImpl*, std::string> names;
  for (const auto& [name, t] : module_->named_parameters()) names.emplace(t.impl(), name);
  for (std::size_t k = 0; k < options_.optimizers.size(); ++k) {
    const optim::Optimizer& opt = *options_.optimizers[k];
    const std::string who = "optimizer " + std::to_string(k) + " (" + opt.name() + ")";
    lines.push_back(who + ": " + std::to_string(opt.master_pairs().size()) + " f32 master weights");
    for (const optim::MasterPair& m : opt.master_pairs()) {
      const auto it = names.find(m.model.impl());
      lines.push_back(who + ": the master of parameter '" + (it == names.end() ? std::string("(not in the model)") : it->second) +
                      "'");
    }
  }
  std::string report;
  run_comm([&] { report = compare_across_ranks(*comm_, device_, lines, int64_t(params_.size()), "trainable parameters"); });
  if (report.empty()) return;
  MG_THROW(distributed::DistributedError, kWho, ": rank ", comm_->rank(),
           ": the ranks' models differ (parameters and buffers must have the same names, shapes and dtypes in the "
           "same order); nothing was broadcast:",
           report,
           "\n  hint: build the same model on every rank (same configuration; amp::initialize at the same opt level "
           "before wrapping); a ZeroRedundantOptimizer's local() holds its rank's shard only: leave it out of "
           "DdpOptions::optimizers");
}

// Without optimizers to broadcast masters from, f16/bf16 parameters must already agree: a
// rank's O2 masters were made from its own weights, and rank 0's rounded copies cannot fix them.
void DistributedDataParallel::check_low_precision_values() {
  bool low = false;
  for (const Param& p : params_) low = low || is_low_precision(p.tensor.dtype());
  if (!low || !options_.optimizers.empty()) return;
  uint64_t h = 1469598103934665603ull;
  for (const Param& p : params_) {
    const Tensor c = p.tensor.to(Device::cpu()).contiguous();  // (a device model: one copy to the host, once)
    const auto* bytes = static_cast<const unsigned char*>(c.data_ptr());
    for (std::size_t i = 0; i < std::size_t(c.numel()) * c.element_size(); ++i) h = (h ^ bytes[i]) * 1099511628211ull;
  }
  Tensor all;
  run_comm([&] { all = comm_->all_gather(from_vector<int64_t>({int64_t(h >> 1)}, {1}).to(device_)).to(Device::cpu()); });  // [W, 1] i64
  std::vector<int> differ;
  for (int r = 1; r < comm_->world_size(); ++r) {
    if (all.data<int64_t>()[r] != all.data<int64_t>()[0]) differ.push_back(r);
  }
  if (differ.empty()) return;
  std::ostringstream ranks;
  for (std::size_t k = 0; k < differ.size(); ++k) ranks << (k ? ", " : "") << differ[k];
  MG_THROW(distributed::DistributedError, kWho, ": rank ", comm_->rank(),
           ": the model has f16/bf16 parameters whose values differ from rank 0's on rank(s) ", ranks.str(),
           ", and no optimizer was given whose f32 master weights could be broadcast with them",
           "\n  hint: pass DdpOptions{.optimizers = {&opt}} (O2 master weights), or seed every rank alike before "
           "building the model");
}

void DistributedDataParallel::broadcast_state() {
  NoGradGuard no_grad;
  run_comm([&] {
    // Every parameter, frozen ones included (as PyTorch's DDP): a frozen weight that differs
    // between ranks would make their gradients differ too. Each once (shared parameters).
    std::unordered_set<const TensorImpl*> seen;
    for (auto& [name, t] : module_->named_parameters()) {
      if (seen.insert(t.impl()).second) comm_->broadcast(t, 0);
    }
    for (auto& [name, b] : module_->named_buffers()) comm_->broadcast(b, 0);
    for (optim::Optimizer* opt : options_.optimizers) {
      for (const optim::MasterPair& m : opt->master_pairs()) {
        Tensor master = m.master;
        comm_->broadcast(master, 0);
      }
    }
  });
}

void DistributedDataParallel::sync_buffers() {
  NoGradGuard no_grad;
  run_comm([&] {
    for (auto& [name, b] : module_->named_buffers()) comm_->broadcast(b, 0);
  });
}

void DistributedDataParallel::submit_comm(std::function<void()> job) {
  if (!device_.is_cuda()) {
    worker_.submit(std::move(job));
    return;
  }
  // The job's collectives go on DDP's own stream, after everything queued so far on the caller's
  // current stream (the kernels that wrote their inputs): later backward kernels on the caller's
  // stream overlap them on the device. One event per job, recorded here on the caller's thread.
  auto inputs_ready = std::make_shared<cuda::Event>(/*timing=*/false);
  inputs_ready->record(cuda::current_stream(device_.index));
  worker_.submit([this, inputs_ready, job = std::move(job)] {
    inputs_ready->block(comm_stream_);
    cuda::StreamGuard on_comm_stream(comm_stream_);
    job();
  });
}

void DistributedDataParallel::wait_comm() {
  worker_.wait();
  if (!device_.is_cuda()) return;
  // Work queued next on the caller's stream (the copies back into .grad, the optimizer, the next
  // forward) waits on the device for the collectives; the host does not wait.
  cuda::Event done(/*timing=*/false);
  done.record(comm_stream_);
  done.block(cuda::current_stream(device_.index));
}

void DistributedDataParallel::run_comm(std::function<void()> job) {
  submit_comm(std::move(job));
  wait_comm();
}

void DistributedDataParallel::plan(const std::vector<int>& order) {
  std::vector<BucketParam> sizes;
  for (const Param& p : params_) sizes.push_back({.numel = p.tensor.numel(), .dtype = p.tensor.dtype()});
  const BucketPlan plan = plan_buckets(sizes, options_.bucket_cap_bytes, options_.reduce_dtype, order);
  buckets_.clear();
  for (const BucketLayout& layout : plan.buckets) {
    buckets_.push_back({.layout = layout, .flat = zeros({layout.numel}, {.dtype = layout.comm_dtype, .device = device_})});
  }
  for (std::size_t i = 0; i < params_.size(); ++i) {
    Param& p = params_[i];
    p.bucket = plan.bucket_of[i];
    p.offset = buckets_[std::size_t(p.bucket)].layout.offsets[std::size_t(plan.slot_of[i])];
  }
}

// After the first synchronised backward: the buckets again, in the order the gradients arrived
// (parameters that got none last, in reverse registration order). Rank 0's order is broadcast, so
// every rank buckets alike even where its hooks fired in another order.
void DistributedDataParallel::rebuild_buckets() {
  rebuilt_ = true;
  const std::size_t n = params_.size();
  std::vector<bool> arrived(n, false);
  std::vector<int64_t> order;
  for (int i : arrival_) {
    if (!arrived[std::size_t(i)]) order.push_back(i);
    arrived[std::size_t(i)] = true;
  }
  for (int i = int(n) - 1; i >= 0; --i) {
    if (!arrived[std::size_t(i)]) order.push_back(i);
  }
  Tensor agreed = from_vector<int64_t>(order, {int64_t(n)});  // [P] i64
  run_comm([&] {
    Tensor on_device = agreed.to(device_);
    comm_->broadcast(on_device, 0);
    agreed = on_device.to(Device::cpu());
  });
  plan(std::vector<int>(agreed.data<int64_t>(), agreed.data<int64_t>() + n));
}

std::vector<std::vector<std::string>> DistributedDataParallel::bucket_names() const {
  std::vector<std::vector<std::string>> out;
  for (const Bucket& b : buckets_) {
    out.emplace_back();
    for (int i : b.layout.params) out.back().push_back(params_[std::size_t(i)].name);
  }
  return out;
}

double DistributedDataParallel::since_start() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

void DistributedDataParallel::reset_iteration() {
  for (Param& p : params_) p.ready = false;
  arrival_.clear();
  for (Bucket& b : buckets_) {
    b.pending = int(b.layout.params.size());
    b.launched = false;
  }
  next_launch_ = 0;
  in_iteration_ = false;
}

// The gradient hook (autograd thread, inside backward): the first one of a backward opens the
// iteration and queues the end callback.
void DistributedDataParallel::on_grad_ready(int index) {
  if (!sync_) return;  // no_sync: accumulate locally
  // The engine records backward ops only under create_graph: the averaged gradient written back
  // into .grad would carry no graph, so a double backward would silently differentiate only
  // this rank's part.
  MG_CHECK(!GradMode::is_enabled(), NotImplementedError, kWho,
           ": backward with create_graph = true (double backward) is not supported; the averaged gradients would "
           "not be differentiable",
           "\n  hint: take the gradient penalty's gradients with autograd::grad(..., create_graph = true), which "
           "runs no DDP hook, and call backward() without create_graph on the total loss");
  if (!in_iteration_) {
    in_iteration_ = true;
    start_ = std::chrono::steady_clock::now();
    timeline_ = {};
    timeline_.buckets.reserve(buckets_.size());  // launch() hands the worker references into it
    autograd::queue_callback([this] { finish_backward(); });
  }
  Param& p = params_[std::size_t(index)];
  MG_CHECK(!p.ready, Error, kWho, ": parameter '", p.name, "' received two gradients in one backward");
  const Tensor g = p.tensor.grad();
  MG_CHECK(g.dtype() == p.tensor.dtype() && g.dtype() == buckets_[std::size_t(p.bucket)].layout.grad_dtype, DTypeError,
           kWho, ": parameter '", p.name, "' is ", describe(p.tensor), " with a ", dtype_name(g.dtype()),
           " gradient, but it was ", dtype_name(buckets_[std::size_t(p.bucket)].layout.grad_dtype), " when wrapped",
           "\n  hint: call amp::initialize (or cast the model) before wrapping it in DistributedDataParallel");
  copy_into_bucket(p, g);
  p.ready = true;
  if (!rebuilt_ && options_.rebuild_buckets) arrival_.push_back(index);
  if (--buckets_[std::size_t(p.bucket)].pending == 0) launch_ready_buckets();
}

void DistributedDataParallel::copy_into_bucket(Param& p, const Tensor& grad) {
  NoGradGuard no_grad;
  Tensor dst = buckets_[std::size_t(p.bucket)].flat.narrow(0, p.offset, p.tensor.numel());
  if (grad.defined()) dst.copy_(grad.reshape({p.tensor.numel()}));
  else dst.zero_();
}

// Launches, in bucket order, every bucket whose gradients are all in: ranks launch the same
// buckets in the same order whatever order their hooks fire in.
void DistributedDataParallel::launch_ready_buckets() {
  while (next_launch_ < int(buckets_.size()) && buckets_[std::size_t(next_launch_)].pending == 0) {
    launch(next_launch_++, /*in_backward=*/true);
  }
}

void DistributedDataParallel::launch(int index, bool in_backward) {
  Bucket& b = buckets_[std::size_t(index)];
  b.launched = true;
  const std::size_t slot = timeline_.buckets.size();
  timeline_.buckets.push_back({.bytes = b.layout.numel * int64_t(dtype_size(b.layout.comm_dtype)),
                               .num_params = int(b.layout.params.size()),
                               .ready_s = since_start(),
                               .launched_in_backward = in_backward});
  submit_comm([this, index, slot] {
    BucketTiming& t = timeline_.buckets[slot];  // the vector does not grow while jobs run (reserved)
    t.started_s = since_start();
    Tensor& flat = buckets_[std::size_t(index)].flat;
    if (is_low_precision(flat.dtype())) {
      // Divided by W first, then summed, as PyTorch's DDP: the sum of W f16 gradients can
      // overflow where their average does not (3 ranks x 40000 -> inf; their mean is 40000).
      NoGradGuard no_grad;
      flat.div_(double(comm_->world_size()));
      comm_->all_reduce(flat, ReduceOp::Sum);
    } else {
      comm_->all_reduce(flat, ReduceOp::Avg);
    }
    t.finished_s = since_start();
  });
}

// The end-of-backward callback (autograd thread): launch what is left, agree on which
// parameters had gradients, wait, and write the averages back.
void DistributedDataParallel::finish_backward() {
  struct Reset {  // the iteration ends however this function leaves
    DistributedDataParallel& d;
    ~Reset() { d.reset_iteration(); }
  } reset{*this};
  NoGradGuard no_grad;
  timeline_.backward_end_s = since_start();
  const int64_t n = int64_t(params_.size());
  // Byte per parameter: bit 0 = got a gradient in this backward, bit 1 = has a .grad now.
  Tensor mask = zeros({n}, {.dtype = DType::U8});  // [P] u8
  uint8_t* m = mask.data<uint8_t>();
  for (int64_t i = 0; i < n; ++i) {
    const Param& p = params_[std::size_t(i)];
    m[i] = uint8_t((p.ready ? 1 : 0) | (p.tensor.grad().defined() ? 2 : 0));
  }
  // Every rank launches every bucket (a missing gradient contributes its current .grad or zeros),
  // then the mask: the same collectives in the same order on every rank.
  for (int b = next_launch_; b < int(buckets_.size()); ++b) {
    for (int i : buckets_[std::size_t(b)].layout.params) {
      Param& p = params_[std::size_t(i)];
      if (!p.ready) copy_into_bucket(p, p.tensor.grad());
    }
    launch(b, /*in_backward=*/false);
  }
  next_launch_ = int(buckets_.size());
  Tensor masks;
  // (On a device the copy back to the host waits for the buckets queued before it on DDP's
  // stream: the one synchronisation of a DDP backward, as the presence check needs the answer on
  // the host.)
  submit_comm([&] { masks = comm_->all_gather(mask.to(device_)).to(Device::cpu()); });  // [W, P] u8
  // broadcast_buffers: rank 0's buffers for every rank's next forward (nothing writes them now:
  // forward is over and backward does not touch them).
  if (options_.broadcast_buffers) {
    submit_comm([this] {
      for (auto& [name, b] : module_->named_buffers()) comm_->broadcast(b, 0);
    });
  }
  try {
    wait_comm();
  } catch (const Error& e) {
    MG_THROW(distributed::DistributedError, kWho, ": the gradient all-reduce failed: ", e.what());
  }
  const int world = comm_->world_size();
  const uint8_t* all = masks.data<uint8_t>();
  std::vector<uint8_t> any_grad(std::size_t(n), 0);
  std::ostringstream missing;
  int num_missing = 0;
  for (int64_t i = 0; i < n; ++i) {
    std::vector<int> ranks;
    for (int r = 0; r < world; ++r) {
      const uint8_t v = all[r * n + i];
      if (v & 2) any_grad[std::size_t(i)] = 1;
      if (!(v & 1)) ranks.push_back(r);
    }
    if (ranks.empty() || options_.find_unused_parameters) continue;
    if (++num_missing <= 10) {
      missing << "\n  '" << params_[std::size_t(i)].name << "' " << describe(params_[std::size_t(i)].tensor) << " on rank";
      if (ranks.size() > 1) missing << "s";
      for (std::size_t k = 0; k < ranks.size(); ++k) missing << (k ? ", " : " ") << ranks[k];
    }
  }
  if (num_missing > 0) {
    MG_THROW(distributed::DistributedError, kWho, ": rank ", comm_->rank(), ": ", num_missing,
             " parameter(s) received no gradient in this backward; the gradients were not averaged:", missing.str(),
             num_missing > 10 ? "\n  ..." : "",
             "\n  hint: pass DdpOptions{.find_unused_parameters = true} when some parameters are unused in a step, "
             "or set requires_grad_(false) on parameters that are never trained");
  }
  for (int64_t i = 0; i < n; ++i) {
    Param& p = params_[std::size_t(i)];
    if (!any_grad[std::size_t(i)]) continue;  // no rank has a gradient: keep none
    const Tensor avg = buckets_[std::size_t(p.bucket)].flat.narrow(0, p.offset, p.tensor.numel()).view(p.tensor.shape());
    Tensor g = p.tensor.grad();
    if (g.defined() && !g.grad_fn() && is_dense_layout(g)) {
      g.copy_(avg);  // element by element: any layout
    } else {
      p.tensor.set_grad(in_layout_of(avg.to(p.tensor.dtype()).clone(), p.tensor));  // the parameter's layout
    }
  }
  timeline_.reduced_s = since_start();
  ++reduced_backwards_;
  if (options_.rebuild_buckets && !rebuilt_) rebuild_buckets();
}

}  // namespace mg::distributed
