// nn::RNN, nn::LSTM and nn::GRU (nn/rnn.h) against PyTorch 2.15's torch.nn.RNN / LSTM / GRU in f64
// (tests/data/reference/torch_rnn.json, written by tools/reference/gen_torch_rnn.py): 18 cases,
// tanh and relu RNNs, LSTMs and GRUs with 1 and 2 layers, bidirectional, batch_first, without bias,
// with and without h0/c0, T = 1 and B = 1, LSTMs with proj_size, and packed sequences (sorted and
// unsorted lengths, through pack_padded_sequence and pad_packed_sequence), and unbatched 2-D input. For each case the parameter names, order and shapes
// must be PyTorch's exactly; PyTorch's parameters are copied in by name, and output, h_n, c_n and
// the gradients of L = sum(output r_out) + sum(h_n r_h) (+ sum(c_n r_c)) with respect to x, h0, c0
// and every parameter must match to 1e-11 relative (margin 1e-13). Then: the default
// initialisation U(-1/sqrt(H), 1/sqrt(H)) of every parameter, one LSTM case in f32 against the f64
// reference (1e-5), an f32 LSTM under CPU bf16 autocast (close to f32, bf16 output), dropout
// between layers (reproducible from a seeded Generator, training only, never on layer 0's h_n/c_n),
// and the refusals of bad inputs and options.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "amp/autocast.h"
#include "autograd/engine.h"
#include "autograd/grad_mode.h"
#include "core/factory.h"
#include "core/generator.h"
#include "nn/rnn.h"
#include "ops/ops.h"
#include "reference/json_reference.h"
#include "test_paths.h"
#include "test_util.h"

using namespace mg;
using mg::test::values;

namespace {

nlohmann::json load() { return test::load_json_reference("torch_rnn.json"); }

// {"shape": [...], "values": [...]} -> an f64 tensor; null -> undefined.
Tensor tensor_of(const nlohmann::json& j) {
  if (j.is_null()) return Tensor();
  return from_vector<double>(j["values"].get<std::vector<double>>(), j["shape"].get<std::vector<int64_t>>());
}

void check_close(const Tensor& got, const std::vector<double>& want, double tol, double margin, const char* what) {
  INFO(what);
  REQUIRE(got.defined());
  const std::vector<double> g = values(got);
  REQUIRE(g.size() == want.size());
  for (std::size_t i = 0; i < g.size(); ++i) {
    INFO("element " << i);
    CHECK(g[i] == Approx(want[i]).epsilon(tol).margin(margin));
  }
}

nn::RNNOptions options_of(const nlohmann::json& o) {
  return {.input_size = o["input_size"].get<int64_t>(),
          .hidden_size = o["hidden_size"].get<int64_t>(),
          .num_layers = o["num_layers"].get<int64_t>(),
          .bias = o["bias"].get<bool>(),
          .batch_first = o["batch_first"].get<bool>(),
          .dropout = o["dropout"].get<double>(),
          .bidirectional = o["bidirectional"].get<bool>(),
          .nonlinearity = o["nonlinearity"].get<std::string>() == "relu" ? nn::RNNNonlinearity::Relu
                                                                        : nn::RNNNonlinearity::Tanh,
          .proj_size = o.value("proj_size", int64_t(0))};
}

// One of the three layers behind a common forward (c_n undefined for RNN and GRU).
struct Layer {
  std::string mode;  // "RNN", "LSTM" or "GRU"
  std::shared_ptr<nn::RNNBase> module;

  nn::LSTMOutput forward(const Tensor& x, const Tensor& h0 = Tensor(), const Tensor& c0 = Tensor()) const {
    if (mode == "LSTM") return std::static_pointer_cast<nn::LSTM>(module)->forward(x, h0, c0);
    const nn::RNNOutput o = mode == "GRU" ? std::static_pointer_cast<nn::GRU>(module)->forward(x, h0)
                                          : std::static_pointer_cast<nn::RNN>(module)->forward(x, h0);
    return {o.output, o.h_n, Tensor()};
  }
  // pack_padded_sequence(x, lengths), the layer, pad_packed_sequence back to x's T steps.
  nn::LSTMOutput forward_packed(const Tensor& x, const std::vector<int64_t>& lengths, bool enforce_sorted,
                                const Tensor& h0, const Tensor& c0) const {
    const bool batch_first = module->options().batch_first;
    const nn::PackedSequence packed = nn::pack_padded_sequence(x, lengths, batch_first, enforce_sorted);
    const int64_t T = x.size(batch_first ? 1 : 0);
    nn::LSTMOutput o;
    if (mode == "LSTM") {
      const nn::PackedLSTMOutput r = std::static_pointer_cast<nn::LSTM>(module)->forward(packed, h0, c0);
      o = {nn::pad_packed_sequence(r.output, batch_first, 0.0, T).first, r.h_n, r.c_n};
    } else {
      const nn::PackedRNNOutput r = mode == "GRU" ? std::static_pointer_cast<nn::GRU>(module)->forward(packed, h0)
                                                  : std::static_pointer_cast<nn::RNN>(module)->forward(packed, h0);
      o = {nn::pad_packed_sequence(r.output, batch_first, 0.0, T).first, r.h_n, Tensor()};
    }
    return o;
  }
};

Layer make_layer(const std::string& mode, const nn::RNNOptions& options) {
  if (mode == "LSTM") return {mode, nn::make<nn::LSTM>(options)};
  if (mode == "GRU") return {mode, nn::make<nn::GRU>(options)};
  REQUIRE(mode == "RNN");
  return {mode, nn::make<nn::RNN>(options)};
}

// Checks that the module's named parameters are PyTorch's (names, order, shapes) and copies
// PyTorch's values in, cast to each parameter's dtype. Returns the parameters in that order.
Tensors copy_parameters(const nn::Module& m, const nlohmann::json& params) {
  const nn::NamedTensors named = m.named_parameters();
  std::vector<std::string> names, want_names;
  std::vector<Shape> shapes, want_shapes;
  for (const auto& [n, t] : named) names.push_back(n), shapes.push_back(t.shape());
  for (const auto& p : params) {
    want_names.push_back(p["name"].get<std::string>());
    want_shapes.push_back(p["shape"].get<std::vector<int64_t>>());
  }
  REQUIRE(names == want_names);
  REQUIRE(shapes == want_shapes);
  Tensors out;
  NoGradGuard no_grad;
  for (std::size_t i = 0; i < named.size(); ++i) {
    Tensor t = named[i].second;
    t.copy_(to(from_vector<double>(params[i]["values"].get<std::vector<double>>(), t.shape()), t.dtype()));
    out.push_back(t);
  }
  return out;
}

// L = sum(output r_out) + sum(h_n r_h) (+ sum(c_n r_c)), the weights in the outputs' dtype.
Tensor weighted_loss(const nn::LSTMOutput& o, const nlohmann::json& c) {
  const auto r = [](const Tensor& like, const nlohmann::json& v) {
    return to(from_vector<double>(v.get<std::vector<double>>(), like.shape()), like.dtype());
  };
  Tensor loss = sum(o.output * r(o.output, c["r_out"])) + sum(o.h_n * r(o.h_n, c["r_h"]));
  if (!c["r_c"].is_null()) loss = loss + sum(o.c_n * r(o.c_n, c["r_c"]));
  return loss;
}

double max_abs(const std::vector<double>& v) {
  double m = 0;
  for (double x : v) m = std::max(m, std::fabs(x));
  return m;
}

}  // namespace

TEST_CASE("RNN, LSTM and GRU equal PyTorch's in f64: parameter names, outputs and every gradient", "[nn][rnn]") {
  const nlohmann::json ref = load();
  int checked = 0;
  for (const auto& c : ref["cases"]) {
    const std::string mode = c["mode"].get<std::string>();
    INFO("case " << c["name"].get<std::string>());
    const Layer layer = make_layer(mode, options_of(c["options"]));
    layer.module->to(DType::F64);
    const Tensors params = copy_parameters(*layer.module, c["params"]);
    for (const Tensor& p : params) CHECK(p.dtype() == DType::F64);

    const Tensor x = tensor_of(c["x"]).requires_grad_();
    Tensor h0 = tensor_of(c["h0"]), c0 = tensor_of(c["c0"]);
    if (h0.defined()) h0.requires_grad_();
    if (c0.defined()) c0.requires_grad_();
    const bool packed = c.contains("lengths") && !c["lengths"].is_null();
    const nn::LSTMOutput o = packed ? layer.forward_packed(x, c["lengths"].get<std::vector<int64_t>>(),
                                                           c["enforce_sorted"].get<bool>(), h0, c0)
                                    : layer.forward(x, h0, c0);

    REQUIRE(o.output.shape() == Shape(c["output"]["shape"].get<std::vector<int64_t>>()));
    REQUIRE(o.h_n.shape() == Shape(c["h_n"]["shape"].get<std::vector<int64_t>>()));
    CHECK(o.output.dtype() == DType::F64);
    check_close(o.output, c["output"]["values"].get<std::vector<double>>(), 1e-11, 1e-13, "output");
    check_close(o.h_n, c["h_n"]["values"].get<std::vector<double>>(), 1e-11, 1e-13, "h_n");
    if (mode == "LSTM") {
      REQUIRE(o.c_n.shape() == Shape(c["c_n"]["shape"].get<std::vector<int64_t>>()));
      check_close(o.c_n, c["c_n"]["values"].get<std::vector<double>>(), 1e-11, 1e-13, "c_n");
    }

    Tensors wrt = {x};
    if (h0.defined()) wrt.push_back(h0);
    if (c0.defined()) wrt.push_back(c0);
    wrt.insert(wrt.end(), params.begin(), params.end());
    const Tensors g = autograd::grad({weighted_loss(o, c)}, wrt);
    REQUIRE(g.size() == wrt.size());
    std::size_t k = 0;
    check_close(g[k++], c["grad_x"].get<std::vector<double>>(), 1e-11, 1e-13, "grad x");
    if (h0.defined()) check_close(g[k++], c["grad_h0"].get<std::vector<double>>(), 1e-11, 1e-13, "grad h0");
    if (c0.defined()) check_close(g[k++], c["grad_c0"].get<std::vector<double>>(), 1e-11, 1e-13, "grad c0");
    for (const auto& p : c["params"]) {
      const std::string what = "grad " + p["name"].get<std::string>();
      check_close(g[k++], p["grad"].get<std::vector<double>>(), 1e-11, 1e-13, what.c_str());
    }
    ++checked;
  }
  CHECK(checked == 18);
}

TEST_CASE("RNN layers: parameter names and shapes are PyTorch's, layer_parameters returns them", "[nn][rnn]") {
  // torch.nn.GRU(3, 4, 2, bias=False, bidirectional=True).named_parameters()
  auto gru = nn::make<nn::GRU>({.input_size = 3, .hidden_size = 4, .num_layers = 2, .bias = false, .bidirectional = true});
  std::vector<std::string> names;
  std::vector<Shape> shapes;
  for (const auto& [n, t] : gru->named_parameters()) names.push_back(n), shapes.push_back(t.shape());
  CHECK(names == std::vector<std::string>{"weight_ih_l0", "weight_hh_l0", "weight_ih_l0_reverse", "weight_hh_l0_reverse",
                                          "weight_ih_l1", "weight_hh_l1", "weight_ih_l1_reverse", "weight_hh_l1_reverse"});
  CHECK(shapes == std::vector<Shape>{{12, 3}, {12, 4}, {12, 3}, {12, 4}, {12, 8}, {12, 4}, {12, 8}, {12, 4}});
  const std::vector<Tensor> l1r = gru->layer_parameters(1, true);
  REQUIRE(l1r.size() == 5);
  CHECK(values(l1r[0]) == values(gru->named_parameters()[6].second));
  CHECK(values(l1r[1]) == values(gru->named_parameters()[7].second));
  CHECK(!l1r[2].defined());
  CHECK(!l1r[3].defined());
  CHECK(!l1r[4].defined());  // no projection
  // torch.nn.LSTM(3, 4, 2): (16*3 + 16*4 + 2*16) + (16*4 + 16*4 + 2*16) = 144 + 160 = 304
  CHECK(nn::make<nn::LSTM>({.input_size = 3, .hidden_size = 4, .num_layers = 2})->num_parameters() == 304);
  CHECK(gru->options().hidden_size == 4);
  // torch.nn.LSTM(3, 5, 2, proj_size=2, bidirectional=True): per direction of layer 0
  // 20*3 + 20*2 + 2*20 + 2*5 = 150, of layer 1 (input 2 * 2) 20*4 + 20*2 + 2*20 + 2*5 = 170
  auto proj = nn::make<nn::LSTM>({.input_size = 3, .hidden_size = 5, .num_layers = 2, .bidirectional = true, .proj_size = 2});
  CHECK(proj->num_parameters() == 2 * (150 + 170));
  CHECK(proj->named_parameters()[4].first == "weight_hr_l0");
  CHECK(proj->named_parameters()[4].second.shape() == Shape{2, 5});
  CHECK(proj->layer_parameters(1, true)[4].shape() == Shape{2, 5});
  CHECK(proj->str().find("proj_size=2") != std::string::npos);
}

TEST_CASE("RNN, LSTM and GRU default initialisation: U(-1/sqrt(hidden), 1/sqrt(hidden)) on every parameter", "[nn][rnn][init]") {
  const auto check_bounds = [](const nn::Module& m, double bound, bool reaches_bound) {
    REQUIRE(!m.named_parameters().empty());
    for (const auto& [name, t] : m.named_parameters()) {
      INFO(m.type_name() << " " << name << " " << shape_str(t.shape()) << ", bound " << bound);
      CHECK(t.dtype() == DType::F32);
      const std::vector<double> v = values(t);
      const double m_abs = max_abs(v);
      INFO("max |w| " << m_abs);
      CHECK(m_abs <= bound * (1 + 1e-6));  // the f32 rounding of the bound
      CHECK(m_abs > 0);                    // not all zero (biases too, as PyTorch's)
      if (reaches_bound) CHECK(m_abs > 0.95 * bound);
    }
  };
  const nn::RNNOptions small{.input_size = 3, .hidden_size = 4, .num_layers = 2, .bidirectional = true};
  check_bounds(*nn::make<nn::RNN>(small), 0.5, false);
  check_bounds(*nn::make<nn::LSTM>(small), 0.5, false);
  check_bounds(*nn::make<nn::GRU>(small), 0.5, false);
  // 1024 to 262144 values per parameter: P(max |w| < 0.95 bound) <= 0.95^1024 ~ 1e-23.
  auto large = nn::make<nn::LSTM>({.input_size = 64, .hidden_size = 256});
  check_bounds(*large, 1.0 / 16, true);
  check_bounds(*nn::make<nn::GRU>({.input_size = 64, .hidden_size = 256}), 1.0 / 16, true);
  // reset_parameters draws new values with the same law.
  const std::vector<double> before = values(large->named_parameters()[1].second);
  large->reset_parameters();
  CHECK(values(large->named_parameters()[1].second) != before);
  check_bounds(*large, 1.0 / 16, true);
}

TEST_CASE("LSTM in f32 equals PyTorch's f64 reference to 1e-5: outputs and gradients", "[nn][rnn]") {
  const nlohmann::json ref = load();
  const auto it = std::find_if(ref["cases"].begin(), ref["cases"].end(),
                               [](const nlohmann::json& c) { return c["name"] == "lstm_1layer"; });
  REQUIRE(it != ref["cases"].end());
  const nlohmann::json& c = *it;
  const Layer layer = make_layer("LSTM", options_of(c["options"]));  // f32 parameters
  const Tensors params = copy_parameters(*layer.module, c["params"]);
  for (const Tensor& p : params) REQUIRE(p.dtype() == DType::F32);
  const Tensor x = to(tensor_of(c["x"]), DType::F32).requires_grad_();
  const nn::LSTMOutput o = layer.forward(x);
  CHECK(o.output.dtype() == DType::F32);
  CHECK(o.h_n.dtype() == DType::F32);
  CHECK(o.c_n.dtype() == DType::F32);
  // PyTorch's own f32 LSTM is within 2.5e-7 relative (5e-7 absolute) of this reference.
  check_close(o.output, c["output"]["values"].get<std::vector<double>>(), 1e-5, 1e-6, "output");
  check_close(o.h_n, c["h_n"]["values"].get<std::vector<double>>(), 1e-5, 1e-6, "h_n");
  check_close(o.c_n, c["c_n"]["values"].get<std::vector<double>>(), 1e-5, 1e-6, "c_n");
  Tensors wrt = {x};
  wrt.insert(wrt.end(), params.begin(), params.end());
  const Tensors g = autograd::grad({weighted_loss(o, c)}, wrt);
  check_close(g[0], c["grad_x"].get<std::vector<double>>(), 1e-5, 1e-6, "grad x");
  for (std::size_t k = 0; k < params.size(); ++k) {
    CHECK(g[k + 1].dtype() == DType::F32);
    check_close(g[k + 1], c["params"][k]["grad"].get<std::vector<double>>(), 1e-5, 1e-6, "grad parameter");
  }
}

TEST_CASE("LSTM under CPU bf16 autocast: bf16 products and gates, output close to f32", "[nn][rnn][amp]") {
  Generator gen(31);
  auto lstm = nn::make<nn::LSTM>({.input_size = 16, .hidden_size = 32});
  const Tensor x = randn({6, 4, 16}, {}, &gen);
  const nn::LSTMOutput full = lstm->forward(x);
  REQUIRE(full.output.dtype() == DType::F32);
  nn::LSTMOutput low;
  {
    amp::Autocast autocast({.device = DeviceType::CPU, .dtype = DType::BF16});
    low = lstm->forward(x);
  }
  // The products (linear) run in bf16 and the gates' elementwise ops keep the dtype, so h and the
  // output are bf16, as with PyTorch's CPU autocast LSTM (output, h_n and c_n all bf16 in PyTorch
  // 2.15). Written before the layer existed, so not observed yet: the dtype must be f32 or bf16,
  // and bf16 is the one checked. c_n may stay f32 (zeros c0 in x's f32 promoting c' = f c + i g);
  // PyTorch's is bf16.
  const DType dt = low.output.dtype();
  REQUIRE((dt == DType::F32 || dt == DType::BF16));
  CHECK(dt == DType::BF16);
  CHECK(low.h_n.dtype() == dt);
  CHECK((low.c_n.dtype() == DType::F32 || low.c_n.dtype() == DType::BF16));
  CHECK(low.output.shape() == full.output.shape());
  // A bf16 emulation in PyTorch (products and every gate op rounded to bf16) stays within 1.5%
  // of max |out| on this size; 0.05 leaves room.
  const std::vector<double> a = values(full.output), b = values(low.output);
  const double scale = max_abs(a);
  REQUIRE(scale > 0);
  double worst = 0;
  for (std::size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::fabs(a[i] - b[i]));
  INFO("max |out f32 - out autocast| " << worst << ", max |out| " << scale);
  CHECK(std::isfinite(worst));
  CHECK(worst <= 0.05 * scale);
  CHECK(worst > 0);  // the region did change the arithmetic
}

TEST_CASE("LSTM dropout between layers: training only, reproducible from a seeded Generator", "[nn][rnn][train]") {
  Generator gen(5);
  auto lstm = nn::make<nn::LSTM>({.input_size = 3, .hidden_size = 4, .num_layers = 2, .dropout = 0.5, .generator = &gen});
  auto plain = nn::make<nn::LSTM>({.input_size = 3, .hidden_size = 4, .num_layers = 2});
  plain->load_state_dict(lstm->state_dict());
  Generator data(6);
  const Tensor x = randn({5, 3, 3}, {}, &data);
  REQUIRE(lstm->is_training());

  gen.set_state(77, 0);
  const nn::LSTMOutput a = lstm->forward(x);
  gen.set_state(77, 0);
  const nn::LSTMOutput b = lstm->forward(x);
  CHECK(values(a.output) == values(b.output));
  CHECK(values(a.h_n) == values(b.h_n));
  CHECK(values(a.c_n) == values(b.c_n));
  gen.set_state(78, 0);
  CHECK(values(lstm->forward(x).output) != values(a.output));  // another mask

  // Dropout acts on layer 0's output on its way to layer 1: layer 0's h_n and c_n are those of
  // the layer without dropout, the last layer's differ.
  const nn::LSTMOutput p = plain->forward(x);
  CHECK(values(select(a.h_n, 0, 0)) == values(select(p.h_n, 0, 0)));
  CHECK(values(select(a.c_n, 0, 0)) == values(select(p.c_n, 0, 0)));
  CHECK(values(select(a.h_n, 0, 1)) != values(select(p.h_n, 0, 1)));
  CHECK(values(a.output) != values(p.output));

  lstm->eval();
  const nn::LSTMOutput e = lstm->forward(x);
  CHECK(values(e.output) != values(a.output));
  CHECK(values(e.output) == values(p.output));
  CHECK(values(e.h_n) == values(p.h_n));
  CHECK(values(e.c_n) == values(p.c_n));
  plain->eval();
  CHECK(values(plain->forward(x).output) == values(p.output));
}

TEST_CASE("RNN layers take unbatched 2-D input as a batch of one, as PyTorch does", "[nn][rnn]") {
  manual_seed(6);
  for (bool batch_first : {false, true}) {
    INFO("batch_first " << batch_first);
    auto lstm = nn::make<nn::LSTM>({.input_size = 3, .hidden_size = 4, .num_layers = 2, .batch_first = batch_first,
                                    .bidirectional = true, .proj_size = 2});
    auto gru = nn::make<nn::GRU>({.input_size = 3, .hidden_size = 4, .batch_first = batch_first});
    const Tensor x = randn({5, 3}), h0 = randn({4, 2}), c0 = randn({4, 4}), g0 = randn({1, 4});
    const int64_t bdim = batch_first ? 0 : 1;
    const nn::LSTMOutput one = lstm->forward(x, h0, c0);
    const nn::LSTMOutput batched = lstm->forward(x.unsqueeze(bdim), h0.unsqueeze(1), c0.unsqueeze(1));
    REQUIRE(one.output.shape() == Shape{5, 4});
    CHECK(values(one.output) == values(batched.output.squeeze(bdim)));
    CHECK(one.h_n.shape() == Shape{4, 2});
    CHECK(values(one.h_n) == values(batched.h_n.squeeze(1)));
    CHECK(one.c_n.shape() == Shape{4, 4});
    CHECK(values(one.c_n) == values(batched.c_n.squeeze(1)));
    const nn::RNNOutput g = gru->forward(x, g0), gb = gru->forward(x.unsqueeze(bdim), g0.unsqueeze(1));
    CHECK(values(g.output) == values(gb.output.squeeze(bdim)));
    CHECK(g.h_n.shape() == Shape{1, 4});
    CHECK(gru->forward(x).output.shape() == Shape{5, 4});  // zeros for h0
  }
}

TEST_CASE("LSTM with proj_size runs on a bf16 model (O2/O3: no autocast), close to f32", "[nn][rnn][amp]") {
  manual_seed(8);
  auto lstm = nn::make<nn::LSTM>({.input_size = 6, .hidden_size = 8, .num_layers = 2, .proj_size = 3});
  const Tensor x = randn({5, 2, 6});
  const nn::LSTMOutput f32 = lstm->forward(x);
  lstm->to(DType::BF16);
  const nn::LSTMOutput bf16 = lstm->forward(x.to(DType::BF16));
  CHECK(bf16.output.dtype() == DType::BF16);
  CHECK(bf16.output.shape() == Shape{5, 2, 3});
  CHECK(bf16.c_n.dtype() == DType::F32);  // the cell state stays f32
  CHECK((bf16.output.to(DType::F32) - f32.output).abs().max().item<double>() < 0.05);
}

TEST_CASE("RNN layers: bad inputs and options are named errors", "[nn][rnn]") {
  nn::LSTM lstm({.input_size = 3, .hidden_size = 4, .num_layers = 2});
  MG_REQUIRE_ERROR(lstm.forward(zeros({5, 4})), "): expected unbatched x [T, 3], got");
  MG_REQUIRE_ERROR(lstm.forward(zeros({5, 3}), zeros({2, 1, 4})), "for unbatched 2-D input");
  MG_REQUIRE_ERROR(lstm.forward(zeros({5, 3}), zeros({2, 4}), zeros({2, 1, 4})), "c0 must be 2-D");
  MG_REQUIRE_ERROR(lstm.forward(zeros({5, 3}), zeros({2, 5})), "): expected h0 [2, 1, 4]");
  MG_REQUIRE_ERROR(lstm.forward(zeros({5, 2, 4})), "): expected x [T, B, 3]");
  MG_REQUIRE_ERROR(lstm.forward(zeros({5, 2, 3}), zeros({1, 2, 4})), "): expected h0 [2, 2, 4]");
  MG_REQUIRE_ERROR(lstm.forward(zeros({5, 2, 3}), zeros({2, 3, 4})), "): expected h0 [2, 2, 4]");
  nn::LSTM batch_first({.input_size = 3, .hidden_size = 4, .batch_first = true});
  MG_REQUIRE_ERROR(batch_first.forward(zeros({2, 5, 4})), "): expected x [B, T, 3]");
  MG_REQUIRE_ERROR(nn::LSTM({.input_size = 3, .hidden_size = 0}), "LSTM: input_size and hidden_size must be positive");
  MG_REQUIRE_ERROR(nn::LSTM({.input_size = 0, .hidden_size = 4}), "LSTM: input_size and hidden_size must be positive");
  MG_REQUIRE_ERROR(nn::LSTM({.input_size = 3, .hidden_size = 4, .num_layers = 0}), "LSTM: num_layers must be >= 1");
  MG_REQUIRE_ERROR(nn::LSTM({.input_size = 3, .hidden_size = 4, .dropout = 1.5}), "LSTM: dropout must be in [0, 1]");
  MG_REQUIRE_ERROR(nn::LSTM({.input_size = 3, .hidden_size = 4, .dropout = -0.1}), "LSTM: dropout must be in [0, 1]");
  CHECK_NOTHROW(nn::LSTM({.input_size = 3, .hidden_size = 4, .num_layers = 2, .dropout = 1.0}));  // as PyTorch
  MG_REQUIRE_ERROR(lstm.forward(zeros({5, 2, 3}), zeros({2, 2, 4}, {.dtype = DType::I64})),
                   "): expected a floating h0, got i64");
  MG_REQUIRE_ERROR(nn::LSTM({.input_size = 3, .hidden_size = 4, .proj_size = 4}),
                   "LSTM: proj_size must be smaller than hidden_size (4), got 4");
  MG_REQUIRE_ERROR(nn::LSTM({.input_size = 3, .hidden_size = 4, .proj_size = -1}), "LSTM: proj_size must be >= 0");
  MG_REQUIRE_ERROR(nn::GRU({.input_size = 3, .hidden_size = 4, .proj_size = 2}), "GRU: proj_size is an LSTM option");
  nn::LSTM projected({.input_size = 3, .hidden_size = 4, .proj_size = 2});
  MG_REQUIRE_ERROR(projected.forward(zeros({5, 2, 3}), zeros({1, 2, 4})), "): expected h0 [1, 2, 2] (layers * directions, batch, proj_size)");
  MG_REQUIRE_ERROR(projected.forward(zeros({5, 2, 3}), zeros({1, 2, 2}), zeros({1, 2, 2})),
                   "): expected c0 [1, 2, 4] (layers * directions, batch, hidden)");
}
