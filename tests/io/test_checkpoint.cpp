// Checkpoints: a Linear + BatchNorm1d model with optimizer-, loader-, rng- and train-like states
// round-trips exactly (64-bit ints, bit-exact floats including NaN payloads and -0.0, any text,
// generator state); restore_model refuses dtype/shape/key mismatches naming each tensor and changes
// nothing; version, kind and consistency checks; truncation; an interrupted save keeps the old file.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <zlib.h>

#include "autograd/grad_mode.h"
#include "core/state_dict.h"
#include "io/checkpoint.h"
#include "io/checksum.h"
#include "io/safetensors.h"
#include "io_test_util.h"
#include "nn/container.h"
#include "nn/linear.h"
#include "nn/normalization.h"
#include "test_util.h"

using namespace mg;
using namespace mg::test;

namespace {

std::shared_ptr<nn::Sequential> make_model(int64_t hidden = 3) {
  return std::make_shared<nn::Sequential>(std::vector<std::shared_ptr<nn::UnaryModule>>{
      nn::make<nn::Linear>({.in = 4, .out = hidden}), nn::make<nn::BatchNorm1d>({.features = hidden})});
}

// A trained-looking model: random weights, running statistics moved by two batches, and a batch
// counter beyond 2^53 (exact only if stored as a 64-bit integer).
std::shared_ptr<nn::Sequential> trained_model() {
  manual_seed(1);
  auto m = make_model();
  (*m)(randn({8, 4}));
  (*m)(randn({8, 4}));
  auto bn = m->at<nn::BatchNorm1d>(1);
  REQUIRE(bn->num_batches_tracked.item<int64_t>() == 2);
  bn->num_batches_tracked.data<int64_t>()[0] = (int64_t(1) << 62) + 7;
  return m;
}

double bits_to_double(uint64_t u) {
  double d;
  std::memcpy(&d, &u, 8);
  return d;
}
uint64_t double_bits(double d) {
  uint64_t u;
  std::memcpy(&u, &d, 8);
  return u;
}

StateDict awkward_state() {
  StateDict s;
  s.ints = {{"step", 123456789},
            {"max", std::numeric_limits<int64_t>::max()},
            {"min", std::numeric_limits<int64_t>::min()},
            {"2^53+1", (int64_t(1) << 53) + 1},
            {"minus_one", -1}};
  s.floats = {{"lr", 0.1},
              {"tiny", 1e-300},
              {"subnormal", 5e-324},
              {"neg_zero", -0.0},
              {"max", std::numeric_limits<double>::max()},
              {"third", 1.0 / 3.0},
              {"inf", HUGE_VAL},
              {"neg_inf", -HUGE_VAL},
              {"nan_payload", bits_to_double(0x7FF0000000000123ull)},  // signalling NaN, payload kept
              {"neg_nan", bits_to_double(0xFFF8000000000000ull)}};
  s.strings = {{"quotes", "say \"hi\" \\ 'there'"},
               {"newlines", "line 1\nline 2\r\n\ttabbed"},
               {"unicode", "λ=0.1 → ∞ 日本 🙂"},
               {"empty", ""},
               {"nul", std::string("a\0b", 3)}};
  s.tensors = {{"0.exp_avg", from_vector<float>({0.5f, -0.25f})},
               {"0.step", scalar_tensor(3.0, {.dtype = DType::I64})},
               {"1.exp_avg_sq", from_bits<uint16_t>({0x7E01, 0x8000, 0x0001}, {3}, DType::BF16)}};
  return s;
}

void require_same_state(const StateDict& got, const StateDict& want) {
  CHECK(got.ints == want.ints);
  CHECK(got.strings == want.strings);
  REQUIRE(got.floats.size() == want.floats.size());
  for (const auto& [k, v] : want.floats) {
    INFO("float " << k);
    REQUIRE(got.floats.count(k) == 1);
    CHECK(double_bits(got.floats.at(k)) == double_bits(v));
  }
  REQUIRE(got.tensors.size() == want.tensors.size());
  for (std::size_t i = 0; i < want.tensors.size(); ++i) {
    INFO("tensor " << want.tensors[i].first);
    CHECK(got.tensors[i].first == want.tensors[i].first);
    CHECK(same_bits(got.tensors[i].second, want.tensors[i].second));
  }
}

std::vector<std::string> snapshot(const nn::Module& m) {
  std::vector<std::string> out;
  for (const auto& [name, t] : m.state_dict()) out.push_back(name + ":" + raw_bytes(t));
  return out;
}

}  // namespace

TEST_CASE("checkpoint: model and states round-trip exactly", "[io][checkpoint]") {
  TempDir dir;
  const std::string path = dir.file("ckpt.safetensors");
  auto model = trained_model();
  Generator gen(42);
  (void)randn({5}, {}, &gen);  // move the generator along
  const StateDict opt = awkward_state();
  StateDict train;
  train.ints["step"] = 1000;
  train.floats["loss_scale"] = 65536.0;
  io::save_checkpoint(path, *model, {{"optimizer", opt}, {"train", train}, {"rng", generator_state(gen)}});

  const io::Checkpoint ck = io::load_checkpoint(path);
  CHECK(ck.path() == path);
  CHECK(ck.version() == io::kCheckpointVersion);
  CHECK(ck.state_names() == std::vector<std::string>{"optimizer", "train", "rng"});
  CHECK(ck.has_state("train"));
  CHECK_FALSE(ck.has_state("amp"));
  require_same_state(ck.state("optimizer"), opt);
  require_same_state(ck.state("train"), train);

  // The model state as saved, in order.
  const nn::NamedTensors saved = model->state_dict();
  REQUIRE(ck.model_state().size() == saved.size());
  for (std::size_t i = 0; i < saved.size(); ++i) {
    CHECK(ck.model_state()[i].first == saved[i].first);
    CHECK(same_bits(ck.model_state()[i].second, saved[i].second));
  }

  // Restore into a fresh, differently initialised model: identical tensors, parameters keep their
  // identity and requires_grad.
  manual_seed(99);
  auto fresh = make_model();
  const Tensor w = fresh->at<nn::Linear>(0)->weight;
  REQUIRE_FALSE(same_bits(w, model->at<nn::Linear>(0)->weight));
  ck.restore_model(*fresh);
  CHECK(snapshot(*fresh) == snapshot(*model));
  CHECK(fresh->at<nn::Linear>(0)->weight.is_same(w));
  CHECK(w.requires_grad());
  // Buffers too: the layer's own handle sees the restored 64-bit counter.
  CHECK(fresh->at<nn::BatchNorm1d>(1)->num_batches_tracked.data<int64_t>()[0] == (int64_t(1) << 62) + 7);

  // The generator continues the same stream.
  Generator restored(7);
  load_generator_state(restored, ck.state("rng"));
  CHECK(values(randn({6}, {}, &restored)) == values(randn({6}, {}, &gen)));
}

TEST_CASE("checkpoint: every double survives bit for bit", "[io][checkpoint]") {
  TempDir dir;
  std::mt19937_64 rng(5);
  StateDict s;
  for (int i = 0; i < 2000; ++i) {
    uint64_t u = rng();
    if (i % 4 == 1) u &= 0x800FFFFFFFFFFFFFull;  // subnormals
    if (i % 4 == 2) u |= 0x7FF0000000000000ull;  // inf and NaNs with random payloads and signs
    s.floats[std::to_string(i)] = bits_to_double(u);
    s.ints[std::to_string(i)] = int64_t(rng());
  }
  manual_seed(0);
  auto model = make_model();
  io::save_checkpoint(dir.file("c"), *model, {{"fuzz", s}});
  require_same_state(io::load_checkpoint(dir.file("c")).state("fuzz"), s);
}

TEST_CASE("checkpoint: the file is a safetensors file with a documented layout", "[io][checkpoint]") {
  TempDir dir;
  const std::string path = dir.file("ckpt.safetensors");
  manual_seed(0);
  auto model = make_model();
  StateDict opt;
  opt.tensors = {{"state.0.momentum", ones({3, 4})}};
  opt.ints["step"] = 5;
  opt.floats["lr"] = 0.1;
  opt.strings["kind"] = "sgd";
  io::save_checkpoint(path, *model, {{"optimizer", opt}});
  const io::SafetensorsFile f = io::load_safetensors(path);
  std::vector<std::string> names;
  for (const auto& [n, t] : f.tensors) names.push_back(n);
  CHECK(names == std::vector<std::string>{"model.0.weight", "model.0.bias", "model.1.weight", "model.1.bias",
                                          "model.1.running_mean", "model.1.running_var",
                                          "model.1.num_batches_tracked", "optimizer.state.0.momentum"});
  CHECK(f.at("model.1.num_batches_tracked").dtype() == DType::I64);
  CHECK(f.metadata.at("mixgrad.kind") == "checkpoint");
  CHECK(f.metadata.at("mixgrad.checkpoint_version") == "2");
  // One CRC-32 per tensor, in the header's order, of the bytes as Python's zlib.crc32 reads them.
  std::string crcs;
  for (const auto& [n, t] : f.tensors) {
    const std::string bytes = raw_bytes(t);
    char hex[9];
    std::snprintf(hex, sizeof hex, "%08lx", ::crc32(0, reinterpret_cast<const Bytef*>(bytes.data()), uInt(bytes.size())));
    crcs += hex;
  }
  CHECK(f.metadata.at("mixgrad.crc32") == crcs);
  CHECK(f.metadata.at("mixgrad.checkpoint") ==
        "{\"model\":[\"0.weight\",\"0.bias\",\"1.weight\",\"1.bias\",\"1.running_mean\",\"1.running_var\","
        "\"1.num_batches_tracked\"],\"states\":[{\"name\":\"optimizer\",\"tensors\":[\"state.0.momentum\"],"
        "\"ints\":{\"step\":5},\"floats\":{\"lr\":\"0.1\"},\"strings\":{\"kind\":\"sgd\"}}]}");
}

TEST_CASE("checkpoint: restore_model refuses mismatches, names each tensor and changes nothing", "[io][checkpoint][errors]") {
  TempDir dir;
  const std::string path = dir.file("ckpt.safetensors");
  auto model = trained_model();
  io::save_checkpoint(path, *model);
  const io::Checkpoint ck = io::load_checkpoint(path);
  manual_seed(3);

  SECTION("dtype mismatch") {
    auto other = make_model();
    other->at<nn::Linear>(0)->to(DType::F16);
    const auto before = snapshot(*other);
    const std::string msg = error_of([&] { ck.restore_model(*other); });
    INFO(msg);
    CHECK_THAT(msg, Catch::Matchers::StartsWith("Checkpoint.restore_model: \"" + path +
                                                "\" does not match the Sequential model; nothing was changed"));
    CHECK_THAT(msg, Catch::Matchers::Contains("dtype mismatches (2):\n    0.weight: checkpoint [3, 4] f32 cpu, model [3, 4] f16 cpu\n"
                                              "    0.bias: checkpoint [3] f32 cpu, model [3] f16 cpu"));
    CHECK_THAT(msg, Catch::Matchers::Contains("hint: cast the model"));
    CHECK(snapshot(*other) == before);  // the matching BatchNorm tensors were not applied either
  }
  SECTION("shape mismatch") {
    auto other = std::make_shared<nn::Sequential>(std::vector<std::shared_ptr<nn::UnaryModule>>{
        nn::make<nn::Linear>({.in = 5, .out = 3}), nn::make<nn::BatchNorm1d>({.features = 3})});
    const auto before = snapshot(*other);
    const std::string msg = error_of([&] { ck.restore_model(*other); });
    INFO(msg);
    CHECK_THAT(msg, Catch::Matchers::Contains("shape mismatches (1):\n    0.weight: checkpoint [3, 4] f32 cpu, model [3, 5] f32 cpu"));
    CHECK_THAT(msg, Catch::Matchers::Contains("nothing was changed"));
    CHECK(snapshot(*other) == before);
  }
  SECTION("missing and unexpected keys") {
    auto bigger = make_model();
    bigger->push_back(nn::make<nn::Linear>({.in = 3, .out = 2}));
    auto before = snapshot(*bigger);
    MG_REQUIRE_ERROR(ck.restore_model(*bigger), "missing keys (2):\n    2.weight\n    2.bias");
    CHECK(snapshot(*bigger) == before);

    auto smaller = std::make_shared<nn::Sequential>(
        std::vector<std::shared_ptr<nn::UnaryModule>>{nn::make<nn::Linear>({.in = 4, .out = 3})});
    before = snapshot(*smaller);
    const std::string msg = error_of([&] { ck.restore_model(*smaller); });
    CHECK_THAT(msg, Catch::Matchers::Contains("unexpected keys (5):\n    1.weight\n    1.bias\n    1.running_mean"));
    CHECK_THAT(msg, Catch::Matchers::Contains("hint: pass strict=false"));
    CHECK(snapshot(*smaller) == before);

    // strict = false restores what matches, and returns what it skipped.
    const nn::Module::LoadResult skipped = ck.restore_model(*smaller, /*strict=*/false);
    CHECK(skipped.missing_keys.empty());
    CHECK(skipped.unexpected_keys.size() == 5);
    CHECK(same_bits(smaller->at<nn::Linear>(0)->weight, model->at<nn::Linear>(0)->weight));
    ck.restore_model(*bigger, /*strict=*/false);
    CHECK(same_bits(bigger->at<nn::BatchNorm1d>(1)->running_var, model->at<nn::BatchNorm1d>(1)->running_var));
  }
}

TEST_CASE("checkpoint: a byte changed after the save is refused, naming its tensor", "[io][checkpoint][errors]") {
  CHECK(io::detail::crc32("123456789", 9) == 0xcbf43926u);  // the CRC-32 check value
  CHECK(io::detail::crc32_hex(0x0000abcdu) == "0000abcd");
  TempDir dir;
  const std::string path = dir.file("ckpt.safetensors");
  auto model = trained_model();
  StateDict opt;
  opt.tensors = {{"m", mul(arange(0, 16, 1, {.dtype = DType::F32}), full({16}, 0.37))}};
  io::save_checkpoint(path, *model, {{"optimizer", opt}});
  const std::string good = read_bytes(path);
  const std::string m_bytes = raw_bytes(opt.tensors[0].second);
  const std::size_t at = good.find(m_bytes);
  REQUIRE(at != std::string::npos);
  REQUIRE(good.find(m_bytes, at + 1) == std::string::npos);

  for (int bit : {0, 7}) {  // the lowest mantissa bit of element 8, a sign bit
    std::string bad = good;
    bad[at + 32 + (bit == 7 ? 3 : 0)] ^= char(1 << bit);
    write_bytes(path, bad);
    const std::string msg = error_of([&] { io::load_checkpoint(path); });
    INFO(msg);
    CHECK_THAT(msg, Catch::Matchers::StartsWith("load_checkpoint: \"" + path + "\": tensor \"optimizer.m\" ([16] f32 cpu): "
                                                "its data does not match the CRC-32 saved with it (saved "));
    CHECK_THAT(msg, Catch::Matchers::Contains("the file was damaged after it was written"));
    // The same bytes still open as plain safetensors: the structure is intact, only the data changed.
    CHECK(io::load_safetensors(path).tensors.size() == 8);
  }
  write_bytes(path, good);
  CHECK(io::load_checkpoint(path).state("optimizer").tensors.size() == 1);
}

TEST_CASE("checkpoint: a version 1 file (no checksums) still loads", "[io][checkpoint]") {
  TempDir dir;
  const std::string path = dir.file("v1.safetensors");
  auto model = trained_model();
  const StateDict opt = awkward_state();
  io::save_checkpoint(path, *model, {{"optimizer", opt}});
  // What version 1 wrote: the same file without "mixgrad.crc32".
  io::SafetensorsFile f = io::load_safetensors(path);
  f.metadata.erase("mixgrad.crc32");
  f.metadata["mixgrad.checkpoint_version"] = "1";
  io::save_safetensors(path, f.tensors, f.metadata);
  const io::Checkpoint ck = io::load_checkpoint(path);
  CHECK(ck.version() == 1);
  require_same_state(ck.state("optimizer"), opt);
  manual_seed(99);
  auto fresh = make_model();
  ck.restore_model(*fresh);
  CHECK(snapshot(*fresh) == snapshot(*model));
}

TEST_CASE("checkpoint: a missing state lists the saved ones", "[io][checkpoint][errors]") {
  TempDir dir;
  manual_seed(0);
  auto model = make_model();
  io::save_checkpoint(dir.file("c"), *model, {{"optimizer", StateDict{}}, {"loader", StateDict{}}});
  const io::Checkpoint ck = io::load_checkpoint(dir.file("c"));
  MG_REQUIRE_ERROR(ck.state("amp"), "has no state \"amp\"; it has \"optimizer\", \"loader\"");
  CHECK(ck.state("loader").ints.empty());
  io::save_checkpoint(dir.file("d"), *model);
  MG_REQUIRE_ERROR(io::load_checkpoint(dir.file("d")).state("amp"), "has no state \"amp\"; it has no states");
}

TEST_CASE("checkpoint: version, kind and consistency are checked on load", "[io][checkpoint][errors]") {
  TempDir dir;
  const std::string path = dir.file("ckpt.safetensors");
  manual_seed(0);
  auto model = make_model();
  StateDict opt;
  opt.tensors = {{"m", ones({2})}};
  opt.floats["lr"] = 0.5;
  io::save_checkpoint(path, *model, {{"optimizer", opt}});
  const io::SafetensorsFile good = io::load_safetensors(path);
  // Re-saves the checkpoint's tensors and metadata after `edit`.
  auto resave = [&](auto edit) {
    io::SafetensorsFile f = good;
    edit(f);
    io::save_safetensors(path, f.tensors, f.metadata);
  };
  auto require_error = [&](const std::string& text) {
    const std::string msg = error_of([&] { io::load_checkpoint(path); });
    INFO("message: " << msg);
    REQUIRE_THAT(msg, Catch::Matchers::StartsWith("load_checkpoint: \"" + path + "\""));
    REQUIRE_THAT(msg, Catch::Matchers::Contains(text));
  };

  SECTION("a newer version") {
    resave([](io::SafetensorsFile& f) { f.metadata["mixgrad.checkpoint_version"] = "3"; });
    require_error("written by a newer mixgrad (checkpoint format version 3; this build reads version 2)");
  }
  SECTION("version 2 without its checksums, or with malformed ones") {
    resave([](io::SafetensorsFile& f) { f.metadata.erase("mixgrad.crc32"); });
    require_error("the metadata has no \"mixgrad.crc32\" (format version 2 stores one)");
    resave([](io::SafetensorsFile& f) { f.metadata["mixgrad.crc32"].pop_back(); });
    require_error("expected 8 lowercase hex digits for each of the 8 tensors");
    resave([](io::SafetensorsFile& f) { f.metadata["mixgrad.crc32"][0] = 'G'; });
    require_error("expected 8 lowercase hex digits");
  }
  SECTION("a malformed version") {
    resave([](io::SafetensorsFile& f) { f.metadata["mixgrad.checkpoint_version"] = "1.0"; });
    require_error("invalid checkpoint format version \"1.0\"");
    resave([](io::SafetensorsFile& f) { f.metadata["mixgrad.checkpoint_version"] = "0"; });
    require_error("invalid checkpoint format version \"0\"");
    resave([](io::SafetensorsFile& f) { f.metadata.erase("mixgrad.checkpoint_version"); });
    require_error("the metadata has no \"mixgrad.checkpoint_version\"");
  }
  SECTION("a plain safetensors file") {
    io::save_safetensors(path, model->state_dict());
    require_error("not a mixgrad checkpoint (its metadata has no \"mixgrad.kind\": \"checkpoint\")");
  }
  SECTION("a tensor the JSON does not list") {
    resave([](io::SafetensorsFile& f) { f.tensors.emplace_back("extra.x", ones({1})); });
    require_error("tensor \"extra.x\" belongs to neither the model nor a state");
  }
  SECTION("a listed tensor the file lacks") {
    resave([](io::SafetensorsFile& f) {
      f.tensors.erase(std::find_if(f.tensors.begin(), f.tensors.end(), [](auto& p) { return p.first == "optimizer.m"; }));
    });
    require_error("state \"optimizer\" lists tensor \"optimizer.m\" but the file has no such tensor");
  }
  SECTION("a float that is not a float") {
    resave([](io::SafetensorsFile& f) { replace_once(f.metadata["mixgrad.checkpoint"], "\"lr\":\"0.5\"", "\"lr\":\"0.5x\""); });
    require_error("state \"optimizer\": float \"lr\" is \"0.5x\"");
  }
  SECTION("contents that are not JSON") {
    resave([](io::SafetensorsFile& f) { f.metadata["mixgrad.checkpoint"] = "{"; });
    require_error("the \"mixgrad.checkpoint\" metadata is not valid JSON");
  }
  SECTION("a truncated file") {
    const std::string bytes = read_bytes(path);
    write_bytes(path, bytes.substr(0, bytes.size() - 3));
    require_error("data_offsets");
    require_error("reach beyond the data buffer");
    write_bytes(path, bytes.substr(0, 4));
    require_error("too few for a safetensors file");
  }
}

TEST_CASE("checkpoint: invalid states are refused before anything is written", "[io][checkpoint][errors]") {
  TempDir dir;
  const std::string path = dir.file("c");
  manual_seed(0);
  auto model = make_model();
  StateDict bad_tensor;
  bad_tensor.tensors = {{"x", Tensor()}};
  StateDict dup;
  dup.tensors = {{"x", ones({1})}, {"x", ones({1})}};
  StateDict bad_text;
  bad_text.strings["s"] = "\xff\xfe";
  MG_REQUIRE_ERROR(io::save_checkpoint(path, *model, {{"model", StateDict{}}}), "\"model\" is reserved");
  MG_REQUIRE_ERROR(io::save_checkpoint(path, *model, {{"a.b", StateDict{}}}), "state names cannot contain '.'");
  MG_REQUIRE_ERROR(io::save_checkpoint(path, *model, {{"", StateDict{}}}), "a state has an empty name");
  MG_REQUIRE_ERROR(io::save_checkpoint(path, *model, {{"a", StateDict{}}, {"a", StateDict{}}}), "state \"a\": the name appears twice");
  MG_REQUIRE_ERROR(io::save_checkpoint(path, *model, {{"opt", bad_tensor}}), "state \"opt\": tensor \"x\" is undefined");
  MG_REQUIRE_ERROR(io::save_checkpoint(path, *model, {{"opt", dup}}), "state \"opt\": tensor key \"x\" appears twice");
  MG_REQUIRE_ERROR(io::save_checkpoint(path, *model, {{"opt", bad_text}}), "state \"opt\": string \"s\" is not valid UTF-8");
  CHECK(dir.entries().empty());
}

TEST_CASE("checkpoint: a save that fails part-way keeps the previous checkpoint", "[io][checkpoint][atomic]") {
  if (cuda_backend_present()) {
    WARN("skipped: this build has a CUDA backend, so the stand-in cuda tensor would be copied");
    return;
  }
  TempDir dir;
  const std::string path = dir.file("ckpt.safetensors");
  auto model = trained_model();
  io::save_checkpoint(path, *model, {{"train", StateDict{.ints = {{"step", 100}}}}});
  const std::string before = read_bytes(path);

  // The model's tensors are written, then the optimizer's tensor cannot be copied to the CPU.
  StateDict opt;
  opt.tensors = {{"exp_avg", fake_cuda_tensor({3, 4})}};
  const std::string msg = error_of([&] {
    io::save_checkpoint(path, *model, {{"train", StateDict{.ints = {{"step", 200}}}}, {"optimizer", opt}});
  });
  INFO(msg);
  CHECK_THAT(msg, Catch::Matchers::StartsWith("save_checkpoint: \"" + path + "\": tensor \"optimizer.exp_avg\""));
  CHECK_THAT(msg, Catch::Matchers::EndsWith("was not changed"));
  CHECK(read_bytes(path) == before);
  CHECK(dir.entries() == std::vector<std::string>{"ckpt.safetensors"});
  const io::Checkpoint ck = io::load_checkpoint(path);
  CHECK(ck.state("train").ints.at("step") == 100);
  manual_seed(5);
  auto fresh = make_model();
  ck.restore_model(*fresh);
  CHECK(snapshot(*fresh) == snapshot(*model));
}

TEST_CASE("checkpoint: a model state name that is not UTF-8 is an mg::Error at save", "[io][checkpoint][errors]") {
  // The contents are JSON text: the JSON library threw its own type_error (316) at dump().
  TempDir dir;
  struct Odd : nn::Module {
    Odd() : Module("Odd") { register_parameter("w\xff", zeros({1})); }
  } odd;
  MG_REQUIRE_ERROR(io::save_checkpoint(dir.file("c.mgc"), odd, {}), "is not valid UTF-8 (checkpoint names are text)");
}
