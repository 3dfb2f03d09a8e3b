#include "mixgrad/distributed/zero.h"

#include <algorithm>
#include <cmath>
#include <exception>
#include <map>
#include <numeric>
#include <set>
#include <string>

#include "mixgrad/autograd/grad_mode.h"
#include "mixgrad/core/factory.h"
#include "mixgrad/distributed/error.h"
#include "mixgrad/distributed/rank_agreement.h"
#include "mixgrad/distributed/state_dict_broadcast.h"
#include "mixgrad/ops/ops.h"
#include "mixgrad/optim/master_grad_check.h"

namespace mg::distributed {

namespace {

constexpr const char* kWho = "ZeroRedundantOptimizer";

// The positions (over all parameters) that `rank` owns, in order: its optimizer's parameters().
std::vector<int64_t> positions_of(const std::vector<int>& owners, int rank) {
  std::vector<int64_t> out;
  for (std::size_t i = 0; i < owners.size(); ++i) {
    if (owners[i] == rank) out.push_back(int64_t(i));
  }
  return out;
}

// Splits "state.<i>.<rest>" / "master.<i>" into ("state." or "master.", i, ".<rest>" or "");
// false when the key has neither form.
bool parse_position_key(const std::string& key, std::string* head, int64_t* index, std::string* tail) {
  if (key.rfind("state.", 0) == 0) *head = "state.";
  else if (key.rfind("master.", 0) == 0) *head = "master.";
  else return false;
  const std::size_t dot = key.find('.', head->size());
  if (head->front() == 'm' && dot != std::string::npos) return false;
  if (head->front() == 's' && dot == std::string::npos) return false;
  const std::string num = key.substr(head->size(), dot == std::string::npos ? std::string::npos : dot - head->size());
  if (num.empty() || num.size() > 18 || !std::all_of(num.begin(), num.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return false;
  *index = std::strtoll(num.c_str(), nullptr, 10);
  *tail = dot == std::string::npos ? "" : key.substr(dot);
  return true;
}

// The key with its position mapped through `map`; false when the position is not in it.
bool remap_position_key(const std::string& key, const std::map<int64_t, int64_t>& map, std::string* out) {
  std::string head, tail;
  int64_t i = -1;
  if (!parse_position_key(key, &head, &i, &tail)) return false;
  const auto it = map.find(i);
  if (it == map.end()) return false;
  *out = head + std::to_string(it->second) + tail;
  return true;
}

std::string join(const std::vector<int64_t>& v) {
  std::string s;
  for (std::size_t k = 0; k < v.size(); ++k) s += (k ? "," : "") + std::to_string(v[k]);
  return s;
}

}  // namespace

// Collective: the lowest rank whose `failed` is set, or -1 when none is.
int ZeroRedundantOptimizer::first_failed_rank(bool failed) const {
  const int world = group_->world_size();
  Tensor t = from_vector<int64_t>({failed ? group_->rank() : world}, {1}).to(comm_device());
  group_->all_reduce(t, ReduceOp::Min);
  const int64_t r = t.to(Device::cpu()).data<int64_t>()[0];
  return r < world ? int(r) : -1;
}

// After a rank-local step that may throw: every rank learns whether any threw, so all go on or
// all throw (the rank's own error where it threw, a DistributedError naming that rank elsewhere).
void ZeroRedundantOptimizer::throw_if_any_failed(const std::exception_ptr& error, const char* what) const {
  const int failed = first_failed_rank(error != nullptr);
  if (failed < 0) return;
  if (error) std::rethrow_exception(error);
  MG_THROW(distributed::DistributedError, kWho, ": rank ", group_->rank(), ": ", what, " failed on rank ", failed,
           " (its error says why); nothing was changed here either");
}

std::vector<int> partition_parameters(const std::vector<int64_t>& numels, int world_size,
                                      const std::vector<bool>& trainable) {
  MG_CHECK(world_size >= 1, Error, "partition_parameters: world_size must be >= 1, got ", world_size);
  MG_CHECK(trainable.empty() || trainable.size() == numels.size(), Error, "partition_parameters: ", trainable.size(),
           " trainable flags for ", numels.size(), " parameters");
  const auto is_trainable = [&](std::size_t i) { return trainable.empty() || trainable[i]; };
  std::vector<std::size_t> order(numels.size());
  std::iota(order.begin(), order.end(), std::size_t(0));
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    if (is_trainable(a) != is_trainable(b)) return is_trainable(a);  // trainable ones first
    return numels[a] > numels[b];
  });
  std::vector<int64_t> elements(std::size_t(world_size), 0), count(std::size_t(world_size), 0);
  std::vector<int> owners(numels.size(), 0);
  for (std::size_t i : order) {
    int best = 0;
    for (int r = 1; r < world_size; ++r) {
      const auto key = [&](int q) { return std::pair(elements[std::size_t(q)], count[std::size_t(q)]); };
      if (key(r) < key(best)) best = r;
    }
    owners[i] = best;
    elements[std::size_t(best)] += numels[i];
    ++count[std::size_t(best)];
  }
  return owners;
}

ZeroRedundantOptimizer::ZeroRedundantOptimizer(const Tensors& params, std::shared_ptr<ProcessGroup> group, Factory make,
                                               ZeroOptions options)
    : ZeroRedundantOptimizer(std::vector<optim::ParamGroupSpec>{{.params = params}}, std::move(group), std::move(make),
                             options) {}

ZeroRedundantOptimizer::ZeroRedundantOptimizer(const std::vector<optim::ParamGroupSpec>& groups,
                                               std::shared_ptr<ProcessGroup> group, Factory make, ZeroOptions options)
    : specs_(groups), group_(std::move(group)), options_(options) {
  MG_CHECK(group_ != nullptr, Error, kWho, ": the process group is null");
  MG_CHECK(static_cast<bool>(make), Error, kWho, ": the optimizer factory is empty");
  for (const optim::ParamGroupSpec& g : specs_) params_.insert(params_.end(), g.params.begin(), g.params.end());
  // The ranks compare their parameters first (a collective every rank reaches), so that the
  // checks below, which follow from what was compared, throw on every rank alike.
  check_same_parameters();
  std::set<const TensorImpl*> seen;
  std::size_t position = 0;
  for (std::size_t g = 0; g < specs_.size(); ++g) {
    for (std::size_t k = 0; k < specs_[g].params.size(); ++k, ++position) {
      const Tensor& p = specs_[g].params[k];
      MG_CHECK(p.defined(), Error, kWho, ": parameter ", k, " of group ", g, " is undefined");
      MG_CHECK(p.is_floating_point() && p.is_leaf(), Error, kWho, ": parameter ", k, " of group ", g, " is ",
               describe(p), "; an optimizer takes floating leaf tensors");
      MG_CHECK(seen.insert(p.impl()).second, Error, kWho, ": parameter ", k, " of group ", g,
               " is given twice; a parameter belongs to one group once");
      MG_CHECK(p.device() == params_.front().device(), DeviceError, kWho, ": the parameters are on ",
               params_.front().device(), " and ", p.device(), "; one device per rank");
    }
  }
  const int world = group_->world_size(), rank = group_->rank();
  MG_CHECK(int64_t(params_.size()) >= world, Error, kWho, ": ", params_.size(),
           " parameters cannot be shared out over ", world, " ranks: each rank needs at least one",
           "\n  hint: use a plain optimizer (ZeRO saves nothing on so small a model)");
  std::vector<bool> trainable;
  for (const Tensor& p : params_) trainable.push_back(p.requires_grad());
  const auto n_trainable = std::count(trainable.begin(), trainable.end(), true);
  MG_CHECK(n_trainable >= world || n_trainable == int64_t(params_.size()), Error, kWho, ": ", n_trainable,
           " trainable parameters (of ", params_.size(), ") cannot be shared out over ", world,
           " ranks: a rank owning only frozen ones would have no gradient to step",
           "\n  hint: leave frozen parameters out of the optimizer, or use a plain optimizer");
  if (options_.broadcast_parameters) {
    NoGradGuard no_grad;
    for (Tensor& p : params_) group_->broadcast(p, 0);
  }

  std::vector<int64_t> numels;
  for (const Tensor& p : params_) numels.push_back(p.numel());
  owners_ = partition_parameters(numels, world, trainable);
  owned_ = positions_of(owners_, rank);

  // This rank's groups: every group, with its options and only the owned parameters.
  std::vector<optim::ParamGroupSpec> shard;
  position = 0;
  for (const optim::ParamGroupSpec& g : specs_) {
    optim::ParamGroupSpec s{.params = {}, .options = g.options};
    for (const Tensor& p : g.params) {
      if (owners_[position++] == rank) s.params.push_back(p);
    }
    shard.push_back(std::move(s));
  }
  // The factory and its result are checked on each rank, then the ranks agree before going on, so
  // an error on one rank (a factory that drops an empty group, say) is an error on all, not a
  // mismatch at the next collective.
  std::exception_ptr refused;
  try {
    local_ = make(shard);
    MG_CHECK(local_ != nullptr, Error, kWho, ": the optimizer factory returned null");
    const Tensors got = local_->parameters();
    bool same = got.size() == owned_.size() && local_->param_groups().size() == specs_.size();
    for (std::size_t k = 0; same && k < got.size(); ++k) same = got[k].is_same(params_[std::size_t(owned_[k])]);
    MG_CHECK(same, Error, kWho, ": the factory's ", local_->name(), " holds ", got.size(), " parameters in ",
             local_->param_groups().size(), " groups, not the ", owned_.size(), " of this rank's shard in ",
             specs_.size(), " groups as given",
             "\n  hint: pass the shard through unchanged: [](const auto& shard) { return "
             "std::make_unique<optim::SGD>(shard, options); }");
    MG_CHECK(!local_->has_master_weights(), Error, kWho, ": the factory's ", local_->name(),
             " already has master weights; call amp::initialize on local() after constructing the "
             "ZeroRedundantOptimizer");
  } catch (...) {
    refused = std::current_exception();
  }
  throw_if_any_failed(refused, "the optimizer factory");

  Tensors others;
  for (std::size_t i = 0; i < params_.size(); ++i) {
    if (owners_[i] != rank) others.push_back(params_[i]);
  }
  local_->set_zero_grad_also(std::move(others));  // local().zero_grad() clears every gradient DDP averages
  // Also after a step that threw on this rank: the other ranks wait in this broadcast, and all
  // end with the same parameters (this shard as the failed step left it); the error is this rank's.
  hook_ = local_->register_step_post_hook([this](optim::Optimizer&) { broadcast_parameters(); },
                                          /*also_after_error=*/true);
  {
    // Pushed above any earlier one and removed by handle in the destructor (amp/unscale.h), so
    // DistributedDataParallel and this object may go in either order.
    const std::shared_ptr<ProcessGroup> pg = group_;
    const Device device = comm_device();
    amp::NonfiniteReducer reducer;
    reducer.count = [pg, device](int64_t local) {
      Tensor t = from_vector<int64_t>({local}, {1}).to(device);  // [1] i64
      pg->all_reduce(t, ReduceOp::Max);
      return t.to(Device::cpu()).data<int64_t>()[0];
    };
    reducer.flag = [pg](Tensor flag) { pg->all_reduce(flag, ReduceOp::Max); };  // [1] f32, in place
    reducer_handle_ = amp::push_nonfinite_reducer(std::move(reducer));
  }
}

ZeroRedundantOptimizer::~ZeroRedundantOptimizer() {
  if (local_ && hook_ >= 0) local_->remove_step_post_hook(hook_);
  if (reducer_handle_ >= 0) amp::remove_nonfinite_reducer(reducer_handle_);
}

// The device of the first defined parameter (the CPU when there is none: the constructor refuses that).
Device ZeroRedundantOptimizer::comm_device() const {
  for (const Tensor& p : params_) {
    if (p.defined()) return p.device();
  }
  return Device::cpu();
}

// Every rank describes its groups and parameters (shapes, dtypes, devices, what the constructor
// refuses); the ranks must agree.
void ZeroRedundantOptimizer::check_same_parameters() const {
  std::vector<std::string> lines;
  std::map<const TensorImpl*, std::string> first;
  for (std::size_t g = 0; g < specs_.size(); ++g) {
    for (std::size_t k = 0; k < specs_[g].params.size(); ++k) {
      const Tensor& p = specs_[g].params[k];
      std::string line = "group " + std::to_string(g) + " parameter " + std::to_string(k) + " ";
      if (!p.defined()) {
        lines.push_back(line + "undefined");
        continue;
      }
      // (Not the device itself: each rank has its own GPU.)
      // requires_grad too: the partition places frozen parameters last, so the ranks must agree.
      line += shape_str(p.shape()) + " " + dtype_name(p.dtype()) + (p.is_leaf() ? "" : " (not a leaf)") +
              (p.requires_grad() ? "" : " (frozen)") +
              (p.device() == comm_device() ? "" : " (on another device than the first parameter)");
      const auto [it, fresh] = first.emplace(p.impl(), "group " + std::to_string(g) + " parameter " + std::to_string(k));
      if (!fresh) line += " (the same tensor as " + it->second + ")";
      lines.push_back(line);
    }
  }
  const std::string report =
      compare_across_ranks(*group_, comm_device(), lines, int64_t(specs_.size()), "parameter groups");
  MG_CHECK(report.empty(), distributed::DistributedError, kWho, ": rank ", group_->rank(),
           ": the ranks' parameters differ (each rank must pass the same groups of parameters with the same shapes "
           "and dtypes); nothing was broadcast:",
           report, "\n  hint: build the same model on every rank and construct this before amp::initialize");
}

namespace {

// Whether the owner's step may have changed `p`: an optimizer steps only parameters with a
// gradient, and a frozen one (requires_grad false, no gradient) keeps the value every rank got at
// construction, so it is not sent again. Both flags follow the model's structure and DDP's
// averaged gradients, the same on every rank (a rank that differs sends another size: Gloo's
// per-call check refuses that broadcast on every rank, NCCL's with check_consistency).
bool may_have_stepped(const Tensor& p) { return p.requires_grad() || p.grad().defined(); }

}  // namespace

void ZeroRedundantOptimizer::broadcast_parameters() {
  if (group_->world_size() == 1) return;  // one rank owns everything: nothing to send
  NoGradGuard no_grad;
  const int rank = group_->rank();
  for (int r = 0; r < group_->world_size(); ++r) {
    // The owner's parameters of each dtype travel as one flat tensor (dtypes in a fixed order).
    std::map<DType, std::vector<std::size_t>> by_dtype;
    for (std::size_t i = 0; i < params_.size(); ++i) {
      if (owners_[i] == r && params_[i].numel() > 0 && may_have_stepped(params_[i])) {
        by_dtype[params_[i].dtype()].push_back(i);
      }
    }
    for (const auto& [dtype, indices] : by_dtype) {
      Tensor flat;
      if (r == rank) {
        Tensors parts;
        for (std::size_t i : indices) parts.push_back(reshape(params_[i], {-1}));
        flat = cat(parts, 0);
      } else {
        int64_t total = 0;
        for (std::size_t i : indices) total += params_[i].numel();
        flat = empty({total}, {.dtype = dtype, .device = comm_device()});
      }
      group_->broadcast(flat, r);
      if (r == rank) continue;
      int64_t offset = 0;
      for (std::size_t i : indices) {
        const int64_t n = params_[i].numel();
        params_[i].copy_(reshape(flat.narrow(0, offset, n), params_[i].shape()));
        offset += n;
      }
    }
  }
}

Tensor ZeroRedundantOptimizer::clip_grad_norm_(double max_norm, double norm_type, bool error_if_nonfinite) {
  static constexpr const char* kOp = "ZeroRedundantOptimizer::clip_grad_norm_";
  MG_CHECK(max_norm >= 0.0, Error, kOp, ": max_norm must be >= 0, got ", max_norm);
  MG_CHECK(norm_type > 0.0, Error, kOp, ": norm_type must be > 0 (or INFINITY), got ", norm_type);
  const Tensors params = local_->parameters();
  std::exception_ptr refused;
  try {
    optim::detail::check_clip_targets(params, kOp);  // looks at this rank's shard only
  } catch (...) {
    refused = std::current_exception();
  }
  throw_if_any_failed(refused, "clip_grad_norm_");
  NoGradGuard no_grad;
  const bool inf_norm = std::isinf(norm_type);
  // This rank's sum of |g|^p (or max |g|) in f64; a rank without gradients contributes 0.
  Tensor part = zeros({1}, {.dtype = DType::F64, .device = comm_device()});
  Tensors grads;
  for (const Tensor& p : params) {
    const Tensor g = p.grad();
    if (!g.defined()) continue;
    grads.push_back(g);
    if (g.numel() == 0) continue;
    const Tensor x = abs(to(g, DType::F64));
    const Tensor s = inf_norm ? amax(x) : norm_type == 2.0 ? sum(x * x) : norm_type == 1.0 ? sum(x) : sum(pow(x, norm_type));
    part = inf_norm ? maximum(part, reshape(s, {1})) : part + reshape(s, {1});  // maximum keeps NaN
  }
  group_->all_reduce(part, inf_norm ? ReduceOp::Max : ReduceOp::Sum);
  Tensor total = reshape(part, {});
  if (norm_type == 2.0) total = sqrt(total);
  else if (!inf_norm && norm_type != 1.0) total = pow(total, 1.0 / norm_type);
  if (error_if_nonfinite) {
    const double norm = total.item<double>();  // the same value on every rank: all throw alike
    MG_CHECK(std::isfinite(norm), Error, kOp, ": the total norm of order ", norm_type, " of the gradients is ", norm,
             ", so they cannot be clipped; they were left unchanged"
             "\n  hint: find the overflow (lower the lr or use a GradScaler), or pass error_if_nonfinite = false");
  }
  const Tensor finite = (total - total).eq(0.0);  // false for inf and NaN
  const Tensor coef = where(finite, clamp_max(max_norm / (total + 1e-6), 1.0), scalar_like(1.0, total));
  for (const Tensor& g : grads) {
    const DType dt = g.dtype() == DType::F64 ? DType::F64 : DType::F32;
    Tensor(g).copy_(mul(to(g, dt), to(coef, dt)));  // g * coef in opmath, rounded once (exact for 1)
  }
  return total;
}

StateDict ZeroRedundantOptimizer::state_dict(int to) {
  const int world = group_->world_size(), rank = group_->rank();
  MG_CHECK(to >= -1 && to < world, Error, kWho, "::state_dict: 'to' must be -1 (every rank) or a rank below ", world,
           ", got ", to);
  const bool keep = to == -1 || to == rank;
  const StateDict mine = local_->state_dict();
  StateDict full;
  for (int r = 0; r < world; ++r) {
    const StateDict part = broadcast_state_dict(*group_, mine, r, comm_device());
    if (!keep) continue;
    std::map<int64_t, int64_t> to_global;
    const std::vector<int64_t> positions = positions_of(owners_, r);
    for (std::size_t k = 0; k < positions.size(); ++k) to_global[int64_t(k)] = positions[k];
    std::string key;
    for (const auto& [k, v] : part.ints) {
      if (remap_position_key(k, to_global, &key)) full.ints[key] = v;
    }
    for (const auto& [k, v] : part.floats) {  // per-parameter scalars (NAdam's mu_product)
      if (k.rfind("state.", 0) == 0 && remap_position_key(k, to_global, &key)) full.floats[key] = v;
    }
    for (const auto& [k, t] : part.tensors) {
      MG_CHECK(remap_position_key(k, to_global, &key), Error, kWho, "::state_dict: rank ", r,
               "'s optimizer saved an unexpected tensor '", k, "'");
      full.tensors.emplace_back(key, t.to(Device::cpu()));  // the whole state: host memory, not the device's
    }
    if (r == (to == -1 ? 0 : to)) {
      // Options and counters: the same on every rank (each steps alike); taken from one.
      full.strings["optimizer"] = part.strings.at("optimizer");
      full.ints["step_count"] = part.ints.at("step_count");
      for (const auto& [k, v] : part.floats) {
        if (k.rfind("state.", 0) != 0) full.floats[k] = v;  // group options
      }
    }
  }
  if (!keep) return {};
  full.ints["num_groups"] = int64_t(specs_.size());
  full.ints["num_params"] = int64_t(params_.size());
  int64_t first = 0;
  for (std::size_t g = 0; g < specs_.size(); ++g) {
    std::vector<int64_t> positions(specs_[g].params.size());
    std::iota(positions.begin(), positions.end(), first);
    full.strings["group." + std::to_string(g) + ".params"] = join(positions);
    first += int64_t(positions.size());
  }
  // Position order, as an unsharded optimizer writes them (state buffers, then the masters).
  const auto order_key = [](const std::string& k) {
    std::string head, tail;
    int64_t i = -1;
    parse_position_key(k, &head, &i, &tail);
    return std::pair(head == "master.", i);
  };
  std::stable_sort(full.tensors.begin(), full.tensors.end(),
                   [&](const auto& a, const auto& b) { return order_key(a.first) < order_key(b.first); });
  return full;
}

void ZeroRedundantOptimizer::load_state_dict(const StateDict& state) {
  // Each rank loads its part and checks only that; so the ranks agree afterwards, and where any
  // refused, the others undo their load: all change, or none does.
  const StateDict before = local_->state_dict();
  std::exception_ptr refused;
  try {
    load_local_part(state);
  } catch (...) {
    refused = std::current_exception();
  }
  const int failed = first_failed_rank(refused != nullptr);
  if (failed < 0) return;
  if (refused) std::rethrow_exception(refused);
  local_->load_state_dict(before);
  MG_THROW(distributed::DistributedError, kWho, ": rank ", group_->rank(), ": load_state_dict failed on rank ", failed,
           " (its error says why); this rank's part was loaded and restored again");
}

void ZeroRedundantOptimizer::load_local_part(const StateDict& state) {
  const std::string owner = std::string(kWho) + "::load_state_dict";
  const int64_t num_params = state.int_at(owner, "num_params");
  MG_CHECK(num_params == int64_t(params_.size()), Error, owner, ": the state has ", num_params,
           " parameters but the ZeroRedundantOptimizer has ", params_.size());
  const int64_t num_groups = state.int_at(owner, "num_groups");
  MG_CHECK(num_groups == int64_t(specs_.size()), Error, owner, ": the state has ", num_groups,
           " parameter groups but the ZeroRedundantOptimizer has ", specs_.size());
  StateDict local;
  local.strings["optimizer"] = state.string_at(owner, "optimizer");
  local.ints["step_count"] = state.int_at(owner, "step_count");
  local.ints["num_groups"] = num_groups;
  local.ints["num_params"] = int64_t(owned_.size());
  std::map<int64_t, int64_t> to_local;
  for (std::size_t k = 0; k < owned_.size(); ++k) to_local[owned_[k]] = int64_t(k);
  int64_t first = 0;
  for (std::size_t g = 0; g < specs_.size(); ++g) {
    const std::string key = "group." + std::to_string(g) + ".params";
    std::vector<int64_t> positions(specs_[g].params.size()), mine;
    std::iota(positions.begin(), positions.end(), first);
    const std::string& saved = state.string_at(owner, key);
    MG_CHECK(saved == join(positions), Error, owner, ": param group ", g, " holds parameters ", join(positions),
             " but the saved group lists ", saved);
    for (int64_t i : positions) {
      if (to_local.count(i)) mine.push_back(to_local[i]);
    }
    local.strings[key] = join(mine);
    first += int64_t(positions.size());
  }
  for (const auto& [k, v] : state.floats) {
    if (k.rfind("state.", 0) != 0) local.floats[k] = v;  // group options; per-parameter scalars below
  }
  // Position keys of this rank's parameters are renumbered; the others' are dropped. Anything
  // else that is not the layout's is an error, as in an unsharded load.
  const auto check_position = [&](const std::string& k, const char* what) {
    std::string head, tail;
    int64_t i = -1;
    MG_CHECK(parse_position_key(k, &head, &i, &tail) && i < num_params, Error, owner, ": unexpected ", what, " '", k,
             "' (the state has ", num_params, " parameters)");
  };
  std::string key;
  for (const auto& [k, v] : state.ints) {
    if (k == "step_count" || k == "num_groups" || k == "num_params") continue;
    check_position(k, "integer");
    if (remap_position_key(k, to_local, &key)) local.ints[key] = v;
  }
  for (const auto& [k, v] : state.floats) {
    if (k.rfind("state.", 0) != 0) continue;
    check_position(k, "float");
    if (remap_position_key(k, to_local, &key)) local.floats[key] = v;
  }
  for (const auto& [k, t] : state.tensors) {
    check_position(k, "tensor");
    if (remap_position_key(k, to_local, &key)) local.tensors.emplace_back(key, t);
  }
  local_->load_state_dict(local);
}

}  // namespace mg::distributed
