// nn::RNNCell, LSTMCell and GRUCell (nn/rnn_cell.h) against PyTorch 2.15's cells in f64
// (tests/data/reference/torch_rnn_cells.json, written by tools/reference/gen_torch_rnn_cells.py):
// RNN (tanh and relu), LSTM and GRU cells, with and without bias, batched and unbatched, a given or a zero state,
// two steps; parameter names and shapes, the final state and the gradients with respect to both
// inputs, the initial state and every parameter (1e-11). Then a cell step equals one step of the
// layer with the same weights, and the refusals.
#include <catch2/catch.hpp>

#include "amp/autocast.h"
#include "autograd/engine.h"
#include "core/factory.h"
#include "nn/rnn.h"
#include "nn/rnn_cell.h"
#include "ops/ops.h"
#include "reference/json_reference.h"
#include "test_util.h"

using namespace mg;
using namespace mg::test;

namespace {

Tensor tensor_or_undefined(const nlohmann::json& j) {
  return j.is_null() ? Tensor() : json_tensor(j["values"], j["shape"]);
}

}  // namespace

TEST_CASE("RNNCell, LSTMCell and GRUCell equal PyTorch's in f64: two steps, the state and every gradient",
          "[nn][rnn]") {
  const nlohmann::json ref = load_json_reference("torch_rnn_cells.json");
  int checked = 0;
  for (const auto& c : ref["cases"]) {
    INFO("case " << c["name"].get<std::string>());
    const std::string kind = c["cell"].get<std::string>();
    const nn::RNNCellOptions o{.input_size = c["input_size"].get<int64_t>(),
                               .hidden_size = c["hidden_size"].get<int64_t>(),
                               .bias = c["bias"].get<bool>(),
                               .nonlinearity = c["nonlinearity"] == "relu" ? nn::RNNNonlinearity::Relu
                                                                           : nn::RNNNonlinearity::Tanh};
    std::shared_ptr<nn::RNNCellBase> cell;
    if (kind == "LSTMCell") cell = nn::make<nn::LSTMCell>(o);
    else if (kind == "GRUCell") cell = nn::make<nn::GRUCell>(o);
    else cell = nn::make<nn::RNNCell>(o);
    cell->to(DType::F64);
    const nn::NamedTensors named = cell->named_parameters();
    REQUIRE(named.size() == c["params"].size());
    Tensors params;
    for (std::size_t k = 0; k < named.size(); ++k) {
      const auto& p = c["params"][k];
      CHECK(named[k].first == p["name"].get<std::string>());
      REQUIRE(named[k].second.shape() == Shape(p["shape"].get<std::vector<int64_t>>()));
      NoGradGuard no_grad;
      Tensor(named[k].second).copy_(json_tensor(p["values"], p["shape"]));
      params.push_back(named[k].second);
    }
    const Tensors xs = {tensor_or_undefined(c["x"][0]).requires_grad_(), tensor_or_undefined(c["x"][1]).requires_grad_()};
    Tensor h0 = tensor_or_undefined(c["h0"]), c0 = tensor_or_undefined(c["c0"]);
    if (h0.defined()) h0.requires_grad_();
    if (c0.defined()) c0.requires_grad_();
    Tensor h = h0, cs = c0;
    for (const Tensor& x : xs) {
      if (kind == "LSTMCell") {
        const nn::LSTMState s = std::static_pointer_cast<nn::LSTMCell>(cell)->forward(x, {h, cs});
        h = s.h;
        cs = s.c;
      } else if (kind == "GRUCell") {
        h = std::static_pointer_cast<nn::GRUCell>(cell)->forward(x, h);
      } else {
        h = std::static_pointer_cast<nn::RNNCell>(cell)->forward(x, h);
      }
    }
    REQUIRE(h.shape() == Shape(c["h"]["shape"].get<std::vector<int64_t>>()));
    check_json_close(h, c["h"]["values"], 1e-11, 1e-13);
    Tensor loss = (h * json_tensor(c["r"], c["h"]["shape"])).sum();
    if (kind == "LSTMCell") {
      check_json_close(cs, c["c"]["values"], 1e-11, 1e-13);
      loss = loss + (cs * json_tensor(c["rc"], c["c"]["shape"])).sum();
    }
    Tensors wrt = xs;
    if (h0.defined()) wrt.push_back(h0);
    if (c0.defined()) wrt.push_back(c0);
    wrt.insert(wrt.end(), params.begin(), params.end());
    const Tensors g = autograd::grad({loss}, wrt);
    std::size_t k = 0;
    check_json_close(g[k++], c["grad_x"][0], 1e-11, 1e-13);
    check_json_close(g[k++], c["grad_x"][1], 1e-11, 1e-13);
    if (h0.defined()) check_json_close(g[k++], c["grad_h0"], 1e-11, 1e-13);
    if (c0.defined()) check_json_close(g[k++], c["grad_c0"], 1e-11, 1e-13);
    for (const auto& p : c["params"]) check_json_close(g[k++], p["grad"], 1e-11, 1e-13);
    ++checked;
  }
  CHECK(checked == 7);
}

TEST_CASE("an LSTMCell step equals one step of a one-layer LSTM with the same weights", "[nn][rnn]") {
  manual_seed(12);
  auto lstm = nn::make<nn::LSTM>({.input_size = 3, .hidden_size = 4});
  auto cell = nn::make<nn::LSTMCell>({.input_size = 3, .hidden_size = 4});
  {
    NoGradGuard no_grad;
    cell->weight_ih.copy_(lstm->layer_parameters(0, false)[0]);
    cell->weight_hh.copy_(lstm->layer_parameters(0, false)[1]);
    cell->bias_ih.copy_(lstm->layer_parameters(0, false)[2]);
    cell->bias_hh.copy_(lstm->layer_parameters(0, false)[3]);
  }
  const Tensor x = randn({1, 2, 3}), h0 = randn({1, 2, 4}), c0 = randn({1, 2, 4});
  const nn::LSTMOutput layer = lstm->forward(x, h0, c0);
  const nn::LSTMState step = cell->forward(x.squeeze(0), {h0.squeeze(0), c0.squeeze(0)});
  CHECK(values(step.h) == values(layer.h_n.squeeze(0)));
  CHECK(values(step.c) == values(layer.c_n.squeeze(0)));
}

TEST_CASE("GRUCell and RNNCell steps equal a layer step, and LSTMCell's under bf16 autocast too", "[nn][rnn][amp]") {
  manual_seed(13);
  const Tensor x = randn({1, 2, 3}), h0 = randn({1, 2, 4}), c0 = randn({1, 2, 4});
  const auto copy_weights = [](nn::RNNBase& layer, nn::RNNCellBase& cell) {
    NoGradGuard no_grad;
    const std::vector<Tensor> p = layer.layer_parameters(0, false);
    cell.weight_ih.copy_(p[0]);
    cell.weight_hh.copy_(p[1]);
    cell.bias_ih.copy_(p[2]);
    cell.bias_hh.copy_(p[3]);
  };
  auto gru = nn::make<nn::GRU>({.input_size = 3, .hidden_size = 4});
  auto gru_cell = nn::make<nn::GRUCell>({.input_size = 3, .hidden_size = 4});
  copy_weights(*gru, *gru_cell);
  CHECK(values(gru_cell->forward(x.squeeze(0), h0.squeeze(0))) == values(gru->forward(x, h0).h_n.squeeze(0)));
  auto rnn = nn::make<nn::RNN>({.input_size = 3, .hidden_size = 4, .nonlinearity = nn::RNNNonlinearity::Relu});
  auto rnn_cell = nn::make<nn::RNNCell>({.input_size = 3, .hidden_size = 4, .nonlinearity = nn::RNNNonlinearity::Relu});
  copy_weights(*rnn, *rnn_cell);
  CHECK(values(rnn_cell->forward(x.squeeze(0), h0.squeeze(0))) == values(rnn->forward(x, h0).h_n.squeeze(0)));
  auto lstm = nn::make<nn::LSTM>({.input_size = 3, .hidden_size = 4});
  auto lstm_cell = nn::make<nn::LSTMCell>({.input_size = 3, .hidden_size = 4});
  copy_weights(*lstm, *lstm_cell);
  amp::Autocast ac({.device = DeviceType::CPU, .dtype = DType::BF16});
  const nn::LSTMOutput layer = lstm->forward(x);            // zero states
  const nn::LSTMState step = lstm_cell->forward(x.squeeze(0));
  CHECK(step.h.dtype() == DType::BF16);
  CHECK(step.c.dtype() == DType::F32);  // the cell state stays f32, as the layer's
  CHECK(values(step.h) == values(layer.h_n.squeeze(0)));
  CHECK(values(step.c) == values(layer.c_n.squeeze(0)));
  // Given f32 states under autocast: cast to the products' dtype as the layer casts h0/c0, so
  // GRUCell returns bf16 (an f32 h made z * h promote to f32) and equals the layer's step.
  const nn::RNNOutput gru_layer = gru->forward(x, h0);
  const Tensor gru_step = gru_cell->forward(x.squeeze(0), h0.squeeze(0));
  CHECK(gru_step.dtype() == DType::BF16);
  CHECK(values(gru_step) == values(gru_layer.h_n.squeeze(0)));
  const nn::LSTMOutput given = lstm->forward(x, h0, c0);
  const nn::LSTMState given_step = lstm_cell->forward(x.squeeze(0), {h0.squeeze(0), c0.squeeze(0)});
  CHECK(values(given_step.h) == values(given.h_n.squeeze(0)));
  CHECK(values(given_step.c) == values(given.c_n.squeeze(0)));
}

// The f32 cell state must not be rounded to the autocast dtype between steps: an unrolled LSTMCell
// loop equals the layer over the whole sequence, and so does the layer run in two chunks with
// (h_n, c_n) fed back (truncated backpropagation through time), bit for bit.
TEST_CASE("under bf16 autocast an unrolled LSTMCell and a chunked LSTM keep c in f32 between steps", "[nn][rnn][amp]") {
  manual_seed(14);
  auto lstm = nn::make<nn::LSTM>({.input_size = 3, .hidden_size = 4});
  auto cell = nn::make<nn::LSTMCell>({.input_size = 3, .hidden_size = 4});
  {
    NoGradGuard no_grad;
    const std::vector<Tensor> p = lstm->layer_parameters(0, false);
    cell->weight_ih.copy_(p[0]);
    cell->weight_hh.copy_(p[1]);
    cell->bias_ih.copy_(p[2]);
    cell->bias_hh.copy_(p[3]);
  }
  const Tensor x = randn({6, 2, 3});
  amp::Autocast ac({.device = DeviceType::CPU, .dtype = DType::BF16});
  const nn::LSTMOutput whole = lstm->forward(x);
  nn::LSTMState s;
  for (const Tensor& xt : unbind(x, 0)) s = cell->forward(xt, s);
  CHECK(s.c.dtype() == DType::F32);
  CHECK(values(s.c) == values(whole.c_n.squeeze(0)));
  CHECK(values(s.h) == values(whole.h_n.squeeze(0)));
  const nn::LSTMOutput first = lstm->forward(x.slice(0, 0, 3));
  const nn::LSTMOutput second = lstm->forward(x.slice(0, 3, 6), first.h_n, first.c_n);
  CHECK(values(second.c_n) == values(whole.c_n));
  CHECK(values(second.h_n) == values(whole.h_n));
}

TEST_CASE("RNN cells: bad inputs and options are named errors", "[nn][rnn]") {
  nn::GRUCell gru({.input_size = 3, .hidden_size = 4});
  MG_REQUIRE_ERROR(gru.forward(zeros({2, 5})), "): expected x [B, 3] or [3], got");
  MG_REQUIRE_ERROR(gru.forward(zeros({2, 3}), zeros({3, 4})), "): expected h [2, 4] for x");
  MG_REQUIRE_ERROR(gru.forward(zeros({3}), zeros({1, 4})), "): expected h [4] for x");
  MG_REQUIRE_ERROR(gru.forward(zeros({2, 3}), zeros({2, 4}, {.dtype = DType::Bool})), "): expected a floating h, got bool");
  nn::LSTMCell lstm({.input_size = 3, .hidden_size = 4});
  MG_REQUIRE_ERROR(lstm.forward(zeros({2, 3}), {zeros({2, 4}), zeros({2, 5})}), "): expected c [2, 4]");
  MG_REQUIRE_ERROR(nn::RNNCell({.input_size = 0, .hidden_size = 4}), "RNNCell: input_size and hidden_size must be positive");
  CHECK(nn::RNNCell({.input_size = 3, .hidden_size = 4, .nonlinearity = nn::RNNNonlinearity::Relu}).str().find(
            "nonlinearity=relu") != std::string::npos);
}
