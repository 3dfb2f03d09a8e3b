// train_resnet: a CIFAR-style ResNet (depth 20 by default) on Fashion-MNIST, or an ImageNet-style
// ResNet-18/34/50/101/152 (--arch resnet50) on synthetic ImageNet-shaped data, at any Apex opt
// level, on the CPU or a CUDA GPU (--device cuda). Fashion-MNIST: real data from Debian's
// dataset-fashion-mnist package, light augmentation (4-pixel padded random crops and horizontal
// flips), evaluation on the 10,000 test images. Synthetic (data/synthetic_images.h, no ImageNet
// here): 3 x 224 x 224 images of 1000 classes (--image-size, --classes to shrink), deterministic
// per --seed, labels a fixed function of the image so the loss falls; 1,281,167 training and
// 10,000 held-out examples. SGD with nesterov momentum and weight decay, a warmup-cosine learning
// rate, evaluation after every epoch.
//
//   build/examples/train_resnet                                  # ResNet-20, O1 bf16, 10 epochs
//   build/examples/train_resnet --opt-level O2 --dtype f16 --epochs 3 --plot run.svg
//   build/examples/train_resnet --device cuda --opt-level O2 --dtype f16
//   build/examples/train_resnet --channels-last                  # NHWC activations end to end
//   build/examples/train_resnet --device cuda --opt-level O2 --dtype f16 --cuda-graph   # one graph launch per step
//   build/examples/train_resnet --arch resnet50 --device cuda --opt-level O2 --dtype f16 --channels-last
//       --batch-size 256 --train-examples 25600 --epochs 1       # (one line) the ResNet-50 benchmark model
//   build/examples/train_resnet --arch resnet18 --image-size 64 --classes 100 --train-examples 3200 --epochs 1
//                                                                # (one line) small, on a CPU
//   build/examples/train_resnet --help
//   build/launcher/mixgrad-run --nproc-per-node 2 build/examples/train_resnet   # data parallel
//
// Under mixgrad-run (WORLD_SIZE > 1) the model is wrapped in DistributedDataParallel after
// amp::initialize, --batch-size is the global batch (each rank takes batch / ranks examples per
// step from its DistributedSampler shard of the same seeded per-epoch shuffle), rank 0 alone
// prints the logs, evaluates and writes checkpoints (which resume on any number of ranks), and
// every rank prints its own throughput beside the global one (examples/common/data_parallel.h).
//
// The file reads top to bottom: flags, data, model, amp, checkpoint/resume, the training loop (the
// step itself is train_step below), evaluation, summary.
#include <cmath>
#include <cstdio>
#include <exception>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "amp/initialize.h"
#include "amp/overflow_tracer.h"
#include "amp/precision_plan.h"
#include "autograd/grad_mode.h"
#include "core/parallel.h"
#include "core/state_dict.h"
#include "data/fashion_mnist.h"
#include "data/synthetic_images.h"
#include "data/loader.h"
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
#include "nn/models/resnet.h"
#include "ops/loss.h"
#include "ops/ops.h"
#include "optim/optim.h"

using namespace mg;
using namespace mg::example;

namespace {

Flags make_flags() {
  Flags f("train_resnet", "Trains a ResNet (CIFAR style on Fashion-MNIST, or ImageNet style on synthetic images) "
                          "with mixed precision (Apex opt levels).");
  add_amp_flags(f);
  f.add_string("keep-batchnorm-fp32", "", "O2/O3: keep batch norm in f32 (true|false; default: the opt level's)", {.metavar = "B"});
  f.add_choice("arch", "cifar", {"cifar", "resnet18", "resnet34", "resnet50", "resnet101", "resnet152"},
               "cifar: CIFAR-style ResNet of --depth; resnetNN: ImageNet style (7x7 stem, max pool, 4 stages)");
  // At most ResNet-1202, the deepest of He et al. 2016 (a depth in the billions would only exhaust memory).
  f.add_int("depth", 20, "CIFAR-style ResNet depth: 6n+2 (20, 32, 44, 56, 110, ..., 1202)", {.min = 8, .max = 1202});
  f.add_choice("data", "auto", {"auto", "fashion-mnist", "synthetic"},
               "training data (auto: fashion-mnist for --arch cifar, synthetic for resnetNN)");
  f.add_int("image-size", 224, "synthetic data: images are 3 x S x S", {.min = 8, .max = 4096});
  f.add_int("classes", 1000, "synthetic data: number of classes", {.min = 2, .max = 1000000});
  f.add_int("epochs", 10, "passes over the training set", {.min = 1, .max = 1000000});
  f.add_int("batch-size", 128, "examples per step (the global batch: split over the ranks under mixgrad-run)", {.min = 1});
  f.add_double("lr", 0.1, "peak learning rate", {.min = 0, .min_exclusive = true});
  f.add_double("weight-decay", 5e-4, "SGD weight decay", {.min = 0});
  f.add_double("warmup-epochs", 1, "linear warmup length in epochs", {.min = 0});
  f.add_int("seed", 42, "seed of the weights, the data order and the augmentation", {.min = 0});
  f.add_int("train-examples", 0, "train on N / batch-size steps of each epoch (rounded down, at least one; 0: the whole training set, 60,000 "
           "Fashion-MNIST images or 1,281,167 synthetic ImageNet-sized ones)", {.min = 0});
  f.add_int("eval-examples", 0, "evaluate on the first N test images (0: all 10,000)", {.min = 0});
  f.add_bool("zero-init-residual", false,
             "start the last batch norm of every residual block at weight 0, so each block begins as the identity "
             "(torchvision's zero_init_residual; keeps a deep ResNet's early evaluations finite)");
  f.add_bool("channels-last", false, "run the network NHWC (channels-last memory format, through amp::initialize)");
  add_cuda_graph_flag(f);
  add_run_flags(f, 50, "per logged step and per epoch", "loss, accuracy and loss scale");
  return f;
}

// Right predictions of logits [B, 10] against targets [B]: a one-element i64 count on their device.
Tensor correct_count(const Tensor& logits, const Tensor& target) {
  return eq(argmax(logits, 1), target).to(DType::I64).sum();
}

struct StepResult {
  float loss;
  int64_t correct;
  bool skipped;
  int64_t predicted = 0;  // the examples `correct` counts over (read at logging points: every step since the last read)
};

// One training step at the opt level amp::initialize set up: forward (inputs cast by the level),
// scaled backward, unscale + inf/NaN check, step (skipped on overflow), schedule. Returns the
// device tensors {loss, correct}: nothing is read back here.
Tensors train_step(nn::models::ResNet& model, optim::Optimizer& opt, optim::LRScheduler& sched, const data::Batch& b) {
  opt.zero_grad();
  const Tensor logits = amp::forward(model, b.at("input"));
  const Tensor loss = cross_entropy(logits, b.at("target"));
  amp::scale_loss(loss, opt).backward();
  opt.step();
  sched.step();
  return {loss, correct_count(logits, b.at("target"))};
}

// The same step for --cuda-graph, captured once and replayed (cuda::CapturedStep): the loss is
// scaled by amp::GradScaler, whose skip and scale decisions stay on the device, and the results
// are returned as device tensors {loss, correct} for a DeviceTally. in = {input, target}.
Tensors graph_step(nn::models::ResNet& model, optim::Optimizer& opt, amp::GradScaler& scaler, const Tensors& in) {
  opt.zero_grad();
  const Tensor logits = amp::forward(model, in[0]);
  const Tensor loss = cross_entropy(logits, in[1]);
  scaler.scale(loss).backward();
  scaler.step(opt);
  scaler.update();
  return {loss, correct_count(logits, in[1])};
}

struct EvalResult {
  double loss = 0, accuracy = 0;
};

EvalResult evaluate(nn::models::ResNet& model, const data::Dataset& test, int64_t limit, int64_t batch, Device device) {
  NoGradGuard no_grad;
  model.eval();
  data::DataLoader loader(std::shared_ptr<const data::Dataset>(&test, [](const data::Dataset*) {}),
                          {.batch_size = std::min(batch, test.size())});
  loader.start_epoch(0);
  double loss_sum = 0;
  int64_t seen = 0, right = 0;
  while (auto next = loader.next()) {
    if (seen >= limit) break;
    const std::optional<data::Batch> b = to_device(std::move(*next), device);
    // The first `limit` examples exactly: the last batch is cut down to what is left.
    const int64_t take = std::min(b->size(), limit - seen);
    const Tensor input = b->at("input").narrow(0, 0, take), target = b->at("target").narrow(0, 0, take);
    const Tensor logits = amp::forward(model, input).to(DType::F32);
    loss_sum += cross_entropy(logits, target, Reduction::Sum).item<double>();
    right += correct_count(logits, target).item<int64_t>();
    seen += take;
  }
  model.train();
  return {loss_sum / double(seen), double(right) / double(seen)};
}

int run(int argc, char** argv) {
  // ---- flags ----
  Flags flags = make_flags();
  if (!parse_flags(flags, argc, argv)) return 0;  // --help printed
  Stopwatch run_clock;  // the wall time reported at the end: data, model, memory check and training
  const int64_t batch_size = flags.get_int("batch-size"), epochs = flags.get_int("epochs");
  const std::string arch = flags.value("arch");
  const bool imagenet_style = arch != "cifar";
  const int64_t depth = imagenet_style ? std::stoll(arch.substr(6)) : flags.get_int("depth");  // "resnet50" -> 50
  MG_CHECK(imagenet_style || (depth - 2) % 6 == 0, Error, "--depth ", depth, " is not 6n+2\n  hint: use 20, 32, 44, 56 or 110");
  MG_CHECK(!(imagenet_style && flags.given("depth")), Error, "--depth applies to --arch cifar; --arch ", arch,
           " fixes the depth\n  hint: drop --depth, or pick the depth with --arch resnet18|34|50|101|152");
  const bool synthetic = flags.value("data") == "synthetic" || (flags.value("data") == "auto" && imagenet_style);
  MG_CHECK(synthetic || !(flags.given("image-size") || flags.given("classes")), Error,
           "--image-size and --classes apply to synthetic data\n  hint: add --data synthetic");
  const uint64_t seed = uint64_t(flags.get_int("seed"));
  const std::string level = flags.value("opt-level"), dtype = flags.value("dtype");
  const Device device = training_device(flags);
  DataParallel dp = DataParallel::from_environment();  // one process, or a rank under mixgrad-run
  dp.quiet_unless_main();
  const bool graphed = flags.get_bool("cuda-graph");
  if (graphed) {
    check_cuda_graph({.device = device, .data_parallel = dp.active(), .trace_overflow = flags.get_bool("trace-overflow")});
  }
  // Step results summed on the device and read at logging points only (--read-metrics; --cuda-graph).
  const bool lazy_reads = metrics_read_at_log_points(flags, device);

  // ---- data ----
  // Fashion-MNIST: 60,000 augmented training and 10,000 test images [1, 28, 28] of 10 classes.
  // Synthetic: ImageNet's 1,281,167 training images [3, S, S] and 10,000 held-out ones (the next
  // examples of the seed's stream: the same classes, other examples), no augmentation.
  std::shared_ptr<data::Dataset> train_set;
  std::unique_ptr<data::Dataset> test_set;
  int64_t in_channels = 1, num_classes = data::kFashionMnistClasses;
  std::string data_name = "Fashion-MNIST";
  if (synthetic) {
    const data::SyntheticImagesOptions o{.num_classes = flags.get_int("classes"), .channels = 3,
                                         .image_size = flags.get_int("image-size"), .seed = seed};
    train_set = std::make_shared<data::SyntheticImages>(o);
    data::SyntheticImagesOptions t = o;
    t.size = 10000;
    t.first_index = o.size;
    test_set = std::make_unique<data::SyntheticImages>(t);
    in_channels = o.channels;
    num_classes = o.num_classes;
    data_name = "synthetic " + std::to_string(o.image_size) + "x" + std::to_string(o.image_size) + " images of " +
                std::to_string(o.num_classes) + " classes";
  } else {
    train_set = std::make_shared<data::FashionMnist>(data::FashionMnistOptions{.train = true, .augment = true});
    test_set = std::make_unique<data::FashionMnist>(data::FashionMnistOptions{.train = false});
  }
  data::DataLoaderOptions loading = dp.loader_options(train_set->size(), batch_size, seed);  // this rank's shard
  loading.pin_memory = device.is_cuda();  // asynchronous copies to the GPU
  if (graphed) loading.drop_last = true;  // a graph replays one batch shape
  data::DataLoader loader(train_set, loading);
  const int64_t rank_batch = loading.batch_size;  // batch_size / ranks
  MG_CHECK(loader.num_batches() > 0, Error, "--batch-size ", batch_size, " exceeds the ", train_set->size(),
           " training images");
  const int64_t limit = flags.get_int("train-examples");
  const int64_t steps_per_epoch = limit > 0 ? std::clamp<int64_t>(limit / batch_size, 1, loader.num_batches()) : loader.num_batches();
  const int64_t eval_limit = flags.get_int("eval-examples") > 0 ? flags.get_int("eval-examples") : test_set->size();
  // 500 images per evaluation batch on 28 x 28; the training batch on ImageNet-sized images
  const int64_t eval_batch = synthetic ? rank_batch : 500;
  const int64_t total_steps = steps_per_epoch * epochs;

  // ---- model, optimizer, amp, schedule ----
  manual_seed(seed);
  nn::models::ResNetConfig model_config = imagenet_style ? nn::models::ResNetConfig::imagenet(depth, in_channels, num_classes)
                                                         : nn::models::ResNetConfig::cifar(depth, in_channels, num_classes);
  model_config.zero_init_residual = flags.get_bool("zero-init-residual");
  auto model = std::make_shared<nn::models::ResNet>(model_config);
  const std::string model_name = "ResNet-" + std::to_string(depth) + (imagenet_style ? " (ImageNet style)" : "");
  model->to(device);  // before the optimizer and amp::initialize see the parameters
  // --zero under mixgrad-run: each rank keeps the momentum of its shard of the parameters.
  const optim::SGDOptions sgd_options{.lr = flags.get_double("lr"), .momentum = 0.9, .nesterov = true,
                                      .weight_decay = flags.get_double("weight-decay")};
  optim::Optimizer& opt = dp.make_optimizer(
      {{.params = model->parameters()}},
      [&](const std::vector<optim::ParamGroupSpec>& groups) { return std::make_unique<optim::SGD>(groups, sgd_options); },
      flags.get_bool("zero"));
  amp::initialize(model, opt, amp_options(flags));
  // Clamped in double first: a huge --warmup-epochs would overflow llround.
  const int64_t warmup = std::llround(std::min(double(total_steps), flags.get_double("warmup-epochs") * double(steps_per_epoch)));
  optim::WarmupCosineLR sched(opt, {.warmup_steps = warmup, .total_steps = total_steps});
  const std::string schedule = schedule_text({{"lr", flags.get_double("lr")}, {"weight decay", flags.get_double("weight-decay")},
                                              {"warmup steps", double(warmup)}});
  // --cuda-graph: the step above with amp::GradScaler, captured after 3 eager steps and replayed;
  // the Apex front door's step gate (a host decision) is removed, the scaler decides on the device.
  std::optional<amp::GradScaler> graph_scaler;
  std::optional<cuda::CapturedStep> captured;
  std::optional<DeviceTally> tally;
  if (graphed) {
    graph_scaler.emplace(cuda_graph_scaler());
    opt.set_step_gate(nullptr);
    captured.emplace([&](const Tensors& in) { return graph_step(*model, opt, *graph_scaler, in); },
                     std::vector<GraphParticipant*>{&opt, &*graph_scaler}, cuda::CapturedStepOptions{.device = device});
  }
  if (lazy_reads) tally.emplace(device);
  auto loss_scale = [&] { return graph_scaler ? graph_scaler->get_scale() : amp::loss_scale(); };
  auto skipped_total = [&] { return graph_scaler ? graph_scaler->skipped_iterations() : amp::loss_scaler().skipped_iterations(); };
  int64_t skipped_at_last_log = 0;  // lazy reads: "skipped since the last logging point" (set after the resume)
  const std::string precision = precision_label(level, dtype);
  std::printf("train_resnet: %s (%s parameters) on %s, %s, batch %lld, %lld epochs x %lld steps, on %s, %d CPU threads\n",
              model_name.c_str(), format_count(model->num_parameters()).c_str(), data_name.c_str(), precision.c_str(),
              (long long)batch_size, (long long)epochs, (long long)steps_per_epoch, device.str().c_str(), num_threads());
  if (dp.active()) {
    std::printf("data parallel: %d ranks, each on %lld images per step from its DistributedSampler shard of the "
                "epoch's shuffle (%lld images), global batch %lld\n",
                dp.world_size(), (long long)rank_batch, (long long)loading.sampler->num_samples(), (long long)batch_size);
  }
  std::printf("%s", dp.zero_summary(opt, flags.get_bool("zero")).c_str());
  std::printf("%s", amp::properties().str().c_str());
  if (flags.get_bool("precision-plan")) std::printf("%s", amp::precision_plan(*model, &opt).c_str());

  // ---- resume ----
  RunHistory history;
  int64_t step = 0;
  // The running sums of the current epoch (saved too, so a resumed epoch reports the same averages).
  double loss_sum = 0;
  int64_t right = 0, seen = 0, skipped_at_epoch_start = 0;
  // Fashion-MNIST runs keep the config text of earlier versions, so their checkpoints still resume.
  const std::string config = model_name + " " + (synthetic ? "on " + data_name + " " : std::string()) + precision + " batch " +
                             std::to_string(batch_size) + " " + std::to_string(epochs) + " epochs of " +
                             std::to_string(steps_per_epoch) + " steps";
  if (!flags.value("resume").empty()) {
    const io::Checkpoint ck = io::load_checkpoint(flags.value("resume"));
    MG_CHECK(ck.has_state("train"), Error, "", flags.value("resume"), " is not a train_resnet checkpoint");
    const std::string saved = ck.state("train").string_at("train_resnet", "config");
    MG_CHECK(saved == config, Error, "", flags.value("resume"), " was saved by a run with ", saved,
             ", not ", config, "\n  hint: resume with the flags of the saved run");
    check_resumed_schedule(ck.state("train"), flags.value("resume"), schedule);
    check_resumed_settings(ck.state("train"), flags.value("resume"), resume_settings(flags));
    TrainingState{*model, opt, sched, loader, history, graph_scaler ? &*graph_scaler : nullptr, &dp}.restore(ck);
    const StateDict& t = ck.state("train");
    step = t.int_at("train_resnet", "step");
    loss_sum = t.float_at("train_resnet", "epoch_loss_sum");
    right = t.int_at("train_resnet", "epoch_correct");
    seen = t.int_at("train_resnet", "epoch_seen");
    skipped_at_epoch_start = t.int_at("train_resnet", "epoch_skipped_start");
    if (step >= epochs * steps_per_epoch) {
      std::printf("%s holds a finished run (step %lld of %lld): nothing to do\n", flags.value("resume").c_str(),
                  (long long)step, (long long)(epochs * steps_per_epoch));
      return 0;
    }
    std::printf("resumed from %s at step %lld (epoch %lld)\n", flags.value("resume").c_str(), (long long)step,
                (long long)(step / steps_per_epoch + 1));
  } else if (device.is_cuda()) {
    // The probe below measures host memory; on a GPU an allocation that does not fit is an
    // OutOfMemoryError naming the request and the allocator's statistics.
    std::printf("memory: on %s the caching allocator's peak is reported at the end\n", device.str().c_str());
  } else {
    // Fail now, with advice, if a step at this batch size cannot fit in memory.
    without_side_effects(*model, [&] {
      const MemoryEstimate e = check_batch_fits([&](int64_t b) {
        const data::Batch probe = train_set->get_batch(std::vector<int64_t>(std::size_t(b), 0), {.seed = seed});
        const Tensor loss = cross_entropy(amp::forward(*model, probe.at("input")), probe.at("target"));
        loss.backward();
      }, rank_batch, flags.get_int("batch-size"));
      std::printf("memory: one step at batch %lld needs about %s MiB (%s KiB per example); %s MiB available\n",
                  (long long)rank_batch, format_count(int64_t(e.predicted_bytes) >> 20).c_str(),
                  format_count(int64_t(e.bytes_per_sample) >> 10).c_str(), format_count(e.available_bytes >> 20).c_str());
    });
  }
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
    train.strings["config"] = config;
    train.strings["schedule"] = schedule;
    train.strings["settings"] = resume_settings(flags);
    train.floats["epoch_loss_sum"] = loss_sum;
    train.ints["epoch_correct"] = right;
    train.ints["epoch_seen"] = seen;
    train.ints["epoch_skipped_start"] = skipped_at_epoch_start;
    TrainingState{*model, opt, sched, loader, history, graph_scaler ? &*graph_scaler : nullptr, &dp, &optimizer_state}
        .save(path, {{"train", train}});
  };

  std::optional<MetricsWriter> metrics;
  if (!flags.value("metrics").empty() && dp.is_main()) metrics.emplace(flags.value("metrics"), MetricsOptions{.append = step > 0, .resume_step = step});
  std::optional<amp::OverflowTracer> tracer;
  if (flags.get_bool("trace-overflow")) tracer.emplace();
  bool traced_before = false;  // the first skipped step gets the full report
  InterruptGuard interrupt;
  Table summary({{"epoch", Align::Right}, {"train loss", Align::Right}, {"train acc", Align::Right},
                 {"test loss", Align::Right}, {"test acc", Align::Right}, {"loss scale", Align::Right},
                 {"skipped", Align::Right}, {"time", Align::Right}, {"samples/s", Align::Right}});
  const bool tty = is_terminal(stdout);
  int64_t steps_this_run = 0;
  bool stop = false;  // Ctrl-C or --stop-after: save and leave
  bool interrupted = false;  // Ctrl-C on some rank, agreed over the ranks at every step
  auto report_stop = [&] {
    const std::string why = interrupted ? std::string("interrupted by ") + (interrupt.requested() ? interrupt.signal_name() : "a signal on another rank")
                : "stopped (--stop-after)";
    std::printf("\n%s at step %lld%s\n", why.c_str(), (long long)step,
                flags.value("checkpoint").empty() ? " (no --checkpoint given: nothing saved)"
                                                  : ("; checkpoint saved to " + flags.value("checkpoint")).c_str());
    return interrupted ? 130 : 0;
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
    const int64_t first = step % steps_per_epoch;
    if (first == 0) {
      loss_sum = 0;
      right = seen = 0;
      skipped_at_epoch_start = skipped_total();
    }
    const int64_t seen_before = seen;  // a resumed epoch's examples before the resume: not in this epoch_clock's time
    if (tally) tally->reset(loss_sum, right);  // the epoch's sums so far (a resumed epoch's saved ones)
    for (int64_t i = first; i < steps_per_epoch; ++i) {
      const std::optional<data::Batch> batch = loader.next();
      MG_CHECK(batch.has_value(), InternalError, "the loader ran out of batches at step ", i);
      Stopwatch step_clock;
      if (tracer) tracer->reset();
      StepResult r{};
      bool fresh = true;  // r holds this step's values (lazy reads: only at logging points)
      Tensors out;        // {loss, correct} on the device
      if (captured) {
        out = captured->run({batch->at("input"), batch->at("target")});
        sched.step();
      } else {
        out = train_step(*model, opt, sched, to_device(*batch, device));
      }
      // Ctrl-C on any rank stops every rank after this same step (saving the checkpoint is collective).
      interrupted = dp.any(interrupt.requested());
      if (lazy_reads) {
        tally->add(out[0], out[1], batch->size());
        const bool periodic = flags.get_int("checkpoint-every") > 0 && (step + 1) % flags.get_int("checkpoint-every") == 0;
        fresh = (step + 1) % flags.get_int("log-every") == 0 || i + 1 == steps_per_epoch || periodic ||
                interrupted || steps_this_run + 1 == flags.get_int("stop-after");
      } else {
        r = {out[0].item<float>(), out[1].item<int64_t>(), opt.last_step_skipped(), batch->size()};
      }
      const double step_time = step_clock.seconds();
      ++step;
      rate.add(batch->size());
      seen += batch->size();
      if (lazy_reads && fresh) {  // one synchronisation per logging point
        const DeviceTally::Totals t = tally->read();
        const int64_t interval_right = t.correct - right;
        loss_sum = t.loss_sum;
        right = t.correct;
        const int64_t skipped_now = skipped_total();
        r = {float(t.last_loss), interval_right, skipped_now > skipped_at_last_log, t.predictions};
        skipped_at_last_log = skipped_now;
      } else if (!lazy_reads) {
        loss_sum += r.loss * double(batch->size());
        right += r.correct;
      }
      if (fresh) history.add_step(step, r.loss, loss_scale(), r.skipped);
      if (r.skipped && tracer && tracer->found()) {
        bar.log(skipped_step_trace(*tracer, step, !traced_before));
        traced_before = true;
      }
      if (fresh) {
        bar.update(i + 1, {{"loss", loss_sum / double(seen)}, {"acc", double(right) / double(seen)}, {"scale", loss_scale()}},
                   rate.per_second());
      }
      if (metrics && fresh && (step % flags.get_int("log-every") == 0 || r.skipped)) {
        metrics->write({{"kind", "step"}, {"epoch", epoch + 1}, {"step", step}, {"loss", r.loss},
                        {"accuracy", double(r.correct) / double(r.predicted)}, {"predictions", r.predicted},
                        {"loss_scale", loss_scale()},
                        {"skipped", r.skipped}, {"skipped_steps", skipped_total()},
                        {"lr", sched.get_last_lr()[0]}, {"step_time", step_time}, {"samples_per_s", rate.per_second()},
                        {"peak_rss", peak_rss_bytes()}});
      }
      const bool periodic = flags.get_int("checkpoint-every") > 0 && step % flags.get_int("checkpoint-every") == 0;
      stop = interrupted || ++steps_this_run == flags.get_int("stop-after");
      // A stop on the epoch's last step first finishes the epoch (evaluation, records, checkpoint).
      const bool last_step = i + 1 == steps_per_epoch;
      if (!flags.value("checkpoint").empty() && (periodic || stop) && !last_step) save(flags.value("checkpoint"));
      if (stop && !last_step) {
        bar.finish();
        amp::set_log_sink(nullptr);
        return report_stop();
      }
    }
    bar.finish();
    amp::set_log_sink(nullptr);
    const double epoch_time = epoch_clock.seconds();
    const double rank_samples_per_s = double(seen - seen_before) / epoch_time;
    const double global_samples_per_s = dp.sum(rank_samples_per_s);
    if (dp.active()) {
      std::fprintf(stderr, "%s: epoch %lld: %s samples/s on this rank, %s samples/s over %d ranks; %s\n", dp.label().c_str(),
                   (long long)(epoch + 1), format_rate(rank_samples_per_s).c_str(), format_rate(global_samples_per_s).c_str(),
                   dp.world_size(), dp.comm_summary().c_str());
    }
    // Rank 0 evaluates (the others go on and wait for it at the next all-reduce).
    const EvalResult test = dp.is_main() ? evaluate(*model, *test_set, eval_limit, eval_batch, device) : EvalResult{};
    history.add_eval(step, test.accuracy);
    const int64_t skipped = skipped_total() - skipped_at_epoch_start;
    const double samples_per_s = global_samples_per_s;
    std::printf("epoch %lld: train loss %.4f acc %.4f | test loss %.4f acc %.4f | scale %s | %lld skipped | %s, %s samples/s\n",
                (long long)(epoch + 1), loss_sum / double(seen), double(right) / double(seen), test.loss, test.accuracy,
                format_number(loss_scale()).c_str(), (long long)skipped, format_duration(epoch_time).c_str(),
                format_rate(samples_per_s).c_str());
    summary.add_row({std::to_string(epoch + 1), format_fixed(loss_sum / double(seen), 4), format_fixed(double(right) / double(seen), 4),
                     format_fixed(test.loss, 4), format_fixed(test.accuracy, 4), format_number(loss_scale()),
                     std::to_string(skipped), format_duration(epoch_time), format_rate(samples_per_s)});
    if (metrics) {
      metrics->write({{"kind", "epoch"}, {"epoch", epoch + 1}, {"step", step}, {"train_loss", loss_sum / double(seen)},
                      {"train_accuracy", double(right) / double(seen)}, {"test_loss", test.loss},
                      {"test_accuracy", test.accuracy}, {"loss_scale", loss_scale()}, {"skipped_steps", skipped},
                      {"epoch_time", epoch_time}, {"samples_per_s", samples_per_s}, {"peak_rss", peak_rss_bytes()}});
    }
    if (!flags.value("checkpoint").empty()) save(flags.value("checkpoint"));
    // --stop-after on the run's last step: the run is complete, so it ends as one (summary, plot).
    if (stop && (interrupted || epoch + 1 < epochs)) return report_stop();
  }

  // ---- summary ----
  std::printf("\n%s", summary.to_string().c_str());
  std::printf("final test accuracy %.4f after %lld steps (%s; wall time %s; peak memory %s MiB)\n",
              history.eval_metric.empty() ? 0.0 : history.eval_metric.back(), (long long)step, config.c_str(),
              format_duration(run_clock.seconds()).c_str(),
              (format_count(peak_memory_bytes(device) >> 20) + (device.is_cuda() ? " on " + device.str() : "")).c_str());
  if (!flags.value("plot").empty() && dp.is_main()) {
    write_svg(flags.value("plot"), history.figure("train_resnet: " + model_name + " " + precision,
                                                  "test accuracy"));
    std::printf("plot written to %s\n", flags.value("plot").c_str());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return run_main("train_resnet", run, argc, argv); }
