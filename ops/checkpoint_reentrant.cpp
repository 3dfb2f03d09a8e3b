// mg::checkpoint's reentrant form: forward runs fn under NoGradGuard and records one node over all outputs;
// its apply re-runs fn on detached copies of the saved inputs with grad mode on, the forward's
// autocast states and its random draws served again (no generator moves), then runs a nested
// backward through the recomputed graph and hands the inputs' gradients on.
#include "mixgrad/ops/checkpoint_detail.h"

#include <algorithm>

#include "mixgrad/autograd/backward_callbacks.h"
#include "mixgrad/autograd/engine.h"
#include "mixgrad/autograd/grad_mode.h"
#include "mixgrad/autograd/node.h"
#include "mixgrad/autograd/saved_tensor.h"
#include "mixgrad/core/error.h"
#include "mixgrad/core/generator.h"
#include "mixgrad/core/graph_rng.h"
#include "mixgrad/ops/inplace_view.h"
#include "mixgrad/ops/dispatcher.h"
#include "mixgrad/ops/op_node.h"
#include "mixgrad/ops/ops.h"

namespace mg::checkpoint_detail {
namespace {

constexpr const char* kName = "checkpoint";

class CheckpointNode final : public autograd::Node {
 public:
  CheckpointNode(CheckpointFn fn, const Tensors& inputs, std::vector<bool> needs, std::vector<TensorMeta> input_meta,
                 std::vector<TensorMeta> output_meta, std::vector<bool> aliases, AutocastSnapshot autocast,
                 GeneratorDraws draws)
      : Node(uint32_t(output_meta.size())), fn_(std::move(fn)), needs_(std::move(needs)),
        input_meta_(std::move(input_meta)), output_meta_(std::move(output_meta)), aliases_(std::move(aliases)),
        autocast_(autocast), draws_(std::move(draws)) {
    for (const Tensor& t : inputs) saved_.emplace_back(t, /*is_output=*/false);
  }

  bool output_aliases_input(uint32_t output_nr) const override {
    return output_nr < aliases_.size() && aliases_[output_nr];
  }

  Tensors apply(Tensors&& grads) override {
    MG_CHECK(!GradMode::is_enabled(), AutogradError, kName,
             ": create_graph (double backward) through a checkpointed function is not supported"
             "\n  hint: run that part without mg::checkpoint");
    // The recomputation's backward writes the .grad of the parameters fn reads, which
    // autograd::grad promises not to touch (PyTorch's reentrant checkpoint refuses it too).
    MG_CHECK(autograd::pass_accumulates_grad(), AutogradError, kName,
             ": autograd::grad through a checkpointed function is not supported (its recomputation's backward "
             "would write the .grad of the parameters inside it)\n  hint: use backward(), or run that part without "
             "mg::checkpoint");
    refuse_inside_capture();
    // The graph was freed by an earlier backward (no retain_graph): say so even when fn had no
    // saved input whose unpack would.
    MG_CHECK(bool(fn_), AutogradError, kName,
             ": tried to backward through the graph a second time, but the checkpointed function was released "
             "by the first backward\n  hint: pass retain_graph=true to the first backward");
    // Only the outputs that received a gradient seed the nested backward (no zeros are made for
    // the others); none: nothing to recompute.
    if (std::none_of(grads.begin(), grads.end(), [](const Tensor& g) { return g.defined(); })) {
      return Tensors(saved_.size());
    }
    // fn again, on history-free inputs, as the forward ran it.
    Tensors inputs;
    for (std::size_t i = 0; i < saved_.size(); ++i) {
      // An error if the input was modified in place since.
      Tensor t = saved_[i].unpack(str_cat(kName, " (input ", i, " of the checkpointed function)"));
      if (t.defined()) {
        t = t.detach();
        if (needs_[i]) t.requires_grad_(true);
      }
      inputs.push_back(t);
    }
    Tensors outputs;
    {
      EnableGradGuard grad_on;
      AutocastRestore autocast(autocast_);
      GeneratorReplayer rng(draws_, kName);
      outputs = fn_(inputs);
    }
    MG_CHECK(outputs.size() == output_meta_.size(), AutogradError, kName, ": the recomputation returned ",
             outputs.size(), " tensors but the first run ", output_meta_.size(),
             "\n  hint: a checkpointed function must compute the same thing each time it runs");
    Tensors roots, root_grads;
    for (std::size_t j = 0; j < outputs.size(); ++j) {
      MG_CHECK(outputs[j].defined() && outputs[j].shape() == output_meta_[j].shape, AutogradError, kName,
               ": output ", j, " of the recomputation is ", outputs[j].defined() ? describe(outputs[j]) : "undefined",
               " but was ", shape_str(output_meta_[j].shape), " in the first run",
               "\n  hint: a checkpointed function must compute the same thing each time it runs");
      if (outputs[j].requires_grad() && grads[j].defined()) {
        roots.push_back(outputs[j]);
        root_grads.push_back(grads[j].to(outputs[j].dtype()));
      }
    }
    // The nested backward: parameters read by fn accumulate into their .grad here. It is part of
    // the running pass: callbacks queued by hooks inside it (DDP's end of backward) run when the
    // outer pass ends, not when this one does.
    if (!roots.empty()) {
      autograd::JoinRunningPass join;
      autograd::backward(roots, root_grads);
    }
    Tensors result(inputs.size());
    for (std::size_t i = 0; i < inputs.size(); ++i) {
      if (needs_[i] && inputs[i].grad().defined()) result[i] = grad_for_input(inputs[i].grad(), input_meta_[i]);
    }
    return result;
  }
  std::string name() const override { return "CheckpointBackward"; }
  void release_saved() override {
    for (auto& s : saved_) s.release();
    fn_ = nullptr;  // what fn captured (modules, tensors) is released with the graph
    mark_released();
  }

 private:
  CheckpointFn fn_;
  std::vector<autograd::SavedTensor> saved_;
  std::vector<bool> needs_;
  std::vector<TensorMeta> input_meta_, output_meta_;
  std::vector<bool> aliases_;  // per output: shares memory with an input
  AutocastSnapshot autocast_;
  GeneratorDraws draws_;  // fn's random draws in the first run, served to the recomputation
};

}  // namespace

Tensors checkpoint_reentrant(const CheckpointFn& fn, const Tensors& inputs) {
  // Recorded (grad mode is on): stale views refreshed or refused as for any op (ops/inplace_view.h).
  for (std::size_t i = 0; i < inputs.size(); ++i) check_recorded_input_view(kName, i, inputs[i]);
  const AutocastSnapshot autocast = AutocastSnapshot::take();
  Tensors outputs;
  GeneratorDraws draws;
  {
    NoGradGuard no_grad;
    GeneratorRecorder recorder;
    outputs = fn(inputs);
    draws = recorder.take();
  }
  std::vector<bool> needs;
  std::vector<TensorMeta> in_meta, out_meta;
  for (const Tensor& t : inputs) {
    needs.push_back(t.defined() && t.requires_grad());
    in_meta.push_back({t.defined() ? t.shape() : Shape{}, t.defined() ? t.dtype() : DType::F32});
  }
  for (const Tensor& o : outputs) {
    MG_CHECK(o.defined(), Error, kName, ": the function returned an undefined tensor");
    out_meta.push_back({o.shape(), o.dtype(), MemoryFormat::Contiguous, o.device()});
  }
  // Outputs sharing memory with an input refuse in-place writes (they would bypass the recomputation).
  std::vector<bool> aliases = mark_input_aliases(outputs, inputs);
  // Always recorded while grad mode is on: the parameters fn reads need their gradients even when
  // no input requires one (the first layer's input is data).
  auto node = std::make_shared<CheckpointNode>(fn, inputs, needs, in_meta, out_meta, std::move(aliases), autocast,
                                                    std::move(draws));
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    node->next_edges.push_back(needs[i] ? autograd::gradient_edge(inputs[i]) : autograd::Edge{});
  }
  autograd::set_history(outputs, node);
  return outputs;
}

}  // namespace mg::checkpoint_detail
