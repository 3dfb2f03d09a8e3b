#include "mixgrad/ops/ctc_loss.h"

#include <algorithm>
#include <limits>

#include "mixgrad/core/factory.h"
#include "mixgrad/ops/composite.h"
#include "mixgrad/ops/ops.h"
#include "mixgrad/ops/pad.h"

namespace mg {

namespace {

constexpr const char* kWho = "ctc_loss";

std::vector<int64_t> host_lengths(const Tensor& t, const char* what) {
  MG_CHECK(t.defined() && t.dim() <= 1, ShapeError, kWho, ": expected ", what, " as a 1-D (or, unbatched, 0-d) tensor, got ",
           t.defined() ? describe(t) : "undefined");
  MG_CHECK(!t.is_floating_point() && t.dtype() != DType::Bool, DTypeError, kWho, ": ", what,
           " must be integral, got ", describe(t));
  const Tensor h = contiguous(to(to(t, Device::cpu()), DType::I64));
  return std::vector<int64_t>(h.data<int64_t>(), h.data<int64_t>() + h.numel());
}

// The host tables of the extended label sequences [N, L], L = 2 S_max + 1.
struct Extended {
  int64_t width = 1;
  std::vector<int64_t> labels;     // blank at even positions, target s at 2s + 1
  std::vector<uint8_t> skip;       // a transition from s - 2 is allowed (a label unlike the one before it)
  std::vector<uint8_t> valid;      // s < 2 S_n + 1
  std::vector<uint8_t> start;      // s = 0, and s = 1 when S_n > 0: where alignments may begin
  std::vector<int64_t> ends;       // [N, 2]: 2 S_n and 2 S_n - 1 (the first again when S_n = 0)
  std::vector<uint8_t> end_valid;  // [N, 2]
};

Extended extend(const std::vector<std::vector<int64_t>>& targets, int64_t blank) {
  Extended e;
  int64_t longest = 0;
  for (const auto& t : targets) longest = std::max<int64_t>(longest, int64_t(t.size()));
  e.width = 2 * longest + 1;
  const std::size_t n = targets.size(), w = std::size_t(e.width);
  e.labels.assign(n * w, blank);
  e.skip.assign(n * w, 0);
  e.valid.assign(n * w, 0);
  e.start.assign(n * w, 0);
  for (std::size_t b = 0; b < n; ++b) {
    const auto& t = targets[b];
    const std::size_t len = 2 * t.size() + 1;
    for (std::size_t s = 0; s < len; ++s) {
      e.valid[b * w + s] = 1;
      if (s % 2 == 1) e.labels[b * w + s] = t[s / 2];
      if (s % 2 == 1 && s >= 3 && t[s / 2] != t[s / 2 - 1]) e.skip[b * w + s] = 1;
    }
    e.start[b * w] = 1;
    if (!t.empty()) e.start[b * w + 1] = 1;
    e.ends.push_back(int64_t(2 * t.size()));
    e.ends.push_back(t.empty() ? 0 : int64_t(2 * t.size() - 1));
    e.end_valid.push_back(1);
    e.end_valid.push_back(t.empty() ? 0 : 1);
  }
  return e;
}

Tensor bools(const std::vector<uint8_t>& v, Shape shape, Device device) {
  return from_vector<uint8_t>(v, std::move(shape)).to(DType::Bool).to(device);
}

// log(exp(a) + exp(b) + exp(c)) for finite inputs (masked states are a large negative number, not
// -inf), the maximum taken as a constant so every exponent is <= 0.
Tensor log_add_exp3(const Tensor& a, const Tensor& b, const Tensor& c) {
  const Tensor m = maximum(maximum(a, b), c).detach();
  return m + log(exp(a - m) + exp(b - m) + exp(c - m));
}

}  // namespace

Tensor ctc_loss(const Tensor& log_probs, const Tensor& targets, const std::vector<int64_t>& input_lengths,
                const std::vector<int64_t>& target_lengths, int64_t blank, Reduction reduction, bool zero_infinity) {
  detail::check_plain_reduction(kWho, reduction);
  MG_CHECK(log_probs.defined() && (log_probs.dim() == 3 || log_probs.dim() == 2), ShapeError, kWho,
           ": expected log_probs [T, N, C] or [T, C], got ", log_probs.defined() ? describe(log_probs) : "undefined");
  MG_CHECK(targets.defined() && !targets.is_floating_point() && targets.dtype() != DType::Bool, DTypeError, kWho,
           ": expected integer targets, got ", targets.defined() ? describe(targets) : "undefined");
  const bool unbatched = log_probs.dim() == 2;
  const Tensor lp3 = unbatched ? log_probs.unsqueeze(1) : log_probs;
  const int64_t steps = lp3.size(0), batch = lp3.size(1), classes = lp3.size(2);
  MG_CHECK(int64_t(input_lengths.size()) == batch && int64_t(target_lengths.size()) == batch, ShapeError, kWho,
           ": expected ", batch, " input and target lengths (the batch of ", describe(log_probs), "), got ",
           input_lengths.size(), " and ", target_lengths.size());
  MG_CHECK(blank >= 0 && blank < classes, IndexError, kWho, ": blank ", blank, " is not a class of ", classes);
  MG_CHECK(steps >= 1 && batch >= 1, ShapeError, kWho, ": expected at least one step and one sample, got ",
           describe(log_probs));

  // The targets on the host, one list per sample: [N, S] padded rows, or 1-D concatenated.
  const bool rows = targets.dim() == 2 && !unbatched;
  MG_CHECK(rows || targets.dim() == 1 || (unbatched && targets.dim() == 2 && targets.size(0) == 1), ShapeError, kWho,
           ": expected targets [N, S] or 1-D (concatenated), got ", describe(targets));
  MG_CHECK(!rows || targets.size(0) == batch, ShapeError, kWho, ": expected targets [", batch, ", S], got ",
           describe(targets));
  const Tensor th = contiguous(to(to(targets, Device::cpu()), DType::I64));
  const int64_t* tv = th.data<int64_t>();
  int64_t total = 0;
  for (int64_t n = 0; n < batch; ++n) {
    const int64_t len = target_lengths[std::size_t(n)], in = input_lengths[std::size_t(n)];
    MG_CHECK(in >= 0 && in <= steps, IndexError, kWho, ": input length ", in, " of sample ", n,
             " is outside [0, ", steps, "]");
    MG_CHECK(len >= 0 && (!rows || len <= th.size(1)), IndexError, kWho, ": target length ", len, " of sample ", n,
             " is outside [0, ", rows ? th.size(1) : th.numel(), "]");
    total += len;
  }
  // Concatenated targets hold exactly the targets (as PyTorch); [1, S] unbatched rows may pad.
  const bool concatenated = targets.dim() == 1;
  MG_CHECK(rows || (concatenated ? th.numel() == total : th.numel() >= total), ShapeError, kWho,
           ": the target lengths add up to ", total, " but targets has ", th.numel(), " elements");
  std::vector<std::vector<int64_t>> per_sample(static_cast<std::size_t>(batch));
  int64_t offset = 0;
  for (int64_t n = 0; n < batch; ++n) {
    const int64_t len = target_lengths[std::size_t(n)];
    const int64_t* row = rows ? tv + n * th.size(1) : tv + offset;
    for (int64_t s = 0; s < len; ++s) {
      MG_CHECK(row[s] >= 0 && row[s] < classes && row[s] != blank, IndexError, kWho, ": target ", row[s],
               " of sample ", n, " (position ", s, ") must be a class in [0, ", classes, ") other than the blank ",
               blank);
      per_sample[std::size_t(n)].push_back(row[s]);
    }
    offset += len;
  }

  const detail::CompositeInputs c = detail::composite_inputs(kWho, {lp3});
  const Tensor& lp = c.math[0];  // [T, N, C] in opmath
  const Device dev = lp.device();
  const double neg = lp.dtype() == DType::F64 ? -1e300 : -1e30;  // "log 0", finite
  const Extended e = extend(per_sample, blank);
  const int64_t width = e.width;
  const Tensor labels = from_vector<int64_t>(e.labels, {batch, width}).to(dev);
  const Tensor skip = bools(e.skip, {batch, width}, dev), valid = bools(e.valid, {batch, width}, dev);
  const Tensor start = bools(e.start, {batch, width}, dev);
  const Tensor low = full({}, neg, {.dtype = lp.dtype(), .device = dev});
  // Emission log-probabilities of every extended label at every step: [T, N, L].
  // -inf log-probabilities (masked logits) clamp to "log 0", so no inf - inf makes a NaN.
  const Tensor raw = gather(lp, 2, labels.unsqueeze(0).expand({steps, batch, width}));
  const Tensor emit = where(lt(raw, low), low, raw);
  Tensor alpha = where(start, emit.select(0, 0), low);  // [N, L]
  // Which samples still run at each step, one host table copied once: [T, N, 1].
  const int64_t longest = *std::max_element(input_lengths.begin(), input_lengths.end());
  std::vector<uint8_t> running(static_cast<std::size_t>(steps * batch));
  for (int64_t t = 0; t < steps; ++t)
    for (int64_t n = 0; n < batch; ++n) running[std::size_t(t * batch + n)] = t < input_lengths[std::size_t(n)];
  const Tensor runs = bools(running, {steps, batch, 1}, dev);
  for (int64_t t = 1; t < longest; ++t) {
    const Tensor one = pad(alpha.narrow(1, 0, width - 1), {1, 0}, PadMode::Constant, neg);
    const Tensor two = width > 2 ? where(skip, pad(alpha.narrow(1, 0, width - 2), {2, 0}, PadMode::Constant, neg), low)
                                 : full_like(alpha, neg);
    const Tensor next = where(valid, log_add_exp3(alpha, one, two) + emit.select(0, t), low);
    alpha = where(runs.select(0, t), next, alpha);  // samples whose input has ended keep their alpha
  }
  // The likelihood ends on the last label or the blank after it.
  const Tensor ends = from_vector<int64_t>(e.ends, {batch, 2}).to(dev);
  const Tensor last = where(bools(e.end_valid, {batch, 2}, dev), gather(alpha, 1, ends), low);
  const Tensor m = amax(last, {1}, /*keepdim=*/true).detach();
  Tensor log_likelihood = (m + log(sum(exp(last - m), {1}, /*keepdim=*/true))).reshape({batch});
  // An input of length 0 aligns only an empty target (likelihood 1); the loop above read step 0.
  std::vector<uint8_t> no_input(static_cast<std::size_t>(batch)), empty_pair(static_cast<std::size_t>(batch));
  for (int64_t n = 0; n < batch; ++n) {
    no_input[std::size_t(n)] = input_lengths[std::size_t(n)] == 0;
    empty_pair[std::size_t(n)] = no_input[std::size_t(n)] && target_lengths[std::size_t(n)] == 0;
  }
  log_likelihood = where(bools(no_input, {batch}, dev), where(bools(empty_pair, {batch}, dev), zeros_like(low), low),
                         log_likelihood);
  // No alignment: the likelihood stayed near "log 0". Such a loss is inf (PyTorch's), or 0 with
  // zero_infinity; either way its gradient is 0.
  const Tensor impossible = lt(log_likelihood, scalar_like(neg / 2, log_likelihood));
  const double infinite = zero_infinity ? 0.0 : std::numeric_limits<double>::infinity();
  Tensor loss = where(impossible, scalar_like(infinite, log_likelihood), -log_likelihood);  // [N]
  if (reduction == Reduction::Mean) {
    std::vector<double> divisors;
    for (int64_t len : target_lengths) divisors.push_back(double(std::max<int64_t>(len, 1)));
    loss = mean(loss / from_vector<double>(divisors, {batch}).to(loss.dtype()).to(dev));
  } else if (reduction == Reduction::Sum) {
    loss = sum(loss);
  } else if (unbatched) {
    loss = loss.reshape({});
  }
  return detail::round_result(loss, c);
}

Tensor ctc_loss(const Tensor& log_probs, const Tensor& targets, const Tensor& input_lengths,
                const Tensor& target_lengths, int64_t blank, Reduction reduction, bool zero_infinity) {
  return ctc_loss(log_probs, targets, host_lengths(input_lengths, "input_lengths"),
                  host_lengths(target_lengths, "target_lengths"), blank, reduction, zero_infinity);
}

}  // namespace mg
