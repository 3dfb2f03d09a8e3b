// SyncBatchNorm (sync_batch_norm.h): the forward's statistics gathered and combined by Chan's
// formula, the normalisation done by the batch_norm kernel with those statistics, and the
// backward as an autograd node of its own whose two per-channel sums are all-reduced.
// Decision: the per-rank statistics and the backward are written with public ops (mean, var,
// sum, elementwise), so they run on any device the ops run on; only the [2C+1] and [2C] vectors
// travel, through the CPU when the group is Gloo's.
#include "mixgrad/distributed/sync_batch_norm.h"

#include <cmath>
#include <unordered_set>
#include <vector>

#include "mixgrad/autograd/grad_mode.h"
#include "mixgrad/autograd/node.h"
#include "mixgrad/autograd/saved_tensor.h"
#include "mixgrad/core/autocast_state.h"
#include "mixgrad/core/factory.h"
#include "mixgrad/ops/norm.h"
#include "mixgrad/ops/op_node.h"
#include "mixgrad/ops/ops.h"

namespace mg::distributed {
namespace {

// Statistics dtype: f64 for f64 inputs, f32 otherwise (the accumulation dtype of docs/numerics.md).
DType stat_dtype(DType x) { return x == DType::F64 ? DType::F64 : DType::F32; }

// All dims but 1 of an [N, C, ...] tensor.
std::vector<int64_t> reduce_dims(int64_t nd) {
  std::vector<int64_t> d{0};
  for (int64_t i = 2; i < nd; ++i) d.push_back(i);
  return d;
}
// A [C] tensor viewed as [1, C, 1, ...] to broadcast over [N, C, ...].
Tensor channel_view(const Tensor& p, int64_t nd) {
  Shape s(std::size_t(nd), 1);
  s[1] = p.numel();
  return reshape(p, s);
}
// Where `pg` can reduce a tensor that lives on `device`: the CPU for Gloo.
Device comm_device(const ProcessGroup& pg, Device device) {
  return pg.backend() == "gloo" ? Device::cpu() : device;
}

// backward of sync_batch_norm. Inputs (edges): x [N, C, ...], weight [C], bias [C] (each maybe
// absent). With xmu = x - mean, Σ over this rank's examples and Σ_g over every rank's
// (all-reduced), n the global count per channel:
//   dx      = (dy - Σ_g dy / n - xmu · invstd² · Σ_g(dy · xmu) / n) · invstd · weight
//   dweight = Σ dy · xmu · invstd,   dbias = Σ dy      (this rank's share)
// in f32 (f64 for f64), dx rounded once to x's dtype.
class SyncBatchNormNode final : public autograd::Node {
 public:
  SyncBatchNormNode(std::shared_ptr<ProcessGroup> pg, const Tensor& x, const Tensor& weight, Tensor mean,
                    Tensor invstd, double count, std::vector<bool> needs, std::vector<TensorMeta> input_meta,
                    TensorMeta output_meta)
      : Node(1), pg_(std::move(pg)), x_(x, /*is_output=*/false), mean_(std::move(mean)),
        invstd_(std::move(invstd)), count_(count), needs_(std::move(needs)), input_meta_(std::move(input_meta)),
        output_meta_(std::move(output_meta)) {
    if (weight.defined()) weight_ = autograd::SavedTensor(weight, /*is_output=*/false);
  }

  Tensors apply(Tensors&& grads) override {
    MG_CHECK(!GradMode::is_enabled(), NotImplementedError,
             "SyncBatchNorm: double backward (create_graph = true) is not supported: the all-reduced "
             "sums of its backward are not differentiable",
             "\n  hint: compute gradient penalties without SyncBatchNorm (convert_sync_batchnorm(model, nullptr))");
    fill_missing_grads(grads, {output_meta_});
    NoGradGuard no_grad;
    AutocastOffGuard autocast_off;
    const Tensor x = x_.unpack(name());
    const Tensor w = weight_.is_saved() ? weight_.unpack(name()) : Tensor();
    const DType a = stat_dtype(x.dtype());
    const int64_t nd = x.dim(), c = x.size(1);
    const std::vector<int64_t> red = reduce_dims(nd);
    const Tensor dy = to(grads[0], a);                // [N, C, ...] in A
    const Tensor xmu = to(x, a) - channel_view(mean_, nd);  // [N, C, ...] in A
    const Tensor sum_dy = sum(dy, red);               // [C], Σ by the rule, in A
    const Tensor sum_dy_xmu = sum(dy * xmu, red);     // [C], Σ by the rule, in A
    Tensors out(3);
    if (needs_[0]) {
      // The two global sums: one all_reduce of [2C] (ring order, the same bits on every rank).
      const Device dev = comm_device(*pg_, x.device());
      Tensor both = to(cat({sum_dy, sum_dy_xmu}), dev);
      if (both.is_same(sum_dy) || both.is_same(sum_dy_xmu)) both = both.clone();
      pg_->all_reduce(both, ReduceOp::Sum);
      both = to(both, x.device());
      const Tensor mean_dy = narrow(both, 0, 0, c) / count_;             // [C]
      const Tensor mean_dy_xmu = narrow(both, 0, c, c) / count_;         // [C]
      const Tensor k = invstd_ * invstd_ * mean_dy_xmu;                  // [C]
      const Tensor scale = w.defined() ? invstd_ * to(w, a) : invstd_;   // [C]
      const Tensor dx = (dy - channel_view(mean_dy, nd) - xmu * channel_view(k, nd)) * channel_view(scale, nd);
      out[0] = grad_for_input(dx, input_meta_[0]);
    }
    if (needs_[1]) out[1] = grad_for_input(sum_dy_xmu * invstd_, input_meta_[1]);
    if (needs_[2]) out[2] = grad_for_input(sum_dy, input_meta_[2]);
    return out;
  }
  std::string name() const override { return "sync_batch_norm_backward"; }
  void release_saved() override {
    x_.release();
    weight_.release();
    mark_released();
  }

 private:
  std::shared_ptr<ProcessGroup> pg_;
  autograd::SavedTensor x_, weight_;
  Tensor mean_, invstd_;  // [C] in A: the global statistics the forward normalised with
  double count_;          // values per channel over all ranks
  std::vector<bool> needs_;
  std::vector<TensorMeta> input_meta_;
  TensorMeta output_meta_;
};

// Global per-channel statistics combined from every rank's (count, mean, M2) by Chan's formula,
// in f64 and in rank order:  n = na + nb,  d = mb - ma,  m = ma + d·nb/n,  M2 = M2a + M2b + d²·na·nb/n.
struct GlobalStats {
  double count = 0;
  std::vector<double> mean, m2;  // [C]
};
GlobalStats combine(const Tensor& gathered, int64_t c) {  // gathered: [W, 2C+1] f64 cpu
  const Tensor g = gathered.contiguous();
  const double* p = g.data<double>();
  GlobalStats s{.mean = std::vector<double>(std::size_t(c), 0.0), .m2 = std::vector<double>(std::size_t(c), 0.0)};
  for (int64_t r = 0; r < g.size(0); ++r) {
    const double* row = p + r * (2 * c + 1);
    const double nb = row[0];
    if (nb == 0) continue;
    const double n = s.count + nb;
    for (int64_t ch = 0; ch < c; ++ch) {
      const double mb = row[1 + ch], m2b = row[1 + c + ch];
      const double d = mb - s.mean[std::size_t(ch)];
      s.mean[std::size_t(ch)] += d * nb / n;
      s.m2[std::size_t(ch)] += m2b + d * d * s.count * nb / n;
    }
    s.count = n;
  }
  return s;
}

// running = (1 - momentum) · running + momentum · statistic, in f64, rounded once to the buffer's
// dtype (as the batch_norm kernel does); `stat` holds values already rounded to A.
void update_running(const Tensor& running, const std::vector<double>& stat, double momentum) {
  const Tensor old = running.to(DType::F64).to(Device::cpu()).contiguous();
  std::vector<double> v(stat.size());
  for (std::size_t ch = 0; ch < v.size(); ++ch) v[ch] = (1.0 - momentum) * old.data<double>()[ch] + momentum * stat[ch];
  NoGradGuard no_grad;
  Tensor dst = running;  // a handle on the buffer, updated in place
  dst.copy_(from_vector<double>(v, {int64_t(v.size())}).to(running.device()));
}

// Rounds f64 host values to A (f32 or f64), as a tensor [C] on `device`.
Tensor stat_tensor(const std::vector<double>& v, DType a, Device device) {
  return from_vector<double>(v, {int64_t(v.size())}).to(a).to(device);
}
std::vector<double> rounded(const std::vector<double>& v, DType a) {
  if (a == DType::F64) return v;
  std::vector<double> r(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) r[i] = double(float(v[i]));
  return r;
}

class ProcessGroupBatchNormSync final : public nn::BatchNormSync {
 public:
  explicit ProcessGroupBatchNormSync(std::shared_ptr<ProcessGroup> pg) : pg_(std::move(pg)) {}
  Tensor batch_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& running_mean,
                    const Tensor& running_var, double momentum, double eps) override {
    return sync_batch_norm(pg_, x, weight, bias, running_mean, running_var, momentum, eps);
  }
  std::string describe() const override {
    return str_cat("sync=", pg_->backend(), ":", pg_->world_size());
  }
  const std::shared_ptr<ProcessGroup>& group() const { return pg_; }

 private:
  std::shared_ptr<ProcessGroup> pg_;
};

}  // namespace

Tensor sync_batch_norm(const std::shared_ptr<ProcessGroup>& pg, const Tensor& x, const Tensor& weight,
                       const Tensor& bias, const Tensor& running_mean, const Tensor& running_var, double momentum,
                       double eps) {
  if (!pg || pg->world_size() == 1) {
    return mg::batch_norm(x, weight, bias, running_mean, running_var, /*training=*/true, momentum, eps);
  }
  MG_CHECK(x.defined() && x.dim() >= 2 && is_floating(x.dtype()), ShapeError,
           "SyncBatchNorm: expected a floating input [N, C, ...], got ",
           x.defined() ? describe(x) : std::string("undefined"));
  MG_CHECK(running_mean.defined() == running_var.defined(), Error,
           "SyncBatchNorm: pass both running_mean and running_var or neither");
  const int64_t nd = x.dim(), c = x.size(1);
  const DType a = stat_dtype(x.dtype());
  const int64_t n_local = c == 0 ? 0 : x.numel() / c;
  Tensor y, mean_t, invstd_t;
  GlobalStats g;
  {
    NoGradGuard no_grad;
    AutocastOffGuard autocast_off;
    // This rank's count, mean and M2 per channel: [n, mean (C), M2 (C)] in f64 (exact widenings of A).
    Tensor local = zeros({2 * c + 1}, {.dtype = DType::F64});
    if (n_local > 0) {
      const Tensor xa = to(x, a);
      const std::vector<int64_t> red = reduce_dims(nd);
      const Tensor m = mean(xa, red);               // [C], Σx by the rule, in A
      const Tensor v = var(xa, red, /*correction=*/0.0);  // [C], Chan's leaves over the rule's tree, in A
      local = cat({full({1}, double(n_local), {.dtype = DType::F64}), to(to(m, DType::F64), Device::cpu()),
                   to(to(v, DType::F64), Device::cpu()) * double(n_local)});
    }
    const Tensor gathered = pg->all_gather(to(local, comm_device(*pg, x.device())));  // [W, 2C+1]
    g = combine(to(gathered, Device::cpu()), c);
    MG_CHECK(g.count > 1, ShapeError, "SyncBatchNorm: expected more than 1 value per channel over all ",
             pg->world_size(), " ranks' batches, got ", g.count, " (this rank's input ", describe(x), ")",
             "\n  hint: use larger batches or call the layer in eval mode");
    const std::size_t nc = static_cast<std::size_t>(c);
    std::vector<double> var_b(nc), var_u(nc), invstd(nc);
    for (int64_t ch = 0; ch < c; ++ch) {
      var_b[std::size_t(ch)] = g.m2[std::size_t(ch)] / g.count;
      var_u[std::size_t(ch)] = g.m2[std::size_t(ch)] / (g.count - 1);
    }
    mean_t = stat_tensor(g.mean, a, x.device());
    const Tensor var_t = stat_tensor(var_b, a, x.device());
    const std::vector<double> var_a = rounded(var_b, a);
    for (int64_t ch = 0; ch < c; ++ch) invstd[std::size_t(ch)] = 1.0 / std::sqrt(var_a[std::size_t(ch)] + eps);
    invstd_t = stat_tensor(invstd, a, x.device());
    // The kernel normalises with the global statistics passed as "running" ones (eval form):
    // (x - mean) / sqrt(var + eps) · weight + bias in A, rounded once to x's dtype.
    y = mg::batch_norm(x, weight, bias, mean_t, var_t, /*training=*/false, 0.0, eps);
    if (running_mean.defined()) {
      update_running(running_mean, rounded(g.mean, a), momentum);
      update_running(running_var, rounded(var_u, a), momentum);
    }
  }
  const Tensors inputs{x, weight, bias};
  std::vector<bool> needs;
  bool any = false;
  for (const Tensor& t : inputs) {
    needs.push_back(GradMode::is_enabled() && t.defined() && t.requires_grad());
    any = any || needs.back();
  }
  if (!any) return y;
  std::vector<TensorMeta> meta;
  for (const Tensor& t : inputs) meta.push_back({t.defined() ? t.shape() : Shape{}, t.defined() ? t.dtype() : a});
  auto node = std::make_shared<SyncBatchNormNode>(pg, x, weight, mean_t, invstd_t, g.count, needs, meta,
                                                  TensorMeta{y.shape(), y.dtype()});
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    node->next_edges.push_back(needs[i] ? autograd::gradient_edge(inputs[i]) : autograd::Edge{});
  }
  autograd::set_history({y}, node);
  return y;
}

ProcessGroup* batch_norm_sync_group(const nn::BatchNormSync& sync) {
  const auto* s = dynamic_cast<const ProcessGroupBatchNormSync*>(&sync);
  return s ? s->group().get() : nullptr;
}

std::shared_ptr<nn::BatchNormSync> make_batch_norm_sync(std::shared_ptr<ProcessGroup> pg) {
  MG_CHECK(pg != nullptr, Error, "make_batch_norm_sync: the process group is null");
  return std::make_shared<ProcessGroupBatchNormSync>(std::move(pg));
}

SyncBatchNorm::SyncBatchNorm(Options options, std::shared_ptr<ProcessGroup> pg)
    : nn::BatchNorm("SyncBatchNorm", options, {2, 3, 4, 5}) {
  if (pg) set_sync(make_batch_norm_sync(std::move(pg)));
}

int64_t convert_sync_batchnorm(nn::Module& model, std::shared_ptr<ProcessGroup> pg) {
  const std::shared_ptr<nn::BatchNormSync> sync = pg ? make_batch_norm_sync(std::move(pg)) : nullptr;
  int64_t converted = 0;
  std::unordered_set<const nn::Module*> seen;  // a layer registered under two parents counts once
  // Depth first through the children (shared handles: the module tree owns its layers).
  auto visit = [&](auto&& self, nn::Module& m) -> void {
    if (!seen.insert(&m).second) return;
    if (auto* bn = dynamic_cast<nn::BatchNorm*>(&m)) {
      bn->set_sync(sync);
      ++converted;
    }
    for (const auto& child : m.children()) self(self, *child);
  };
  visit(visit, model);
  return converted;
}

}  // namespace mg::distributed
