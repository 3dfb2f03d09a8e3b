// mg::checkpoint's recomputing form (PyTorch's use_reentrant=False). The forward runs fn with
// recording on, under saved-tensor hooks whose pack hands each saved tensor a Slot (its place in
// the order the forward saved them) and notes its shape, dtype and device in the call's Frame; the
// frame holds the tensors themselves only until fn returns (fn may run a backward of its own on
// what it computes: a gradient penalty). The first unpack of a slot in a backward runs fn again —
// on the inputs as they were, with the first run's autocast states and generator position, under
// hooks that capture what the recomputation saves in the same order — and every slot then reads
// its tensor from there. A slot's tensor is freed with the slot (when its node has run), and what
// is left when the backward pass ends is freed then, so the recomputed activations go as the
// backward passes them and a second backward (retain_graph) recomputes again, as in PyTorch.
#include <memory>
#include <vector>

#include "mixgrad/autograd/grad_mode.h"
#include "mixgrad/autograd/hooks.h"
#include "mixgrad/autograd/saved_tensor.h"
#include "mixgrad/autograd/saved_tensor_hooks.h"
#include "mixgrad/core/error.h"
#include "mixgrad/core/graph_rng.h"
#include "mixgrad/ops/checkpoint_detail.h"

namespace mg::checkpoint_detail {
namespace {

constexpr const char* kName = "checkpoint";

struct SavedMeta {
  Shape shape;
  DType dtype;
  Device device;
};

std::string describe_meta(const SavedMeta& m) { return str_cat(m.shape, " ", dtype_name(m.dtype), " ", m.device.str()); }

class Frame;

// What a saved tensor of the checkpointed region keeps: its frame and its place in the order.
struct Slot {
  std::shared_ptr<Frame> frame;
  std::size_t index;
  ~Slot();
};

// One checkpointed call: how to run it again, and per saved tensor its metadata, its live slot
// and, once recomputed, its value with the version it had when the recomputation saved it.
class Frame : public std::enable_shared_from_this<Frame> {
 public:
  Frame(CheckpointFn fn, const Tensors& inputs)
      : fn_(std::move(fn)), autocast_(AutocastSnapshot::take()), rng_(default_generator().position()) {
    // Saved through the hooks in force outside this call: an enclosing checkpoint then
    // recomputes these inputs too instead of keeping them.
    for (const Tensor& t : inputs) inputs_.emplace_back(t, /*is_output=*/false);
  }

  // The forward's pack: a slot instead of the tensor (which the frame holds until fn returns).
  std::shared_ptr<Slot> add_slot(const std::shared_ptr<Frame>& self, const Tensor& t) {
    MG_ASSERT(in_forward_, kName, ": a tensor saved after the checkpointed call ended");
    auto slot = std::make_shared<Slot>(Slot{self, metas_.size()});
    metas_.push_back({t.shape(), t.dtype(), t.device()});
    slots_.push_back(slot);
    values_.push_back({t, t.version()});
    return slot;
  }

  // fn returned: from now on the saved tensors come from a recomputation.
  void end_forward() {
    in_forward_ = false;
    values_.clear();
  }

  Tensor value(std::size_t index) {
    if (in_forward_) return values_.at(index).tensor;  // a backward inside fn itself
    if (!recomputed_) {
      MG_CHECK(!recomputing_, AutogradError, kName, ": a tensor the checkpointed function saved was needed while that "
               "function was being recomputed (a backward inside it reached past its own inputs)",
               "\n  hint: differentiate only with respect to the function's inputs or tensors it computes");
      recompute();
    }
    const Captured& c = values_.at(index);
    MG_ASSERT(c.tensor.defined(), kName, ": saved tensor ", index, " was not kept by the recomputation");
    MG_CHECK(c.tensor.version() == c.version, AutogradError, kName, ": a tensor the recomputation saved for backward (",
             describe(c.tensor), ", the ", index + 1, ". saved) was modified by a later in-place operation of the "
             "checkpointed function (version ", c.version, " -> ", c.tensor.version(), ")",
             "\n  hint: use the out-of-place op (e.g. add instead of add_) or clone() before modifying");
    return c.tensor;
  }

  void drop(std::size_t index) {
    if (index < values_.size()) values_[index] = {};
  }

  // The end of the backward pass that recomputed: what no node took is freed, and a later
  // backward (retain_graph) recomputes.
  void forget_recomputation() {
    values_.clear();
    recomputed_ = false;
  }

 private:
  struct Captured {
    Tensor tensor;
    uint64_t version = 0;
  };

  void recompute() {
    check_not_captured(default_generator(), kName);
    Tensors inputs;
    for (std::size_t i = 0; i < inputs_.size(); ++i) {  // version-checked
      inputs.push_back(inputs_[i].unpack(str_cat(kName, " (input ", i, " of the checkpointed function)")));
    }
    values_.assign(metas_.size(), {});
    std::size_t count = 0;
    recomputing_ = true;
    try {
      EnableGradGuard grad_on;  // fn must record (and save) as it did the first time
      AutocastRestore autocast(autocast_);
      GeneratorReplay rng(rng_);
      // The recomputation's own graph keeps what it saves (fn may run a backward through it).
      autograd::SavedTensorHooks capture(
          [this, &count](const Tensor& t) -> std::any {
            const std::size_t k = count++;
            if (k < metas_.size()) {  // too many: reported below, once fn is done
              const SavedMeta& m = metas_[k];
              MG_CHECK(t.shape() == m.shape && t.dtype() == m.dtype && t.device() == m.device, AutogradError, kName,
                       ": the recomputation saved ", describe(t), " for backward where the first run saved ",
                       describe_meta(m), " (the ", k + 1, ". saved tensor)",
                       "\n  hint: a checkpointed function must compute the same thing each time it runs");
              if (!slots_[k].expired()) values_[k] = {t, t.version()};  // t carries no history
            }
            return t;
          },
          [](const std::any& packed) { return std::any_cast<const Tensor&>(packed); });
      fn_(inputs);
    } catch (...) {
      recomputing_ = false;
      values_.clear();
      throw;
    }
    recomputing_ = false;
    MG_CHECK(count == metas_.size(), AutogradError, kName, ": the recomputation saved ", count,
             " tensors for backward but the first run saved ", metas_.size(),
             "\n  hint: a checkpointed function must compute the same thing each time it runs");
    recomputed_ = true;
    if (autograd::in_backward()) {
      autograd::queue_callback([weak = weak_from_this()] {
        if (auto f = weak.lock()) f->forget_recomputation();
      });
    }
  }

  CheckpointFn fn_;
  std::vector<autograd::SavedTensor> inputs_;
  AutocastSnapshot autocast_;
  Generator::Position rng_;
  std::vector<SavedMeta> metas_;
  std::vector<std::weak_ptr<Slot>> slots_;
  std::vector<Captured> values_;  // per slot: the forward's tensor while fn runs, then the recomputed one
  bool in_forward_ = true;
  bool recomputing_ = false;
  bool recomputed_ = false;
};

Slot::~Slot() { frame->drop(index); }

}  // namespace

Tensors checkpoint_recomputing(const CheckpointFn& fn, const Tensors& inputs) {
  auto frame = std::make_shared<Frame>(fn, inputs);
  // The pack holds the frame weakly: the frame lives through the slots of the saved tensors that
  // need it, and dies with the forward's graph when nothing was saved.
  std::weak_ptr<Frame> weak = frame;
  struct EndForward {  // also when fn throws
    Frame& frame;
    ~EndForward() { frame.end_forward(); }
  } end_forward{*frame};
  Tensors outputs;
  {
    autograd::SavedTensorHooks hooks(
        [weak](const Tensor& t) -> std::any {
          auto f = weak.lock();
          MG_ASSERT(f, kName, ": a tensor saved after the checkpointed call ended");
          return f->add_slot(f, t);
        },
        [](const std::any& packed) -> Tensor {
          const auto& slot = std::any_cast<const std::shared_ptr<Slot>&>(packed);
          return slot->frame->value(slot->index);
        });
    outputs = fn(inputs);
  }
  return outputs;
}

}  // namespace mg::checkpoint_detail
