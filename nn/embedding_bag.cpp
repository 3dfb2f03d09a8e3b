#include "mixgrad/nn/embedding_bag.h"

#include <algorithm>
#include <limits>
#include <vector>

#include "mixgrad/autograd/grad_mode.h"
#include "mixgrad/core/factory.h"
#include "mixgrad/nn/dropout.h"
#include "mixgrad/nn/init.h"
#include "mixgrad/ops/custom_function.h"
#include "mixgrad/ops/norm.h"
#include "mixgrad/ops/ops.h"

namespace mg::nn {

namespace {

constexpr const char* kWho = "embedding_bag";

const char* mode_name(BagMode m) { return m == BagMode::Sum ? "sum" : m == BagMode::Mean ? "mean" : "max"; }

bool is_index_dtype(DType d) { return d == DType::I64 || d == DType::I32; }

// The bags of a 1-D input as a dense table: pos [B, L] holds each bag's positions in input, the
// unused slots n (an extra entry appended to input), and used [B, L] says which slots hold one.
struct BagTable {
  Tensor pos, used;
  int64_t bags = 0, longest = 0;
};

BagTable bag_table(const Tensor& offsets, int64_t n, bool include_last_offset, Device device) {
  MG_CHECK(offsets.defined() && offsets.dim() == 1 && is_index_dtype(offsets.dtype()), ShapeError, kWho,
           ": a 1-D input needs 1-D integer offsets (where each bag starts), got ",
           offsets.defined() ? describe(offsets) : "undefined");
  const Tensor host = contiguous(to(to(offsets, Device::cpu()), DType::I64));
  const int64_t* o = host.data<int64_t>();
  const int64_t count = host.numel();
  MG_CHECK(count >= (include_last_offset ? 2 : 1), ShapeError, kWho, ": offsets ", describe(offsets),
           " name no bag", include_last_offset ? " (include_last_offset: the last entry ends the last bag)" : "");
  MG_CHECK(o[0] == 0, IndexError, kWho, ": offsets[0] must be 0 (the first bag starts the input), got ", o[0]);
  // PyTorch silently adds the entries past offsets[B] to the last bag; a CSR-style offsets vector
  // ends at n, so anything else is refused.
  MG_CHECK(!include_last_offset || o[count - 1] == n, IndexError, kWho,
           ": with include_last_offset the last offset ends the last bag and must equal the input's length ", n,
           ", got ", o[count - 1]);
  BagTable t;
  t.bags = include_last_offset ? count - 1 : count;
  std::vector<int64_t> begin(std::size_t(t.bags)), end(std::size_t(t.bags));
  for (int64_t b = 0; b < t.bags; ++b) {
    begin[std::size_t(b)] = o[b];
    end[std::size_t(b)] = b + 1 < count ? o[b + 1] : n;
    MG_CHECK(begin[std::size_t(b)] <= end[std::size_t(b)] && end[std::size_t(b)] <= n, IndexError, kWho,
             ": offsets must be non-decreasing and at most the input's length ", n, ", got offsets[", b, "] = ",
             begin[std::size_t(b)], " and its bag's end ", end[std::size_t(b)]);
    t.longest = std::max(t.longest, end[std::size_t(b)] - begin[std::size_t(b)]);
  }
  int64_t slots = 0;
  MG_CHECK(!__builtin_mul_overflow(t.bags, t.longest, &slots), Error, kWho, ": ", t.bags,
           " bags of up to ", t.longest, " entries overflow 64-bit sizes");
  std::vector<int64_t> pos(std::size_t(slots), n);
  std::vector<uint8_t> used(pos.size(), 0);
  for (int64_t b = 0; b < t.bags; ++b)
    for (int64_t i = begin[std::size_t(b)]; i < end[std::size_t(b)]; ++i) {
      const std::size_t slot = std::size_t(b * t.longest + i - begin[std::size_t(b)]);
      pos[slot] = i;
      used[slot] = 1;
    }
  t.pos = from_vector<int64_t>(pos, {t.bags, t.longest}).to(device);
  t.used = from_vector<uint8_t>(used, {t.bags, t.longest}).to(DType::Bool).to(device);
  return t;
}

// x [n] with one zero appended, then its entries at pos [B, L].
Tensor take(const Tensor& x, const Tensor& pos) {
  const Tensor ext = cat({x, zeros({1}, {.dtype = x.dtype(), .device = x.device()})});
  return index_select(ext, 0, pos.reshape({-1})).reshape(pos.shape());
}

// Identity forward; backward divides the gradient by `counts` (broadcast, no gradient): how
// scale_grad_by_freq scales each lookup's weight gradient without touching the forward's values.
// (The embedding op's own scale_grad_by_freq would count the unused slots of the bag table, which
// read row 0, as occurrences of index 0.)
struct DivideGradByCount : Function<DivideGradByCount> {
  static constexpr CastPolicy policy = CastPolicy::Keep;
  static constexpr const char* name = "embedding_bag_scale_grad_by_freq";
  static Tensors forward(FunctionCtx& ctx, const Tensors& in) {
    ctx.save_for_backward({in[1]});
    return {in[0]};
  }
  static Tensors backward(FunctionCtx& ctx, const Tensors& g) { return {g[0] / ctx.saved()[0], Tensor()}; }
};

// [B, L, 1]: the count, in the whole input, of each slot's index (>= 1; unused slots read 1).
Tensor slot_counts(const Tensor& input, const Tensor& slot_idx, int64_t v, DType acc) {
  NoGradGuard no_grad;
  const Tensor flat = input.reshape({-1}).to(DType::I64);
  const TensorOptions opts{.dtype = acc, .device = input.device()};
  const Tensor counts = scatter_add(zeros({v}, opts), 0, flat, ones({flat.numel()}, opts));
  return clamp_min(index_select(counts, 0, slot_idx.reshape({-1}).to(DType::I64)), 1.0)
      .reshape({slot_idx.size(0), slot_idx.size(1), 1});
}

}  // namespace

Tensor embedding_bag(const Tensor& weight, const Tensor& input, const EmbeddingBagArgs& a) {
  MG_CHECK(weight.defined() && weight.dim() == 2 && weight.is_floating_point(), ShapeError, kWho,
           ": expected a floating weight [V, D], got ", weight.defined() ? describe(weight) : "undefined");
  MG_CHECK(input.defined() && (input.dim() == 1 || input.dim() == 2) && is_index_dtype(input.dtype()), ShapeError,
           kWho, ": expected integer (i64 or i32) input [B, N] or [n], got ",
           input.defined() ? describe(input) : "undefined");
  MG_CHECK(input.device() == weight.device() && (!a.offsets.defined() || a.offsets.device() == input.device()) &&
               (!a.per_sample_weights.defined() || a.per_sample_weights.device() == input.device()),
           DeviceError, kWho, ": weight, input, offsets and per_sample_weights must be on one device, got weight on ",
           weight.device(), ", input on ", input.device(),
           a.offsets.defined() ? str_cat(", offsets on ", a.offsets.device()) : std::string(),
           a.per_sample_weights.defined() ? str_cat(", per_sample_weights on ", a.per_sample_weights.device())
                                          : std::string());
  const Tensor& psw = a.per_sample_weights;
  if (psw.defined()) {
    MG_CHECK(a.mode == BagMode::Sum, Error, kWho, ": per_sample_weights are only supported with mode sum, not ",
             mode_name(a.mode));
    MG_CHECK(psw.shape() == input.shape() && psw.is_floating_point(), ShapeError, kWho,
             ": per_sample_weights must be floating with the input's shape ", input.shape(), ", got ", describe(psw));
  }
  MG_CHECK(!a.scale_grad_by_freq || a.mode != BagMode::Max, Error, kWho,
           ": scale_grad_by_freq is not supported with mode max (as PyTorch's)");
  const int64_t v = weight.size(0);
  std::optional<int64_t> pad = a.padding_idx;
  if (pad) {
    MG_CHECK(*pad >= -v && *pad < v, IndexError, kWho, ": padding_idx ", *pad, " is out of range for ", v,
             " rows");
    if (*pad < 0) *pad += v;
  }

  Tensor idx, used, weights;  // [B, L]: the indices, which slots hold one, the per-sample weights
  if (input.dim() == 2) {
    MG_CHECK(!a.offsets.defined(), ShapeError, kWho,
             ": a 2-D input is one bag per row, so offsets must be undefined, got ", describe(a.offsets));
    idx = input;
    used = ones(input.shape(), {.dtype = DType::Bool, .device = input.device()});
    weights = psw;
  } else {
    const BagTable t = bag_table(a.offsets, input.size(0), a.include_last_offset, input.device());
    idx = take(input, t.pos);
    used = t.used;
    if (psw.defined()) weights = take(psw, t.pos);
  }
  const DType out = weight.dtype();
  const DType acc = out == DType::F16 || out == DType::BF16 ? DType::F32 : out;
  Tensor counted = used.to(acc);  // [B, L]: 1 where a slot counts
  if (pad) counted = counted * ne(idx, scalar_like(double(*pad), idx)).to(acc);
  const Tensor skipped = eq(counted, scalar_like(0, counted));  // [B, L] bool
  // Skipped slots read row 0 (a padding entry or a slot past its bag's end), then are masked.
  const Tensor slot_idx = masked_fill(idx, skipped, 0.0);
  const Tensor rows = embedding(weight, slot_idx);  // [B, L, D]
  const Tensor skipped3 = skipped.unsqueeze(2);
  if (a.mode == BagMode::Max) {
    if (idx.size(1) == 0) return sum(rows, {1});  // every bag empty: zeros [B, D], still on the graph
    // max's first index takes the gradient, as PyTorch's embedding_bag. Unlike PyTorch (whose
    // kernel compares with a strict >, so a NaN after the first slot is passed over), a NaN row
    // gives NaN; and where every counted row of a column is -inf, a skipped slot before them ties
    // and takes that column's gradient.
    const Tensor best = max(masked_fill(rows, skipped3, -std::numeric_limits<double>::infinity()), 1).first;
    const Tensor empty = eq(sum(counted, {1}, /*keepdim=*/true), scalar_like(0, counted));  // [B, 1]
    return masked_fill(best, empty, 0.0);
  }
  Tensor wide = rows.to(acc);
  if (a.scale_grad_by_freq && weight.requires_grad() && GradMode::is_enabled())
    wide = DivideGradByCount::apply({wide, slot_counts(input, slot_idx, v, acc)})[0];
  Tensor terms = masked_fill(wide, skipped3, 0.0);
  if (weights.defined()) terms = terms * weights.to(acc).unsqueeze(2);
  Tensor total = sum(terms, {1});  // [B, D]
  if (a.mode == BagMode::Mean) total = total / clamp_min(sum(counted, {1}, /*keepdim=*/true), 1.0);
  return total.to(out);
}

EmbeddingBag::EmbeddingBag(Options o, bool initialize) : UnaryModule("EmbeddingBag"), options_(o) {
  MG_CHECK(o.num > 0 && o.dim > 0, Error, "EmbeddingBag: num and dim must be positive, got ", o.num, " and ", o.dim);
  if (o.padding_idx) {
    MG_CHECK(*o.padding_idx >= -o.num && *o.padding_idx < o.num, Error, "EmbeddingBag: padding_idx ",
             *o.padding_idx, " is out of range for ", o.num, " rows");
    if (*options_.padding_idx < 0) *options_.padding_idx += o.num;
  }
  weight = register_parameter("weight", empty({o.num, o.dim}));
  if (initialize) reset_parameters();
}

void EmbeddingBag::reset_parameters() {
  init::normal_(weight);
  if (options_.padding_idx) {
    NoGradGuard no_grad;
    Tensor(weight.select(0, *options_.padding_idx)).zero_();
  }
}

std::shared_ptr<EmbeddingBag> EmbeddingBag::from_pretrained(const Tensor& embeddings, bool freeze, Options options) {
  detail::check_pretrained_table(embeddings, "EmbeddingBag::from_pretrained");
  options.num = embeddings.size(0);
  options.dim = embeddings.size(1);
  std::shared_ptr<EmbeddingBag> e(new EmbeddingBag(options, /*initialize=*/false));  // no throwaway draws
  detail::load_pretrained_table(*e, e->weight, embeddings, freeze);
  return e;
}

Tensor EmbeddingBag::forward(const Tensor& input, const Tensor& offsets, const Tensor& per_sample_weights) {
  auto scope = module_scope(*this);
  try {
    if (options_.max_norm && input.defined() && input.numel() > 0)
      embedding_renorm_(weight, input, *options_.max_norm, options_.norm_type);
    return embedding_bag(weight, input,
                         {.offsets = offsets,
                          .per_sample_weights = per_sample_weights,
                          .mode = options_.mode,
                          .include_last_offset = options_.include_last_offset,
                          .padding_idx = options_.padding_idx,
                          .scale_grad_by_freq = options_.scale_grad_by_freq});
  } catch (const IndexError& e) {  // the layer names itself in front of the function's text
    throw IndexError(str_cat(layer_name(), ": ", e.what()));
  } catch (const ShapeError& e) {
    throw ShapeError(str_cat(layer_name(), ": ", e.what()));
  } catch (const DTypeError& e) {
    throw DTypeError(str_cat(layer_name(), ": ", e.what()));
  } catch (const DeviceError& e) {
    throw DeviceError(str_cat(layer_name(), ": ", e.what()));
  }
}

std::string EmbeddingBag::extra_repr() const {
  std::string s = str_cat(options_.num, ", ", options_.dim, ", mode=", mode_name(options_.mode));
  if (options_.padding_idx) s += str_cat(", padding_idx=", *options_.padding_idx);
  if (options_.include_last_offset) s += ", include_last_offset=true";
  if (options_.max_norm) s += str_cat(", max_norm=", *options_.max_norm);
  if (options_.scale_grad_by_freq) s += ", scale_grad_by_freq=true";
  return s;
}

}  // namespace mg::nn
