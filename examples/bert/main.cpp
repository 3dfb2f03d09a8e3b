// train_bert: BERT on the King James Bible, at any Apex opt level, on the CPU or a CUDA GPU
// (--device cuda). Two jobs:
//   --task mlm        pretraining by masked-language modelling on the training verses (BERT-mini
//                     by default), reporting masked-token accuracy and perplexity on held-out verses;
//   --task testament  fine-tuning a classifier, verse -> Old/New Testament (2 classes), and
//   --task book       verse -> book (66 classes), from the encoder of an mlm checkpoint
//                     (--pretrained FILE) or from scratch, beside the majority-class baseline.
// Either task can also start from a Hugging Face BERT directory (--hf DIR: config.json,
// model.safetensors, vocab.txt, e.g. bert-base-uncased saved by transformers), with its size and
// vocabulary.
// Real data from Debian's bible-kjv-text package; a WordPiece tokenizer trained on the training
// verses at start-up and stored in every checkpoint, so resumed and fine-tuning runs use exactly
// the pretraining vocabulary; AdamW (or --optimizer lamb, adafactor, muon) with linear warmup and decay, gradient clipping on the f32
// master gradients, gradient accumulation. Held out: corpus verse i with i % 10 == 9.
//
//   build/examples/train_bert --task mlm --checkpoint mlm.ckpt          # BERT-mini, O1 bf16
//   build/examples/train_bert --task testament --pretrained mlm.ckpt
//   build/examples/train_bert --task book --plot book.svg               # from scratch
//   build/examples/train_bert --task testament --hf bert-base-uncased   # a transformers checkpoint
//   build/examples/train_bert --help
//   build/launcher/mixgrad-run --nproc-per-node 2 build/examples/train_bert --task mlm   # data parallel
//
// Under mixgrad-run --batch-size is the global micro-batch: each rank takes batch / ranks verses
// from its DistributedSampler shard of the epoch's shuffle (examples/common/data_parallel.h), so
// a checkpoint (rank 0 writes it) resumes on any number of ranks.
//
// The file reads top to bottom: flags, data (corpus, tokenizer, datasets), model (and the
// pretrained encoder), amp, checkpoint/resume, the training loop (the step itself is train_step
// below), evaluation, summary.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <exception>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "amp/initialize.h"
#include "amp/overflow_tracer.h"
#include "amp/precision_plan.h"
#include "autograd/grad_mode.h"
#include "core/factory.h"
#include "core/parallel.h"
#include "core/state_dict.h"
#include "data/loader.h"
#include "data/text/verse_datasets.h"
#include "cuda/host/captured_step.h"
#include "examples/common/cuda_graph.h"
#include "examples/common/data_parallel.h"
#include "examples/common/device_tally.h"
#include "examples/common/flags.h"
#include "examples/common/format.h"
#include "examples/common/interrupt.h"
#include "examples/common/memory_fit.h"
#include "examples/common/metrics.h"
#include "examples/common/process_memory.h"
#include "examples/common/progress.h"
#include "examples/common/run_history.h"
#include "examples/common/table.h"
#include "examples/common/timer.h"
#include "examples/common/training_run.h"
#include "io/checkpoint.h"
#include "io/hf_bert.h"
#include "nn/models/bert.h"
#include "ops/loss.h"
#include "ops/ops.h"
#include "optim/optim.h"

using namespace mg;
using namespace mg::example;
using nn::models::BertConfig;
using nn::models::BertForMaskedLM;
using nn::models::BertForSequenceClassification;

namespace {

Flags make_flags() {
  Flags f("train_bert", "Pretrains BERT on the King James Bible by masked-language modelling, or fine-tunes it to "
                        "classify verses by testament or book, with mixed precision (Apex opt levels).");
  f.add_choice("task", "mlm", {"mlm", "testament", "book"}, "mlm pretraining, or verse classification: testament (2 classes) or book (66)");
  f.add_choice("model", "mini", {"tiny", "mini", "small", "base"}, "BERT size (Turc et al. 2019): tiny 2x128, mini 4x256, small 4x512, base 12x768 (layers x hidden)");
  f.add_string("pretrained", "", "testament/book: start from the encoder of this mlm checkpoint (empty: from scratch)", {.metavar = "FILE"});
  f.add_string("hf", "", "start from a Hugging Face BERT directory (config.json, model.safetensors, vocab.txt or tokenizer.json, as transformers' save_pretrained writes them): mlm continues pretraining it, testament/book fine-tune its encoder; its size and vocabulary are used", {.metavar = "DIR"});
  add_amp_flags(f);
  f.add_int("epochs", 0, "passes over the training verses (0: 5 for mlm, 3 for testament/book)", {.min = 0, .max = 1000000});
  f.add_int("batch-size", 32, "verses per micro-batch (the global micro-batch: split over the ranks under mixgrad-run)", {.min = 1});
  f.add_int("accumulate", 1, "micro-batches per optimizer step (gradient accumulation; effective batch = batch-size x accumulate)", {.min = 1});
  f.add_bool("checkpoint-activations", false, "recompute each encoder layer's activations in backward instead of keeping them (activation checkpointing: less memory, one more forward pass)");
  f.add_choice("checkpoint-form", "recompute", {"recompute", "reentrant"}, "with --checkpoint-activations: the recomputing form (saved-tensor hooks, PyTorch's use_reentrant=False) or the reentrant one (a nested backward per layer)");
  f.add_int("seq-len", 64, "tokens per sequence with [CLS] and [SEP] (64 holds 98.3% of the verses whole)", {.min = 3, .max = 512});
  f.add_int("vocab-size", 8192, "WordPiece vocabulary trained on the training verses (with --pretrained/--resume: the checkpoint's)", {.min = 64});
  f.add_choice("optimizer", "adamw", {"adamw", "lamb", "adafactor", "muon"},
               "AdamW; LAMB (Adam with a per-tensor trust ratio, for large batches); Adafactor (factored second "
               "moments: n + m values of state per [n, m] matrix instead of AdamW's 2nm; its lr caps the relative "
               "step size); or Muon (orthogonalised momentum) on the hidden layers' matrices with AdamW on the "
               "embeddings, the classifier, biases and LayerNorm weights, in one optimizer (Moonlight's match-RMS "
               "lr scale: AdamW's lr and weight decay serve both)");
  f.add_double("lr", 0, "peak learning rate (0: AdamW 5e-4 for mlm, 3e-4 for testament/book; Muon 4x AdamW's; LAMB and Adafactor 1e-2, their steps being relative to each tensor's size)", {.min = 0});
  f.add_double("weight-decay", 0.01, "decoupled weight decay (every optimizer's; not applied to biases and LayerNorm weights)", {.min = 0});
  f.add_double("warmup", 0.1, "linear warmup: a fraction of all steps when < 1, else a number of steps", {.min = 0});
  f.add_double("clip", 1.0, "max global gradient norm (0: no clipping; the norm is still reported)", {.min = 0});
  f.add_int("seed", 42, "seed of the weights, the data order, the masking and dropout", {.min = 0});
  f.add_int("train-examples", 0, "train on the first N verses' worth of batches of each (shuffled) epoch (0: all 27,992)", {.min = 0});
  f.add_int("eval-examples", 0, "evaluate on N held-out verses spread evenly over the Bible (0: all 3,110)", {.min = 0});
  f.add_int("eval-every", 0, "steps between evaluations besides the one after every epoch (0: after every epoch only)", {.min = 0});
  add_run_flags(f, 20, "per logged step, per evaluation, per epoch", "loss, held-out accuracy and loss scale");
  add_cuda_graph_flag(f);
  return f;
}

// ---- the tokenizer travels in every checkpoint ----
// Training it takes 0.3-0.5 s here and is deterministic, but a resumed or fine-tuning run must use
// exactly the ids the saved embeddings were trained with, whatever the flags or a later version of
// the trainer say. So the vocabulary itself is stored (one token per line, as vocab.txt) with its
// FNV-1a fingerprint, and read back from the checkpoint instead of being trained again.
uint64_t vocab_fingerprint(const std::vector<std::string>& vocab) {
  uint64_t h = 14695981039346656037ull;
  for (const std::string& t : vocab) {
    for (const char c : t + "\n") h = (h ^ uint8_t(c)) * 1099511628211ull;
  }
  return h;
}
std::string hex(uint64_t v) {
  char s[17];
  std::snprintf(s, sizeof s, "%016llx", (unsigned long long)v);
  return s;
}
// requested: the --vocab-size the vocabulary was trained for (0: not trained by train_bert, e.g.
// Hugging Face's). A corpus may yield fewer tokens than asked for; a resume with the same flag
// compares it with this, not with the size.
StateDict tokenizer_state(const data::WordPiece& tok, int64_t requested) {
  StateDict s;
  if (requested > 0) s.ints["requested_vocab_size"] = requested;
  std::string vocab;
  for (const std::string& t : tok.vocab()) vocab += t + "\n";
  s.strings["vocab"] = vocab;
  s.strings["fingerprint"] = hex(vocab_fingerprint(tok.vocab()));
  s.ints["lowercase"] = tok.options().lowercase;
  return s;
}
data::WordPiece tokenizer_from(const io::Checkpoint& ck) {
  MG_CHECK(ck.has_state("tokenizer"), Error, "", ck.path(), " holds no tokenizer; it was not written by train_bert");
  const StateDict& s = ck.state("tokenizer");
  std::vector<std::string> vocab;
  const std::string& text = s.string_at("tokenizer", "vocab");
  for (std::size_t at = 0, end; (end = text.find('\n', at)) != std::string::npos; at = end + 1) vocab.push_back(text.substr(at, end - at));
  MG_CHECK(hex(vocab_fingerprint(vocab)) == s.string_at("tokenizer", "fingerprint"), Error, "", ck.path(),
           ": the stored vocabulary does not match its fingerprint (a damaged checkpoint)");
  return data::WordPiece(std::move(vocab), {.lowercase = s.int_at("tokenizer", "lowercase") != 0});
}

// ---- the model's size travels in every checkpoint too ----
// A preset name ("mini") rebuilds it, but a Hugging Face model (--hf) has its own sizes, so the
// whole BertConfig is stored with the run and read back by --resume and --pretrained.
void store_config(StateDict& train, const BertConfig& c) {
  train.ints["bert.vocab_size"] = c.vocab_size;
  train.ints["bert.hidden"] = c.hidden;
  train.ints["bert.layers"] = c.layers;
  train.ints["bert.heads"] = c.heads;
  train.ints["bert.intermediate"] = c.intermediate;
  train.ints["bert.max_position"] = c.max_position;
  train.ints["bert.type_vocab_size"] = c.type_vocab_size;
  train.ints["bert.pad_token_id"] = c.pad_token_id.value_or(-1);  // -1: none
  train.floats["bert.dropout"] = c.dropout;
  train.floats["bert.layer_norm_eps"] = c.layer_norm_eps;
  train.floats["bert.initializer_range"] = c.initializer_range;
}
// The run's BertConfig: stored in the checkpoint (runs since the config was stored), else the
// preset `model_name` over the vocabulary.
BertConfig config_of(const io::Checkpoint* ck, const std::string& model_name, int64_t vocab) {
  if (!ck || !ck->state("train").ints.count("bert.hidden")) return BertConfig::preset(model_name, vocab);
  const StateDict& t = ck->state("train");
  BertConfig c;
  c.vocab_size = t.int_at("train_bert", "bert.vocab_size");
  c.hidden = t.int_at("train_bert", "bert.hidden");
  c.layers = t.int_at("train_bert", "bert.layers");
  c.heads = t.int_at("train_bert", "bert.heads");
  c.intermediate = t.int_at("train_bert", "bert.intermediate");
  c.max_position = t.int_at("train_bert", "bert.max_position");
  c.type_vocab_size = t.int_at("train_bert", "bert.type_vocab_size");
  const int64_t pad = t.int_at("train_bert", "bert.pad_token_id");
  c.pad_token_id = pad >= 0 ? std::optional<int64_t>(pad) : std::nullopt;
  c.dropout = t.float_at("train_bert", "bert.dropout");
  c.layer_norm_eps = t.float_at("train_bert", "bert.layer_norm_eps");
  c.initializer_range = t.float_at("train_bert", "bert.initializer_range");
  return c;
}

// ---- the two models behind one call ----
// What a forward pass predicts: logits at the N positions that have a target, and the targets.
// MLM: the masked tokens of the batch (N ~ 15% of its text tokens, C = vocab size);
// classification: one prediction per verse (N = B, C = 2 or 66). to(dtype) lets amp::forward cast
// the logits back to f32 at O2/O3.
struct Predictions {
  Tensor logits;  // [N, C]
  Tensor target;  // i64 [N]
  Predictions to(DType d) const { return {logits.to(d), target}; }
};
using Net = std::function<Predictions(const data::Batch&)>;

// BertForMaskedLM::forward scores every position [B, L, V]; only ~7% of them are masked at
// seq-len 64, so, as Google's BERT (gather_indexes), the head runs on the masked positions only:
// the same math as BertForMaskedLM's head on fewer rows, ~30% less work per step.
// The flat positions [N] i64 (on the CPU) of the predicted tokens of an MLM target [B, L] or
// [B*L] (those != -100). Reads a device target back.
Tensor masked_positions(const Tensor& target) {
  const Tensor host = contiguous(target.reshape({-1}).to(Device::cpu()));
  std::vector<int64_t> where;
  const int64_t* t = host.data<int64_t>();
  for (int64_t i = 0; i < host.numel(); ++i) if (t[i] != data::kIgnoreIndex) where.push_back(i);
  return from_vector(where, {int64_t(where.size())});
}

// An MLM batch (a target per position, [B, L]) still on the host gains "masked_positions", so the
// head's gather needs nothing read back from a device; other batches are returned as they are.
data::Batch with_masked_positions(data::Batch b) {
  if (b.contains("target") && b.at("target").dim() == 2 && b.at("target").device().is_cpu()) {
    b.add("masked_positions", masked_positions(b.at("target")));
  }
  return b;
}

Net mlm_net(std::shared_ptr<BertForMaskedLM> m) {
  return [m](const data::Batch& b) -> Predictions {
    auto scope = nn::module_scope(*m);
    const Tensor target = b.at("target").reshape({-1});  // [B*L], -100 = not predicted
    // The positions come with the batch (with_masked_positions, found before it left the host);
    // without them a device batch's targets are read back here (one synchronisation).
    const Tensor at = b.contains("masked_positions") ? b.at("masked_positions")
                                                     : masked_positions(target).to(target.device());  // [N]
    const Tensor h = m->bert->forward(b.at("input_ids"), Tensor(), b.at("attention_mask")).sequence;   // [B, L, H]
    const Tensor hm = index_select(h.reshape({-1, h.size(2)}), 0, at);                                // [N, H]
    const Tensor x = (*m->transform_norm)(gelu((*m->transform)(hm)));                               // [N, H]
    return {linear(x, m->bert->embeddings->word_embeddings->weight, m->decoder_bias), index_select(target, 0, at)};  // [N, V], [N]
  };
}
Net classifier_net(std::shared_ptr<BertForSequenceClassification> c) {
  return [c](const data::Batch& b) -> Predictions {
    return {c->forward(b.at("input_ids"), Tensor(), b.at("attention_mask")), b.at("target")};  // [B, C], [B]
  };
}

// ---- fine-tuning starts from the pretrained encoder ----
// BertForMaskedLM and BertForSequenceClassification hold the same BertModel under the same name,
// "bert", so an encoder tensor keeps its name ("bert.embeddings.word_embeddings.weight",
// "bert.encoder.3.linear1.weight", ...). The MLM head ("transform.*", "transform_norm.*",
// "decoder_bias"; its decoder weight is the tied word embedding) has no counterpart and is left
// behind; the classifier's own "bert.pooler.*" (an MLM model has no pooler) and "classifier.*"
// keep their fresh initialisation. Returns the classifier's name for an MLM name, "" for the head.
std::string classifier_name_of(const std::string& mlm_name) {
  return mlm_name.starts_with("bert.") ? mlm_name : "";
}
bool fresh_in_classifier(const std::string& name) {
  return name.starts_with("bert.pooler.") || name.starts_with("classifier.");
}

// Copies the encoder of the mlm checkpoint `ck` into `clf` and checks the transfer: the
// checkpoint must load strictly into a BertForMaskedLM of clf's configuration, every classifier
// tensor must be either transferred or one of the fresh ones above, and the two encoders must then
// compute identical hidden states on `probe`. Returns a one-line account.
std::string load_pretrained_encoder(BertForSequenceClassification& clf, const io::Checkpoint& ck, const data::Batch& probe) {
  BertForMaskedLM mlm(clf.bert->config());
  mlm.load_state_dict(ck.model_state());  // strict: lists every missing, unexpected or misshapen tensor
  nn::NamedTensors state = clf.state_dict();
  std::map<std::string, std::size_t> slot;
  for (std::size_t i = 0; i < state.size(); ++i) slot[state[i].first] = i;
  std::vector<bool> filled(state.size(), false);
  int64_t copied = 0, left = 0;
  for (const auto& [name, t] : ck.model_state()) {
    const std::string to = classifier_name_of(name);
    if (to.empty()) {
      left += t.numel();
      continue;
    }
    MG_CHECK(slot.count(to), Error, "--pretrained ", ck.path(), ": the encoder tensor '", name,
             "' has no counterpart '", to, "' in BertForSequenceClassification");
    state[slot[to]].second = t;
    filled[slot[to]] = true;
    copied += t.numel();
  }
  int64_t fresh = 0;
  for (std::size_t i = 0; i < state.size(); ++i) {
    if (filled[i]) continue;
    MG_CHECK(fresh_in_classifier(state[i].first), Error, "--pretrained ", ck.path(), ": the classifier's '",
             state[i].first, "' is not in the checkpoint");
    fresh += state[i].second.numel();
  }
  clf.load_state_dict(state);  // casts to the classifier's dtype (an O2 checkpoint holds bf16 weights)

  // The mapping's test: same encoder weights, same hidden states (eval mode: no dropout).
  NoGradGuard no_grad;
  mlm.eval();
  clf.eval();
  const Tensor a = mlm.bert->forward(probe.at("input_ids"), Tensor(), probe.at("attention_mask")).sequence;  // [B, L, H]
  const Tensor b = clf.bert->forward(probe.at("input_ids"), Tensor(), probe.at("attention_mask")).sequence;  // [B, L, H]
  clf.train();
  const double diff = amax(abs(a - b), {0, 1, 2}).item<double>();
  MG_CHECK(diff == 0.0, Error, "--pretrained ", ck.path(), ": the transferred encoder differs from the pretrained one by ",
           diff, " on ", a.size(0), " verses (the name mapping puts a tensor in the wrong place)");
  return "encoder " + format_count(copied) + " parameters from " + ck.path() + " (identical hidden states checked on " +
         std::to_string(a.size(0)) + " held-out verses); MLM head " + format_count(left) + " left behind; pooler + classifier " +
         format_count(fresh) + " fresh";
}

// ---- or from a Hugging Face checkpoint ----
// Copies the tensors of a Hugging Face directory (io::load_hf_bert, already under mixgrad's
// names) into `model`: every encoder tensor ("bert.*" but the pooler, which a BertForMaskedLM
// checkpoint has not) must be there with the model's shape; the heads it has (the MLM head, a
// pooler) are taken, the others (a new classifier) keep their fresh initialisation. Returns a
// one-line account.
std::string load_hf_weights(nn::Module& model, const io::HfBert& hf, const std::string& dir) {
  nn::NamedTensors state = model.state_dict();
  std::map<std::string, Tensor> saved(hf.state.begin(), hf.state.end());
  int64_t copied = 0, fresh = 0;
  std::string fresh_names;
  for (auto& [name, t] : state) {
    const auto it = saved.find(name);
    if (it != saved.end() && it->second.shape() == t.shape()) {
      t = it->second;
      copied += t.numel();
      saved.erase(it);
      continue;
    }
    MG_CHECK(!name.starts_with("bert.") || name.starts_with("bert.pooler."), Error, "--hf ", dir, ": the encoder tensor '",
             name, "' ", it == saved.end() ? "is not in model.safetensors" : "is " + describe(it->second) + " there but " + describe(t) + " here");
    fresh += t.numel();
    const std::size_t cut = name.find('.', name.starts_with("bert.") ? 5 : 0);  // "bert.pooler", "classifier"
    const std::string group = name.substr(0, cut);
    if (fresh_names.find(group) == std::string::npos) fresh_names += (fresh_names.empty() ? "" : ", ") + group;
  }
  int64_t left = 0;
  for (const auto& [name, t] : saved) left += t.numel();
  model.load_state_dict(state);  // casts nothing yet: the model is still f32 here
  return format_count(copied) + " parameters from " + dir + (hf.architecture.empty() ? "" : " (" + hf.architecture + ")") +
         "; fresh: " + (fresh ? format_count(fresh) + " (" + fresh_names + ")" : "none") + "; not used: " + format_count(left);
}

// ---- the training step ----
// A training step's results as the device holds them: nothing has been read back.
struct DeviceStep {
  Tensor loss;            // [] f64: mean of the micro-batch losses
  Tensor correct;         // [] i64: right predictions over all micro-batches
  Tensor grad_norm;       // [] before clipping; inf/NaN when the step overflowed
  int64_t predicted = 0;  // predictions made (known on the host: the batches' shapes)
  int64_t examples = 0;   // verses seen
};

// A step's results read on the host.
struct StepResult {
  double loss = 0;        // mean of the micro-batch losses
  int64_t correct = 0;    // right predictions (masked tokens or verses) over all micro-batches
  int64_t predicted = 0;  // predictions made
  int64_t examples = 0;   // verses seen
  double grad_norm = 0;   // before clipping; inf/NaN when the step overflowed
  bool skipped = false;
};

// --optimizer muon's groups: Muon on the hidden layers' matrices (the encoder's, the pooler's, the
// MLM transform's), AdamW (use_muon = 0) on the embeddings and the classifier with weight decay and
// on every 1-D parameter without, as Muon's authors split a transformer.
std::vector<optim::ParamGroupSpec> muon_groups(const nn::Module& model) {
  Tensors hidden, other_matrices, vectors;
  for (const auto& [name, p] : model.named_parameters()) {
    const bool input_or_output = name.find("embeddings") != std::string::npos || name.find("classifier") != std::string::npos;
    (p.dim() < 2 ? vectors : input_or_output ? other_matrices : hidden).push_back(p);
  }
  return {{.params = hidden},
          {.params = other_matrices, .options = {{"use_muon", 0.0}}},
          {.params = vectors, .options = {{"use_muon", 0.0}, {"weight_decay", 0.0}}}};
}

// Right predictions: a one-element i64 count on the predictions' device.
Tensor correct_count(const Predictions& p) { return eq(argmax(p.logits, 1), p.target).to(DType::I64).sum(); }

// One optimizer step at the opt level amp::initialize set up, over `accumulate` micro-batches:
// forward (inputs cast by the level), backward of the scaled loss / accumulate (all but the last
// micro-batch leave the gradients scaled; the last one unscales them into the f32 master gradients
// and checks them for inf/NaN), clip the master gradients, step (skipped after an overflow), schedule.
// Under mixgrad-run the micro-batches but the last accumulate locally (no_sync); the last backward
// averages the accumulated gradients across ranks.
// Nothing is read back from a device: the results stay device tensors (DeviceStep).
DeviceStep train_step(const Net& net, optim::Optimizer& opt, optim::LRScheduler& sched, data::DataLoader& loader,
                      int64_t accumulate, double clip, Device device, DataParallel& dp) {
  DeviceStep r;
  opt.zero_grad();
  for (int64_t k = 0; k < accumulate; ++k) {
    const std::optional<data::Batch> next = loader.next();
    MG_CHECK(next.has_value(), InternalError, "the loader ran out of batches in micro-batch ", k);
    const data::Batch b = to_device(with_masked_positions(*next), device);
    const Predictions p = amp::forward(net, b);                   // logits [N, C], target [N]
    const Tensor loss = cross_entropy(p.logits, p.target);        // mean over the N predictions
    const std::shared_ptr<void> local = k < accumulate - 1 ? dp.no_sync() : nullptr;
    amp::scale_loss(loss / double(accumulate), opt, {.delay_unscale = k < accumulate - 1}).backward();
    NoGradGuard no_grad;
    const Tensor part = loss.detach().to(DType::F64) / double(accumulate);  // summed in f64, in micro-batch order
    const Tensor right = correct_count(p);
    r.loss = k == 0 ? part : r.loss + part;
    r.correct = k == 0 ? right : r.correct + right;
    r.predicted += p.target.numel();
    r.examples += b.size();
  }
  r.grad_norm = dp.clip_grad_norm_(opt, amp::master_params(opt), clip > 0 ? clip : INFINITY);  // --zero: every shard's
  opt.step();
  sched.step();
  return r;
}

// The same step for --cuda-graph (one micro-batch), captured once and replayed by cuda::CapturedStep:
// amp::GradScaler scales, unscales into the f32 master gradients and decides on the device, the
// clipping norm stays a device value. in: the batch's tensors in `names` order; returns the device
// tensors {loss, correct, grad_norm}.
Tensors graph_step(const Net& net, optim::Optimizer& opt, amp::GradScaler& scaler, double clip,
                   const std::vector<std::string>& names, const Tensors& in) {
  data::Batch b;
  for (std::size_t i = 0; i < names.size(); ++i) b.tensors.emplace_back(names[i], in[i]);
  opt.zero_grad();
  const Predictions p = amp::forward(net, b);             // logits [N, C], target [N]
  const Tensor loss = cross_entropy(p.logits, p.target);
  scaler.scale(loss).backward();
  scaler.unscale_(opt);
  const Tensor norm = optim::clip_grad_norm_(amp::master_params(opt), clip > 0 ? clip : INFINITY);
  scaler.step(opt);
  scaler.update();
  return {loss, correct_count(p), norm};
}

// ---- evaluation on the held-out verses ----
struct EvalResult {
  double loss = 0, accuracy = 0, perplexity = 0;
  int64_t predicted = 0;
};

// MLM masks of held-out verses are drawn with this fixed seed (and epoch 0), so every evaluation,
// and every run whatever its --seed, scores the same masked positions.
constexpr uint64_t kEvalMaskSeed = 20240601;

EvalResult evaluate(nn::Module& model, const Net& net, const data::Dataset& set, const std::vector<int64_t>& examples,
                    Device device) {
  NoGradGuard no_grad;
  model.eval();
  double loss_sum = 0;
  int64_t right = 0, predicted = 0;
  for (std::size_t at = 0; at < examples.size(); at += 256) {
    const std::vector<int64_t> chunk(examples.begin() + at, examples.begin() + std::min(at + 256, examples.size()));
    const Predictions p =
        amp::forward(net, to_device(with_masked_positions(set.get_batch(chunk, {.seed = kEvalMaskSeed, .epoch = 0})), device));
    loss_sum += cross_entropy(p.logits.to(DType::F32), p.target, Reduction::Sum).item<double>();  // f32 sum per chunk, f64 across
    right += correct_count(p).item<int64_t>();
    predicted += p.target.numel();
  }
  model.train();
  const double loss = loss_sum / double(predicted);
  return {loss, double(right) / double(predicted), std::exp(loss), predicted};
}

int run(int argc, char** argv) {
  // ---- flags ----
  Flags flags = make_flags();
  if (!parse_flags(flags, argc, argv)) return 0;  // --help printed
  Stopwatch run_clock;  // the wall time reported at the end: data, model, memory check and training
  const std::string task = flags.value("task"), level = flags.value("opt-level"), dtype = flags.value("dtype");
  const Device device = training_device(flags);
  const bool mlm = task == "mlm";
  DataParallel dp = DataParallel::from_environment();  // one process, or a rank under mixgrad-run
  dp.quiet_unless_main();
  const bool graphed = flags.get_bool("cuda-graph");
  if (graphed) {
    check_cuda_graph({.device = device, .data_parallel = dp.active(), .trace_overflow = flags.get_bool("trace-overflow"),
                      .accumulate = flags.get_int("accumulate")});
    MG_CHECK(!mlm, Error, "--cuda-graph needs fixed shapes, but --task mlm gathers a different number of "
             "masked positions in every batch on the host\n  hint: use --task testament or book, or drop --cuda-graph");
    MG_CHECK(!flags.get_bool("checkpoint-activations"), Error, "--cuda-graph and --checkpoint-activations do not go "
             "together: activation checkpointing is not supported inside a CUDA graph capture\n  hint: drop one of them");
  }
  // Step results summed on the device and read at logging points only (--read-metrics; --cuda-graph).
  const bool lazy_reads = metrics_read_at_log_points(flags, device);
  MG_CHECK(!mlm || flags.value("pretrained").empty(), Error, "--pretrained is for fine-tuning (--task testament or book)",
           "\n  hint: to continue an mlm run, use --resume");
  const int64_t batch_size = flags.get_int("batch-size"), accumulate = flags.get_int("accumulate"),
                seq_len = flags.get_int("seq-len");
  const int64_t epochs = flags.get_int("epochs") > 0 ? flags.get_int("epochs") : (mlm ? 5 : 3);
  const std::string optimizer_name = flags.value("optimizer");
  // LAMB and Adafactor step by a fraction of each tensor's norm: 1e-2 matched AdamW's 5e-4 in a
  // short BERT-tiny MLM run (held-out loss after 3 epochs of 2,048 verses: 5.78 / 5.82 / 5.82).
  // Muon at 4x AdamW's: BERT-mini MLM, 4 epochs of 8,192 verses, held-out loss 5.22 / 4.92 / 4.62 /
  // 4.73 at 5e-4 / 1e-3 / 2e-3 / 4e-3, against AdamW's best 5.11 (at 5e-4; 5.20 at 1e-3).
  const double adamw_lr = mlm ? 5e-4 : 3e-4;
  const double lr = flags.get_double("lr") > 0       ? flags.get_double("lr")
                    : optimizer_name == "adamw" ? adamw_lr
                    : optimizer_name == "muon"  ? 4.0 * adamw_lr
                                                : 1e-2;
  const uint64_t seed = uint64_t(flags.get_int("seed"));
  // Checkpoints read before the model exists: they carry the tokenizer (and the pretrained model).
  std::optional<io::Checkpoint> resume, pretrained;
  if (!flags.value("resume").empty()) {
    resume = io::load_checkpoint(flags.value("resume"));
    MG_CHECK(resume->has_state("train") && resume->state("train").strings.count("program") &&
                 resume->state("train").strings.at("program") == "train_bert",
             Error, "", flags.value("resume"), " is not a train_bert checkpoint");
  } else if (!flags.value("pretrained").empty()) {
    pretrained = io::load_checkpoint(flags.value("pretrained"));
    MG_CHECK(pretrained->has_state("train") && pretrained->state("train").strings.count("task") &&
                 pretrained->state("train").strings.at("task") == "mlm",
             Error, "--pretrained ", flags.value("pretrained"), " is not a checkpoint of a train_bert --task mlm run");
  }
  // A Hugging Face directory: its size and vocabulary (on --resume the checkpoint has them).
  std::optional<io::HfBert> hf;
  if (!flags.value("hf").empty()) {
    MG_CHECK(flags.value("pretrained").empty(), Error, "--hf and --pretrained both give the starting weights; pass one");
    MG_CHECK(!flags.given("model") && !flags.given("vocab-size"), Error,
             "--hf takes the model's size and vocabulary from ", flags.value("hf"), "\n  hint: leave --model and --vocab-size out");
    if (!resume) hf = io::load_hf_bert(flags.value("hf"));
  }
  // The run whose model size and vocabulary this one must use.
  const io::Checkpoint* source = resume ? &*resume : pretrained ? &*pretrained : nullptr;
  std::string model_name = flags.value("model");
  if (hf) model_name = "hf-" + std::to_string(hf->config.layers) + "x" + std::to_string(hf->config.hidden);
  if (source) {
    const std::string saved = source->state("train").string_at("train_bert", "model");
    MG_CHECK(!flags.given("model") || model_name == saved, Error, "--model ", model_name, " but ", source->path(),
             " holds BERT-", saved, "\n  hint: leave --model out, or pass --model ", saved);
    model_name = saved;
  }

  // ---- data: corpus, tokenizer, datasets ----
  Stopwatch clock;
  const std::vector<data::Verse> bible = data::read_kjv();  // names the package when it is missing
  std::vector<data::Verse> train_verses;
  for (std::size_t i = 0; i < bible.size(); ++i) {
    if (data::in_split(int64_t(i), data::Split::Train)) train_verses.push_back(bible[i]);
  }
  const data::WordPiece tok = source ? tokenizer_from(*source)
                              : hf     ? data::WordPiece(hf->vocab, {.lowercase = hf->lowercase,
                                                                  .max_input_chars_per_word = hf->max_input_chars_per_word})
                                       : data::WordPiece::train(data::verse_texts(train_verses), {.vocab_size = flags.get_int("vocab-size")});
  MG_CHECK(!hf || tok.vocab_size() <= hf->config.vocab_size, Error, "--hf ", flags.value("hf"), ": vocab.txt holds ",
           tok.vocab_size(), " tokens but the model's embedding has ", hf->config.vocab_size, " rows");
  // The --vocab-size this vocabulary was trained for (saved with it), else the one asked now.
  int64_t requested_vocab = 0;
  if (source && source->has_state("tokenizer") && source->state("tokenizer").ints.count("requested_vocab_size")) {
    requested_vocab = source->state("tokenizer").ints.at("requested_vocab_size");
  } else if (!source && !hf) {
    requested_vocab = flags.get_int("vocab-size");
    if (tok.vocab_size() < requested_vocab) {
      std::printf("tokenizer: --vocab-size %s asked for more tokens than the training verses yield (%s)\n",
                  format_count(requested_vocab).c_str(), format_count(tok.vocab_size()).c_str());
    }
  }
  MG_CHECK(!source || !flags.given("vocab-size") || flags.get_int("vocab-size") == tok.vocab_size() ||
               flags.get_int("vocab-size") == requested_vocab, Error,
           "--vocab-size ", flags.get_int("vocab-size"), " but ", source->path(), " holds a vocabulary of ",
           tok.vocab_size(), " tokens\n  hint: leave --vocab-size out; the checkpoint's vocabulary is used");
  std::printf("tokenizer: %s WordPiece tokens %s (fingerprint %s; corpus and tokenizer %.2f s)\n", format_count(tok.vocab_size()).c_str(),
              source ? ("from " + source->path()).c_str() : hf ? ("from " + hf->vocab_path).c_str() : "trained on the training verses",
              hex(vocab_fingerprint(tok.vocab())).c_str(), clock.seconds());
  std::shared_ptr<const data::Dataset> train_set, eval_set;
  std::shared_ptr<const data::VerseClassificationDataset> train_cls, eval_cls;
  int64_t probe_example = 0;  // the longest training verse (the memory probe's worst case)
  if (mlm) {
    auto tr = std::make_shared<data::MlmVerseDataset>(bible, tok, data::MlmVerseOptions{.seq_len = seq_len, .split = data::Split::Train});
    eval_set = std::make_shared<data::MlmVerseDataset>(bible, tok, data::MlmVerseOptions{.seq_len = seq_len, .split = data::Split::HeldOut});
    for (int64_t i = 0; i < tr->size(); ++i) {
      if (tr->tokens(i).size() > tr->tokens(probe_example).size()) probe_example = i;
    }
    std::printf("data: %s training verses (%s longer than seq-len %lld, cut), %s held out\n", format_count(tr->size()).c_str(),
                format_count(tr->num_truncated()).c_str(), (long long)seq_len, format_count(eval_set->size()).c_str());
    train_set = tr;
  } else {
    const data::VerseTarget target = task == "book" ? data::VerseTarget::Book : data::VerseTarget::Testament;
    train_cls = std::make_shared<data::VerseClassificationDataset>(bible, tok, data::VerseClassificationOptions{.target = target, .seq_len = seq_len, .split = data::Split::Train});
    eval_cls = std::make_shared<data::VerseClassificationDataset>(bible, tok, data::VerseClassificationOptions{.target = target, .seq_len = seq_len, .split = data::Split::HeldOut});
    std::printf("data: %s\n      %s\n", train_cls->summary().c_str(), eval_cls->summary().c_str());
    train_set = train_cls;
    eval_set = eval_cls;
  }
  const int64_t eval_n = flags.get_int("eval-examples") > 0 ? std::min(flags.get_int("eval-examples"), eval_set->size()) : eval_set->size();
  std::vector<int64_t> eval_examples;  // spread evenly over the Bible, not the first books only
  for (int64_t k = 0; k < eval_n; ++k) eval_examples.push_back(k * eval_set->size() / eval_n);
  // The baseline a classifier must beat: always answer the training verses' majority class.
  double baseline = 0;
  if (!mlm) {
    const int64_t majority = train_cls->majority_class();
    for (const int64_t i : eval_examples) baseline += eval_cls->label(i) == majority ? 1.0 : 0.0;
    baseline /= double(eval_n);
    std::printf("majority-class baseline: always \"%s\" (the training verses' majority) scores %.4f on the %s evaluated held-out verses\n",
                train_cls->class_name(majority).c_str(), baseline, format_count(eval_n).c_str());
  }
  data::DataLoaderOptions loading = dp.loader_options(train_set->size(), batch_size, seed);  // this rank's shard
  loading.pin_memory = device.is_cuda();  // asynchronous copies to the GPU
  if (graphed) loading.drop_last = true;  // a graph replays one batch shape
  data::DataLoader loader(train_set, loading);
  const int64_t rank_batch = loading.batch_size;  // batch_size / ranks
  MG_CHECK(loader.num_batches() >= accumulate, Error, "--batch-size ", batch_size, " x --accumulate ", accumulate,
           " exceeds the ", train_set->size(), " training verses");
  const int64_t limit = flags.get_int("train-examples");
  const int64_t micro_batches = limit > 0 ? std::clamp<int64_t>(limit / batch_size, accumulate, loader.num_batches()) : loader.num_batches();
  const int64_t steps_per_epoch = micro_batches / accumulate;
  const int64_t total_steps = steps_per_epoch * epochs;

  // ---- model (and the pretrained encoder), optimizer, amp, schedule ----
  manual_seed(seed);
  const BertConfig cfg = hf ? hf->config : config_of(source, model_name, tok.vocab_size());
  MG_CHECK(seq_len <= cfg.max_position, Error, "--seq-len ", seq_len, " exceeds the model's ", cfg.max_position,
           " positions");
  std::shared_ptr<nn::Module> model;
  Net net;
  const bool recompute = flags.get_bool("checkpoint-activations");
  const CheckpointOptions checkpoint_form{.reentrant = flags.value("checkpoint-form") == "reentrant"};
  if (mlm) {
    auto m = std::make_shared<BertForMaskedLM>(cfg);
    m->bert->set_gradient_checkpointing(recompute, checkpoint_form);
    if (hf) std::printf("Hugging Face: %s\n", load_hf_weights(*m, *hf, flags.value("hf")).c_str());
    model = m;
    net = mlm_net(m);
  } else {
    auto c = std::make_shared<BertForSequenceClassification>(cfg, train_cls->num_classes());
    c->bert->set_gradient_checkpointing(recompute, checkpoint_form);
    if (hf) std::printf("Hugging Face: %s\n", load_hf_weights(*c, *hf, flags.value("hf")).c_str());
    if (pretrained) {
      const data::Batch probe = eval_cls->get_batch({0, eval_cls->size() / 2, eval_cls->size() - 1});
      std::printf("pretrained: %s\n", load_pretrained_encoder(*c, *pretrained, probe).c_str());
    }
    model = c;
    net = classifier_net(c);
  }
  model->to(device);  // before the optimizer and amp::initialize see the parameters
  // BERT's grouping: weight decay on matrices (linear and embedding weights), none on biases and
  // LayerNorm weights (every 1-D parameter).
  const double weight_decay = flags.get_double("weight-decay");
  std::vector<optim::ParamGroupSpec> groups;
  if (optimizer_name == "muon") {
    groups = muon_groups(*model);
    int64_t on_muon = 0;
    for (const Tensor& p : groups[0].params) on_muon += p.numel();
    std::printf("muon: %zu hidden matrices (%s parameters) on Muon, the rest (%s) on AdamW\n", groups[0].params.size(),
                format_count(on_muon).c_str(), format_count(model->num_parameters() - on_muon).c_str());
  } else {
    Tensors decay, no_decay;
    for (const Tensor& p : model->parameters()) (p.dim() >= 2 ? decay : no_decay).push_back(p);
    groups = {{.params = decay}, {.params = no_decay, .options = {{"weight_decay", 0.0}}}};
  }
  // --zero under mixgrad-run: each rank keeps the moments (and O2 masters) of its shard.
  optim::Optimizer& opt = dp.make_optimizer(
      groups,
      [&](const std::vector<optim::ParamGroupSpec>& shard) -> std::unique_ptr<optim::Optimizer> {
        if (optimizer_name == "lamb") return std::make_unique<optim::LAMB>(shard, optim::LAMBOptions{.lr = lr, .weight_decay = weight_decay});
        if (optimizer_name == "adafactor") {
          return std::make_unique<optim::Adafactor>(shard, optim::AdafactorOptions{.lr = lr, .weight_decay = weight_decay});
        }
        if (optimizer_name == "muon") {
          return std::make_unique<optim::Muon>(
              shard, optim::MuonOptions{.lr = lr, .weight_decay = weight_decay, .adjust_lr = optim::MuonOptions::kMatchRmsAdamW});
        }
        return std::make_unique<optim::AdamW>(shard, optim::AdamWOptions{.lr = lr, .weight_decay = weight_decay});
      },
      flags.get_bool("zero"));
  amp::initialize(model, opt, amp_options(flags));
  const double w = flags.get_double("warmup");
  // Clamped in double first: a huge --warmup would overflow llround.
  const int64_t warmup = std::llround(std::min(double(total_steps), w < 1 ? w * double(total_steps) : w));
  optim::WarmupLinearLR sched(opt, {.warmup_steps = warmup, .total_steps = total_steps});
  const std::string schedule = schedule_text({{"lr", lr}, {"weight decay", flags.get_double("weight-decay")},
                                              {"warmup steps", double(warmup)}, {"clip", flags.get_double("clip")}});
  // Part of the run's configuration: a resumed fine-tuning run names its --pretrained file again
  // (the weights come from the resume checkpoint; the file is not read).
  const std::string init = !flags.value("hf").empty() ? "hf" : mlm ? "" : flags.value("pretrained").empty() ? "scratch" : "pretrained";
  // --cuda-graph: graph_step with amp::GradScaler, captured after 3 eager steps and replayed; the
  // Apex front door's step gate (a host decision) is removed, the scaler decides on the device.
  std::optional<amp::GradScaler> graph_scaler;
  std::optional<cuda::CapturedStep> captured;
  std::optional<DeviceTally> tally;
  std::vector<std::string> batch_names;  // the order of the static inputs
  if (graphed) {
    graph_scaler.emplace(cuda_graph_scaler());
    opt.set_step_gate(nullptr);
    captured.emplace(
        [&](const Tensors& in) { return graph_step(net, opt, *graph_scaler, flags.get_double("clip"), batch_names, in); },
        std::vector<GraphParticipant*>{&opt, &*graph_scaler}, cuda::CapturedStepOptions{.device = device});
  }
  if (lazy_reads) tally.emplace(device);
  auto loss_scale = [&] { return graph_scaler ? graph_scaler->get_scale() : amp::loss_scale(); };
  auto skipped_total = [&] { return graph_scaler ? graph_scaler->skipped_iterations() : amp::loss_scaler().skipped_iterations(); };
  int64_t skipped_at_last_log = 0;  // lazy reads: "skipped since the last logging point" (set after the resume)
  const std::string precision = precision_label(level, dtype);
  std::printf("train_bert: %s, BERT-%s (%s parameters%s)%s, vocab %s, seq-len %lld, %s, batch %lld x %lld accumulated, "
              "%lld epochs x %lld steps, %s lr %s (warmup %lld steps, linear decay), on %s, %d CPU threads\n",
              task.c_str(), model_name.c_str(), format_count(model->num_parameters()).c_str(),
              recompute ? (checkpoint_form.reentrant ? ", activations recomputed per layer (reentrant)"
                                                     : ", activations recomputed per layer (recompute)")
                        : "",
              init.empty() ? "" : (init == "scratch" ? " from scratch" : init == "hf" ? " from the Hugging Face checkpoint" : " from the pretrained encoder"),
              format_count(tok.vocab_size()).c_str(), (long long)seq_len, precision.c_str(),
              (long long)batch_size, (long long)accumulate, (long long)epochs, (long long)steps_per_epoch,
              opt.name().c_str(), format_number(lr).c_str(), (long long)warmup, device.str().c_str(), num_threads());
  if (dp.active()) {
    std::printf("data parallel: %d ranks, each on %lld verses per micro-batch from its DistributedSampler shard of "
                "the epoch's shuffle (%lld verses), global batch %lld x %lld\n",
                dp.world_size(), (long long)rank_batch, (long long)loading.sampler->num_samples(), (long long)batch_size,
                (long long)accumulate);
  }
  std::printf("%s", dp.zero_summary(opt, flags.get_bool("zero")).c_str());
  std::printf("%s", amp::properties().str().c_str());
  if (flags.get_bool("precision-plan")) std::printf("%s", amp::precision_plan(*model, &opt).c_str());

  // ---- resume ----
  RunHistory history;
  int64_t step = 0;
  // The running sums of the current epoch (saved too, so a resumed epoch reports the same averages).
  double loss_sum = 0;
  int64_t right = 0, predicted = 0, seen = 0, skipped_at_epoch_start = 0;
  const std::string config = task + (init.empty() ? "" : " (" + init + ")") + " BERT-" + model_name + " vocab " +
                             std::to_string(tok.vocab_size()) + " seq-len " + std::to_string(seq_len) + " " + precision +
                             " batch " + std::to_string(batch_size) + "x" + std::to_string(accumulate) + " " +
                             std::to_string(epochs) + " epochs of " + std::to_string(steps_per_epoch) + " steps";
  if (resume) {
    const io::Checkpoint& ck = *resume;
    const std::string saved = ck.state("train").string_at("train_bert", "config");
    MG_CHECK(saved == config, Error, "", ck.path(), " was saved by a run with ", saved, ", not ", config,
             "\n  hint: resume with the flags of the saved run");
    // The settings first: the default lr follows --optimizer, so another optimizer would be
    // reported as another lr.
    check_resumed_settings(ck.state("train"), ck.path(), resume_settings(flags));
    check_resumed_schedule(ck.state("train"), ck.path(), schedule);
    TrainingState{*model, opt, sched, loader, history, graph_scaler ? &*graph_scaler : nullptr, &dp}.restore(ck);
    const StateDict& t = ck.state("train");
    step = t.int_at("train_bert", "step");
    loss_sum = t.float_at("train_bert", "epoch_loss_sum");
    right = t.int_at("train_bert", "epoch_correct");
    predicted = t.int_at("train_bert", "epoch_predicted");
    seen = t.int_at("train_bert", "epoch_seen");
    skipped_at_epoch_start = t.int_at("train_bert", "epoch_skipped_start");
    if (step >= epochs * steps_per_epoch) {
      std::printf("%s holds a finished run (step %lld of %lld): nothing to do\n", ck.path().c_str(), (long long)step,
                  (long long)(epochs * steps_per_epoch));
      return 0;
    }
    std::printf("resumed from %s at step %lld (epoch %lld)\n", ck.path().c_str(), (long long)step,
                (long long)(step / steps_per_epoch + 1));
  } else if (device.is_cuda()) {
    // The probe below measures host memory; on a GPU an allocation that does not fit is an
    // OutOfMemoryError naming the request and the allocator's statistics.
    std::printf("memory: on %s the caching allocator's peak is reported at the end\n", device.str().c_str());
  } else {
    // Fail now, with advice, if a micro-batch of this size cannot fit in memory.
    without_side_effects(*model, [&] {
      const MemoryEstimate e = check_batch_fits([&](int64_t b) {
        const data::Batch probe = train_set->get_batch(std::vector<int64_t>(std::size_t(b), probe_example), {.seed = seed});
        const Predictions p = amp::forward(net, probe);
        cross_entropy(p.logits, p.target).backward();
      }, rank_batch, flags.get_int("batch-size"));
      std::printf("memory: one micro-batch of %lld needs about %s MiB (%s KiB per verse); %s MiB available\n",
                  (long long)rank_batch, format_count(int64_t(e.predicted_bytes) >> 20).c_str(),
                  format_count(int64_t(e.bytes_per_sample) >> 10).c_str(), format_count(e.available_bytes >> 20).c_str());
    });
  }
  source = nullptr;  // free the checkpoints' tensors (BERT-base with AdamW state: ~1.3 GB)
  resume.reset();
  pretrained.reset();
  hf.reset();
  skipped_at_last_log = skipped_total();  // after the resume: the restored scaler's count
  dp.wrap(model, {&opt});  // after amp::initialize, the resume and the memory probe: rank 0's weights everywhere
  auto save = [&](const std::string& path) {
    const StateDict optimizer_state = dp.optimizer_state(opt);  // --zero: gathered from every rank's shard
    if (!dp.is_main()) return;  // rank 0 writes the checkpoints
    if (tally) {  // lazy reads: a Ctrl-C after this step's logging decision left steps in the tally
      const DeviceTally::Totals t = tally->read();
      loss_sum = t.loss_sum;
      right = t.correct;
    }
    StateDict train;
    train.ints["step"] = step;
    train.strings["program"] = "train_bert";
    train.strings["task"] = task;
    train.strings["model"] = model_name;
    store_config(train, cfg);
    train.strings["init"] = init.empty() ? "-" : init;
    train.strings["config"] = config;
    train.strings["schedule"] = schedule;
    train.strings["settings"] = resume_settings(flags);
    train.floats["epoch_loss_sum"] = loss_sum;
    train.ints["epoch_correct"] = right;
    train.ints["epoch_predicted"] = predicted;
    train.ints["epoch_seen"] = seen;
    train.ints["epoch_skipped_start"] = skipped_at_epoch_start;
    TrainingState{*model, opt, sched, loader, history, graph_scaler ? &*graph_scaler : nullptr, &dp, &optimizer_state}
        .save(path, {{"tokenizer", tokenizer_state(tok, requested_vocab)}, {"train", train}});
  };

  std::optional<MetricsWriter> metrics;
  if (!flags.value("metrics").empty() && dp.is_main()) metrics.emplace(flags.value("metrics"), MetricsOptions{.append = step > 0, .resume_step = step});
  std::optional<amp::OverflowTracer> tracer;
  if (flags.get_bool("trace-overflow")) tracer.emplace();
  bool traced_before = false;  // the first skipped step gets the full report
  InterruptGuard interrupt;
  const std::string eval_name = mlm ? "held-out masked-token accuracy" : "held-out accuracy";
  Table summary({{"epoch", Align::Right}, {"train loss", Align::Right}, {"train acc", Align::Right},
                 {"held-out loss", Align::Right}, {"held-out acc", Align::Right},
                 {mlm ? "perplexity" : "baseline", Align::Right}, {"loss scale", Align::Right},
                 {"skipped", Align::Right}, {"time", Align::Right}, {"verses/s", Align::Right}});
  const bool tty = is_terminal(stdout);
  int64_t steps_this_run = 0;
  EvalResult last_eval;
  auto evaluate_and_log = [&](int64_t epoch) {
    if (!dp.is_main()) return;  // rank 0 evaluates; the others wait for it at the next all-reduce
    last_eval = evaluate(*model, net, *eval_set, eval_examples, device);
    history.add_eval(step, last_eval.accuracy);
    if (metrics) {
      metrics->write({{"kind", "eval"}, {"task", task}, {"epoch", epoch + 1}, {"step", step}, {"eval_loss", last_eval.loss},
                      {"eval_accuracy", last_eval.accuracy},
                      {mlm ? "eval_perplexity" : "majority_baseline", mlm ? last_eval.perplexity : baseline},
                      {"eval_predictions", last_eval.predicted}});
    }
  };

  // ---- training ----
  for (int64_t epoch = step / steps_per_epoch; epoch < epochs; ++epoch) {
    loader.start_epoch(epoch);
    // A line every 10% of the epoch or every --log-every steps, whichever is more often; a resumed
    // epoch's ETA counts from its first step here.
    Progress bar(steps_per_epoch, "epoch " + std::to_string(epoch + 1) + "/" + std::to_string(epochs), std::cout, tty,
                 {.log_every = std::min((steps_per_epoch + 9) / 10, std::max<int64_t>(1, flags.get_int("log-every"))),
                  .first_step = std::clamp<int64_t>(step - epoch * steps_per_epoch, 0, steps_per_epoch)});
    amp::set_log_sink([&](const std::string& s) { bar.log(s.substr(0, s.find_last_not_of('\n') + 1)); });
    RateMeter rate;
    // Under mixgrad-run only rank 0 evaluates and saves at an epoch's end: the other ranks meet it
    // here (a collective) before their clocks start, so rank 0's evaluation is not counted in
    // their next epoch's time (their first all-reduce waited for it: the global rate read low).
    (void)dp.any(false);
    Stopwatch epoch_clock;
    double excluded_s = 0;  // mid-epoch evaluations and periodic saves: not training time
    const int64_t first = step % steps_per_epoch;
    if (first == 0) {
      loss_sum = 0;
      right = predicted = seen = 0;
      skipped_at_epoch_start = skipped_total();
    }
    const int64_t seen_before = seen;  // a resumed epoch's verses before the resume: not in this epoch_clock's time
    if (tally) tally->reset(loss_sum, right);  // the epoch's sums so far (a resumed epoch's saved ones)
    bool stop = false;
    bool interrupted = false;  // Ctrl-C on some rank, agreed over the ranks at every step
    for (int64_t i = first; i < steps_per_epoch && !stop; ++i) {
      Stopwatch step_clock;
      if (tracer) tracer->reset();
      StepResult r;
      bool fresh = true;  // r holds this step's values (lazy reads: only at logging points)
      DeviceStep d;
      if (captured) {
        const std::optional<data::Batch> next = loader.next();
        MG_CHECK(next.has_value(), InternalError, "the loader ran out of batches at step ", i);
        Tensors in;
        batch_names.clear();
        for (const auto& [name, t] : next->tensors) {
          batch_names.push_back(name);
          in.push_back(t);
        }
        const Tensors out = captured->run(in);  // {loss, correct, grad_norm} on the device
        sched.step();
        // One prediction per verse (the classifier tasks; --task mlm is refused with --cuda-graph).
        d = {out[0], out[1], out[2], next->size(), next->size()};
      } else {
        d = train_step(net, opt, sched, loader, accumulate, flags.get_double("clip"), device, dp);
      }
      // Ctrl-C on any rank stops every rank after this same step (saving the checkpoint is collective).
      interrupted = dp.any(interrupt.requested());
      r.examples = d.examples;
      if (lazy_reads) {
        tally->add(d.loss, d.correct, d.examples, d.predicted);
        const bool periodic = flags.get_int("checkpoint-every") > 0 && (step + 1) % flags.get_int("checkpoint-every") == 0;
        const bool eval_now = flags.get_int("eval-every") > 0 && (step + 1) % flags.get_int("eval-every") == 0;
        fresh = (step + 1) % flags.get_int("log-every") == 0 || i + 1 == steps_per_epoch || periodic || eval_now ||
                interrupted || steps_this_run + 1 == flags.get_int("stop-after");
      } else {
        r.loss = d.loss.item<double>();
        r.correct = d.correct.item<int64_t>();
        r.predicted = d.predicted;
        r.grad_norm = d.grad_norm.item<double>();
        r.skipped = opt.last_step_skipped();
      }
      const double step_time = step_clock.seconds();
      ++step;
      rate.add(d.examples);
      predicted += d.predicted;
      seen += d.examples;
      if (lazy_reads && fresh) {  // one synchronisation per logging point
        const DeviceTally::Totals t = tally->read();
        r.loss = t.last_loss;
        r.correct = t.correct - right;  // the interval's
        r.predicted = t.predictions;
        r.grad_norm = d.grad_norm.item<double>();
        const int64_t skipped_now = skipped_total();
        r.skipped = skipped_now > skipped_at_last_log;
        skipped_at_last_log = skipped_now;
        loss_sum = t.loss_sum;
        right = t.correct;
      } else if (!lazy_reads) {
        loss_sum += r.loss * double(r.examples);
        right += r.correct;
      }
      if (fresh) history.add_step(step, r.loss, loss_scale(), r.skipped);
      if (r.skipped && tracer && tracer->found()) {
        bar.log(skipped_step_trace(*tracer, step, !traced_before));
        traced_before = true;
      }
      if (fresh) {
        bar.update(i + 1, {{"loss", loss_sum / double(seen)}, {"acc", double(right) / double(predicted)}, {"scale", loss_scale()}},
                   rate.per_second());
      }
      if (metrics && fresh && (step % flags.get_int("log-every") == 0 || r.skipped)) {
        metrics->write({{"kind", "step"}, {"epoch", epoch + 1}, {"step", step}, {"loss", r.loss},
                        {"accuracy", double(r.correct) / double(r.predicted)}, {"predictions", r.predicted},
                        {"loss_scale", loss_scale()}, {"skipped", r.skipped}, {"skipped_steps", skipped_total()},
                        {"grad_norm", r.grad_norm}, {"lr", sched.get_last_lr()[0]}, {"step_time", step_time},
                        {"samples_per_s", rate.per_second()}, {"peak_rss", peak_rss_bytes()}});
      }
      if (flags.get_int("eval-every") > 0 && step % flags.get_int("eval-every") == 0 && i + 1 < steps_per_epoch) {
        const Stopwatch eval_clock;
        evaluate_and_log(epoch);
        excluded_s += eval_clock.seconds();
        bar.log("step " + std::to_string(step) + ": " + eval_name + " " + format_fixed(last_eval.accuracy, 4) +
                (mlm ? ", perplexity " + format_number(last_eval.perplexity) : ""));
      }
      const bool periodic = flags.get_int("checkpoint-every") > 0 && step % flags.get_int("checkpoint-every") == 0;
      stop = interrupted || ++steps_this_run == flags.get_int("stop-after");
      // A save due on the epoch's last step (periodic or a stop) happens after the epoch's
      // evaluation below, once, so that a resumed run starts the next epoch with this one fully
      // reported (as train_resnet).
      if (!flags.value("checkpoint").empty() && (periodic || stop) && i + 1 < steps_per_epoch) {
        const Stopwatch save_clock;
        save(flags.value("checkpoint"));
        excluded_s += save_clock.seconds();
      }
    }
    bar.finish();
    amp::set_log_sink(nullptr);
    if (step % steps_per_epoch == 0) {
      const double epoch_time = epoch_clock.seconds() - excluded_s;  // training time only
      const double rank_verses_per_s = double(seen - seen_before) / epoch_time;
      const double global_verses_per_s = dp.sum(rank_verses_per_s);
      if (dp.active()) {
        std::fprintf(stderr, "%s: epoch %lld: %s verses/s on this rank, %s verses/s over %d ranks; %s\n", dp.label().c_str(),
                     (long long)(epoch + 1), format_rate(rank_verses_per_s).c_str(), format_rate(global_verses_per_s).c_str(),
                     dp.world_size(), dp.comm_summary().c_str());
      }
      evaluate_and_log(epoch);
      const int64_t skipped = skipped_total() - skipped_at_epoch_start;
      const double verses_per_s = global_verses_per_s;
      const double third = mlm ? last_eval.perplexity : baseline;
      std::printf("epoch %lld: train loss %.4f acc %.4f | held-out loss %.4f acc %.4f %s %s | scale %s | %lld skipped | %s, %s verses/s\n",
                  (long long)(epoch + 1), loss_sum / double(seen), double(right) / double(predicted), last_eval.loss,
                  last_eval.accuracy, mlm ? "perplexity" : "baseline", mlm ? format_number(third).c_str() : format_fixed(third, 4).c_str(),
                  format_number(loss_scale()).c_str(),
                  (long long)skipped, format_duration(epoch_time).c_str(), format_rate(verses_per_s).c_str());
      summary.add_row({std::to_string(epoch + 1), format_fixed(loss_sum / double(seen), 4), format_fixed(double(right) / double(predicted), 4),
                       format_fixed(last_eval.loss, 4), format_fixed(last_eval.accuracy, 4), mlm ? format_number(third) : format_fixed(third, 4),
                       format_number(loss_scale()), std::to_string(skipped), format_duration(epoch_time), format_rate(verses_per_s)});
      if (metrics) {
        metrics->write({{"kind", "epoch"}, {"task", task}, {"epoch", epoch + 1}, {"step", step},
                        {"train_loss", loss_sum / double(seen)}, {"train_accuracy", double(right) / double(predicted)},
                        {"eval_loss", last_eval.loss}, {"eval_accuracy", last_eval.accuracy},
                        {mlm ? "eval_perplexity" : "majority_baseline", third}, {"loss_scale", loss_scale()},
                        {"skipped_steps", skipped}, {"epoch_time", epoch_time}, {"samples_per_s", verses_per_s},
                        {"peak_rss", peak_rss_bytes()}});
      }
      if (!flags.value("checkpoint").empty()) save(flags.value("checkpoint"));
    }
    // --stop-after on the run's last step: the run is complete, so it ends as one (summary, plot).
    if (stop && (interrupted || step < epochs * steps_per_epoch)) {
      const std::string why = interrupted ? std::string("interrupted by ") + (interrupt.requested() ? interrupt.signal_name() : "a signal on another rank")
                : "stopped (--stop-after)";
      std::printf("\n%s at step %lld%s\n", why.c_str(), (long long)step,
                  flags.value("checkpoint").empty() ? " (no --checkpoint given: nothing saved)"
                                                    : ("; checkpoint saved to " + flags.value("checkpoint")).c_str());
      return interrupted ? 130 : 0;
    }
  }

  // ---- summary ----
  std::printf("\n%s", summary.to_string().c_str());
  const double final_acc = history.eval_metric.empty() ? 0.0 : history.eval_metric.back();
  if (mlm) {
    std::printf("final %s %.4f, perplexity %s after %lld steps\n", eval_name.c_str(), final_acc,
                format_number(last_eval.perplexity).c_str(), (long long)step);
  } else {
    std::printf("final %s %.4f (%s) vs majority-class baseline %.4f after %lld steps\n", eval_name.c_str(), final_acc,
                init == "scratch" ? "from scratch" : init == "hf" ? "from the Hugging Face checkpoint" : "from the pretrained encoder",
                baseline, (long long)step);
  }
  std::printf("(%s; wall time %s; peak memory %s MiB)\n", config.c_str(), format_duration(run_clock.seconds()).c_str(),
              (format_count(peak_memory_bytes(device) >> 20) + (device.is_cuda() ? " on " + device.str() : "")).c_str());
  if (!flags.value("plot").empty() && dp.is_main()) {
    write_svg(flags.value("plot"), history.figure("train_bert: " + task + (init.empty() ? "" : " (" + init + ")") +
                                                  ", BERT-" + model_name + " " + precision, eval_name));
    std::printf("plot written to %s\n", flags.value("plot").c_str());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return run_main("train_bert", run, argc, argv); }
