// mg::checkpoint's recomputing form (PyTorch's use_reentrant=False). The forward runs fn with
// recording on, under saved-tensor hooks whose pack hands each saved tensor a Slot (its place in
// the order the forward saved them) and notes its shape, dtype and device in the call's Frame; the
// frame holds the tensors themselves only until fn returns (fn may run a backward of its own on
// what it computes: a gradient penalty), and records fn's random draws. The first unpack of a
// slot in a backward pass runs fn again — on the inputs as they were, with the first run's autocast
// states and random draws, under hooks that capture what the recomputation saves in the same order
// — and every slot then reads its tensor from there. The recomputed tensors belong to that pass:
// a slot's tensor is freed with the slot (when its node has run) and the rest when the pass ends,
// however it ends, so the backward frees the region's activations as it passes them, a second
// backward (retain_graph) recomputes, and passes on several threads over one retained graph each
// recompute their own (as PyTorch keys them by graph task).
#include <memory>
#include <mutex>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "mixgrad/autograd/backward_callbacks.h"
#include "mixgrad/autograd/grad_mode.h"
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

// A tensor as saved, with its version then (a later in-place write into it is an error on read).
struct Captured {
  Tensor tensor;
  uint64_t version = 0;
};
using CapturedValues = std::vector<Captured>;

class Frame;

// What a saved tensor of the checkpointed region keeps: its frame and its place in the order.
struct Slot {
  Slot(std::shared_ptr<Frame> f, std::size_t i) : frame(std::move(f)), index(i) {}
  Slot(const Slot&) = delete;  // one slot per saved tensor: its destructor frees that tensor
  Slot& operator=(const Slot&) = delete;
  ~Slot();
  std::shared_ptr<Frame> frame;
  std::size_t index;
};

// One checkpointed call: how to run it again, per saved tensor its metadata and live slot, the
// forward's tensors while fn runs, and per backward pass the recomputed ones.
class Frame : public std::enable_shared_from_this<Frame> {
 public:
  Frame(CheckpointFn fn, const Tensors& inputs) : fn_(std::move(fn)), autocast_(AutocastSnapshot::take()) {
    // Saved through the hooks in force outside this call: an enclosing checkpoint then
    // recomputes these inputs too instead of keeping them.
    for (const Tensor& t : inputs) inputs_.emplace_back(t, /*is_output=*/false);
  }

  // The forward's pack: a slot instead of the tensor (which the frame holds until fn returns).
  std::shared_ptr<Slot> add_slot(const std::shared_ptr<Frame>& self, const Tensor& t) {
    std::lock_guard<std::mutex> lock(mutex_);
    MG_ASSERT(in_forward_, kName, ": a tensor saved after the checkpointed call ended");
    auto slot = std::make_shared<Slot>(self, metas_.size());
    metas_.push_back({t.shape(), t.dtype(), t.device()});
    slots_.push_back(slot);
    forward_values_.push_back({t, t.version()});
    return slot;
  }

  // fn returned (or threw): from now on the saved tensors come from recomputations.
  void end_forward(GeneratorDraws draws) {
    std::lock_guard<std::mutex> lock(mutex_);
    in_forward_ = false;
    forward_values_.clear();
    draws_ = std::move(draws);
  }

  Tensor value(std::size_t index) {
    const uint64_t pass = autograd::current_pass_id();
    std::shared_ptr<CapturedValues> values;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (in_forward_) return forward_values_.at(index).tensor;  // a backward inside fn itself
      if (const auto it = passes_.find(pass); it != passes_.end()) {
        values = it->second;
      } else {
        MG_CHECK(!recomputing_.count(pass), AutogradError, kName, ": a tensor the checkpointed function saved was "
                 "needed while that function was being recomputed (a backward inside it reached past its own inputs)",
                 "\n  hint: differentiate only with respect to the function's inputs or tensors it computes");
        recomputing_.insert(pass);
      }
    }
    if (!values) values = recompute_for(pass);
    std::lock_guard<std::mutex> lock(mutex_);
    const Captured& c = values->at(index);
    MG_ASSERT(c.tensor.defined(), kName, ": saved tensor ", index, " was not kept by the recomputation");
    MG_CHECK(c.tensor.version() == c.version, AutogradError, kName, ": a tensor the recomputation saved for backward (",
             describe(c.tensor), ", the ", index + 1, ". saved) was modified by a later in-place operation of the "
             "checkpointed function (version ", c.version, " -> ", c.tensor.version(), ")",
             "\n  hint: use the out-of-place op (e.g. add instead of add_) or clone() before modifying");
    return c.tensor;
  }

  // A slot died (its node ran, or its graph is gone): nobody reads its tensor again.
  void drop(std::size_t index) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (index < forward_values_.size()) forward_values_[index] = {};
    for (auto& [pass, values] : passes_) {
      if (index < values->size()) (*values)[index] = {};
    }
  }

 private:
  // Runs the recomputation for backward pass `pass` (0: outside any pass, kept by nobody) and
  // files its values under the pass until the pass ends.
  std::shared_ptr<CapturedValues> recompute_for(uint64_t pass) {
    std::shared_ptr<CapturedValues> values;
    try {
      values = recompute();
    } catch (...) {
      std::lock_guard<std::mutex> lock(mutex_);
      recomputing_.erase(pass);
      throw;
    }
    std::lock_guard<std::mutex> lock(mutex_);
    recomputing_.erase(pass);
    if (pass != 0) {
      passes_[pass] = values;
      autograd::at_pass_end([weak = weak_from_this(), pass] {
        if (auto f = weak.lock()) f->forget(pass);
      });
    }
    return values;
  }

  void forget(uint64_t pass) {
    std::lock_guard<std::mutex> lock(mutex_);
    passes_.erase(pass);
  }

  std::shared_ptr<CapturedValues> recompute() {
    refuse_inside_capture();
    Tensors inputs;
    for (std::size_t i = 0; i < inputs_.size(); ++i) {  // version-checked
      inputs.push_back(inputs_[i].unpack(str_cat(kName, " (input ", i, " of the checkpointed function)")));
    }
    auto values = std::make_shared<CapturedValues>(metas_.size());
    std::size_t count = 0;
    {
      EnableGradGuard grad_on;  // fn must record (and save) as it did the first time
      AutocastRestore autocast(autocast_);
      GeneratorReplayer rng(draws_, kName);
      // The recomputation's own graph keeps what it saves (fn may run a backward through it).
      autograd::SavedTensorHooks capture(
          [this, &count, &values](const Tensor& t) -> std::any {
            const std::size_t k = count++;
            if (k < metas_.size()) {  // too many: reported below, once fn is done
              const SavedMeta& m = metas_[k];
              MG_CHECK(t.shape() == m.shape && t.dtype() == m.dtype && t.device() == m.device, AutogradError, kName,
                       ": the recomputation saved ", describe(t), " for backward where the first run saved ",
                       describe_meta(m), " (the ", k + 1, ". saved tensor)",
                       "\n  hint: a checkpointed function must compute the same thing each time it runs");
              if (!slots_[k].expired()) (*values)[k] = {t, t.version()};  // t carries no history
            }
            return t;
          },
          [](const std::any& packed) { return std::any_cast<const Tensor&>(packed); });
      fn_(inputs);
    }
    MG_CHECK(count == metas_.size(), AutogradError, kName, ": the recomputation saved ", count,
             " tensors for backward but the first run saved ", metas_.size(),
             "\n  hint: a checkpointed function must compute the same thing each time it runs");
    return values;
  }

  // Set while fn first runs, read-only after (recomputations on several threads read them).
  CheckpointFn fn_;
  std::vector<autograd::SavedTensor> inputs_;
  AutocastSnapshot autocast_;
  GeneratorDraws draws_;
  std::vector<SavedMeta> metas_;
  std::vector<std::weak_ptr<Slot>> slots_;
  // Guarded by mutex_.
  std::mutex mutex_;
  bool in_forward_ = true;
  CapturedValues forward_values_;                                         // while fn first runs
  std::unordered_map<uint64_t, std::shared_ptr<CapturedValues>> passes_;  // per backward pass
  std::unordered_set<uint64_t> recomputing_;                              // passes recomputing now
};

Slot::~Slot() { frame->drop(index); }

}  // namespace

Tensors checkpoint_recomputing(const CheckpointFn& fn, const Tensors& inputs) {
  auto frame = std::make_shared<Frame>(fn, inputs);
  // The pack holds the frame weakly: the frame lives through the slots of the saved tensors that
  // need it, and dies with the forward's graph when nothing was saved.
  std::weak_ptr<Frame> weak = frame;
  GeneratorRecorder recorder;  // fn's random draws, for the recomputations
  struct EndForward {          // also when fn throws
    Frame& frame;
    GeneratorRecorder& recorder;
    ~EndForward() { frame.end_forward(recorder.take()); }
  } end_forward{*frame, recorder};
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
  return fn(inputs);
}

}  // namespace mg::checkpoint_detail
