// WeightedRandomSampler and SubsetRandomSampler (data/random_samplers.h) and the Sampler interface
// of the DataLoader: draw frequencies against the weights (with replacement, and the sequential
// draw-without-putting-back distribution of torch.multinomial without it), zero weights never
// drawn, epochs that differ and repeat, subsets permuted, exact mid-epoch resume through the
// loader's state, refusals of a state saved with another sampler or other settings, a user's
// sampler checked by the loader, and every argument error.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "core/factory.h"
#include "data/loader.h"
#include "data/random_samplers.h"
#include "data/tensor_dataset.h"
#include "data/text/mlm.h"
#include "test_util.h"

using mg::data::DataLoader;
using mg::data::SubsetRandomSampler;
using mg::data::WeightedRandomSampler;
using mg::test::error_of;

namespace {

std::shared_ptr<mg::data::TensorDataset> index_dataset(int64_t n) {
  return std::make_shared<mg::data::TensorDataset>(
      std::vector<std::pair<std::string, mg::Tensor>>{{"index", mg::arange(0, n)}});
}

std::vector<int64_t> run_epoch(DataLoader& loader, int64_t epoch) {
  loader.start_epoch(epoch);
  std::vector<int64_t> out;
  while (auto b = loader.next()) {
    const mg::Tensor& t = b->at("index");
    out.insert(out.end(), t.data<int64_t>(), t.data<int64_t>() + t.numel());
  }
  return out;
}

}  // namespace

TEST_CASE("WeightedRandomSampler with replacement draws in proportion to the weights, never a zero weight",
          "[data][sampler]") {
  const std::vector<double> w{1.0, 2.0, 0.0, 7.0};
  WeightedRandomSampler s(w, {.num_samples = 200000, .seed = 3});
  CHECK(s.num_samples() == 200000);
  const std::vector<int64_t> idx = s.indices(0);
  REQUIRE(idx.size() == 200000);
  std::map<int64_t, int64_t> count;
  for (int64_t i : idx) ++count[i];
  CHECK(count[2] == 0);
  // Each share within 5 standard deviations of its probability (sd <= 0.0011 here).
  for (int64_t i : {0, 1, 3}) {
    INFO("example " << i);
    CHECK(std::fabs(double(count[i]) / 200000.0 - w[std::size_t(i)] / 10.0) < 0.0055);
  }
  CHECK(s.indices(0) == idx);  // a pure function of the epoch
  CHECK(s.indices(1) != idx);
  CHECK(WeightedRandomSampler(w, {.num_samples = 200000, .seed = 4}).indices(0) != idx);
  CHECK(WeightedRandomSampler(w).num_samples() == 4);  // 0: one per weight
}

TEST_CASE("WeightedRandomSampler without replacement: each example at most once, drawn as one at a time",
          "[data][sampler]") {
  WeightedRandomSampler all({1.0, 0.0, 2.0, 3.0, 0.5}, {.num_samples = 4, .replacement = false, .seed = 1});
  for (int64_t e = 0; e < 20; ++e) {
    std::vector<int64_t> idx = all.indices(e);
    std::sort(idx.begin(), idx.end());
    CHECK(idx == std::vector<int64_t>{0, 2, 3, 4});  // every positive weight once, never the zero
  }
  // Two draws from weights 1, 2, 3: P(first = a, second = b) = w_a / 6 · w_b / (6 - w_a), the
  // sequential draw's (as torch.multinomial without replacement).
  WeightedRandomSampler two({1.0, 2.0, 3.0}, {.num_samples = 2, .replacement = false, .seed = 9});
  const int64_t epochs = 60000;
  std::map<std::pair<int64_t, int64_t>, int64_t> count;
  for (int64_t e = 0; e < epochs; ++e) {
    const std::vector<int64_t> idx = two.indices(e);
    ++count[{idx[0], idx[1]}];
  }
  const double w[3] = {1.0, 2.0, 3.0};
  for (int64_t a = 0; a < 3; ++a) {
    for (int64_t b = 0; b < 3; ++b) {
      if (a == b) continue;
      const double p = w[a] / 6.0 * w[b] / (6.0 - w[a]);
      INFO("pair " << a << ", " << b << ": p " << p);
      CHECK(std::fabs(double(count[{a, b}]) / double(epochs) - p) < 5.0 * std::sqrt(p * (1 - p) / double(epochs)));
    }
  }
}

TEST_CASE("SubsetRandomSampler permutes its subset anew every epoch", "[data][sampler]") {
  const std::vector<int64_t> subset{7, 3, 3, 9, 0, 12};
  SubsetRandomSampler s(subset, {.seed = 5});
  CHECK(s.num_samples() == 6);
  std::set<std::vector<int64_t>> seen;
  for (int64_t e = 0; e < 10; ++e) {
    std::vector<int64_t> idx = s.indices(e);
    CHECK(s.indices(e) == idx);
    seen.insert(idx);
    std::sort(idx.begin(), idx.end());
    CHECK(idx == std::vector<int64_t>{0, 3, 3, 7, 9, 12});
  }
  CHECK(seen.size() > 5);  // 360 distinct orders: ten epochs repeat one rarely
  // The DataLoader's own shuffle, applied to the subset's positions.
  const std::vector<int64_t> perm = mg::data::epoch_permutation(6, 5, 2);
  const std::vector<int64_t> got = s.indices(2);
  for (std::size_t k = 0; k < perm.size(); ++k) CHECK(got[k] == subset[std::size_t(perm[k])]);
}

TEST_CASE("A DataLoader over a random sampler serves its order and resumes mid-epoch exactly", "[data][sampler]") {
  auto sampler = std::make_shared<WeightedRandomSampler>(std::vector<double>{1, 0, 3, 1, 2, 5, 0, 1, 1, 4},
                                                         mg::data::WeightedRandomSamplerOptions{.num_samples = 23, .seed = 8});
  DataLoader full(index_dataset(10), {.batch_size = 5, .seed = 1, .sampler = sampler});
  CHECK(full.num_batches() == 5);
  const std::vector<int64_t> epoch1 = run_epoch(full, 1);
  CHECK(epoch1 == sampler->indices(1));

  DataLoader first(index_dataset(10), {.batch_size = 5, .seed = 1, .sampler = sampler});
  first.start_epoch(1);
  first.next();
  first.next();
  const mg::StateDict st = first.state();
  CHECK(st.strings.at("sampler") == "WeightedRandomSampler");
  CHECK(st.ints.at("sampler_seed") == 8);
  CHECK(st.ints.at("sampler_num_samples") == 23);
  DataLoader resumed(index_dataset(10), {.batch_size = 5, .seed = 1, .sampler = sampler});
  resumed.load_state(st);
  std::vector<int64_t> rest;
  resumed.start_epoch(1);
  while (auto b = resumed.next()) {
    const mg::Tensor& t = b->at("index");
    rest.insert(rest.end(), t.data<int64_t>(), t.data<int64_t>() + t.numel());
  }
  CHECK(rest == std::vector<int64_t>(epoch1.begin() + 10, epoch1.end()));

  const auto refused = [&](std::shared_ptr<const mg::data::Sampler> other) {
    DataLoader l(index_dataset(10), {.batch_size = 5, .seed = 1, .sampler = std::move(other)});
    return error_of([&] { l.load_state(st); });
  };
  CHECK_THAT(refused(std::make_shared<WeightedRandomSampler>(std::vector<double>{1, 0, 3, 1, 2, 5, 0, 1, 1, 4},
                                                             mg::data::WeightedRandomSamplerOptions{.num_samples = 23, .seed = 9})),
             Catch::Contains("saved with sampler_seed 8 but this loader has 9"));
  CHECK_THAT(refused(std::make_shared<WeightedRandomSampler>(std::vector<double>{1, 0, 3, 1, 2, 5, 0, 1, 1, 3},
                                                             mg::data::WeightedRandomSamplerOptions{.num_samples = 23, .seed = 8})),
             Catch::Contains("sampler_weights_hash"));
  CHECK_THAT(refused(std::make_shared<SubsetRandomSampler>(std::vector<int64_t>{1, 2, 3, 4, 5, 6, 7, 8, 9, 0, 1, 2, 3, 4,
                                                                                5, 6, 7, 8, 9, 0, 1, 2, 3})),
             Catch::Contains("saved with a WeightedRandomSampler but this loader has a SubsetRandomSampler"));
  CHECK_THAT(refused(nullptr), Catch::Contains("saved with a WeightedRandomSampler but this loader has none"));
}

TEST_CASE("The DataLoader checks a user's sampler: indices in range and num_samples of them", "[data][sampler]") {
  struct Broken final : mg::data::Sampler {
    int64_t n;
    std::vector<int64_t> out;
    Broken(int64_t n, std::vector<int64_t> out) : n(n), out(std::move(out)) {}
    int64_t num_samples() const override { return n; }
    std::vector<int64_t> indices(int64_t) const override { return out; }
    void check_dataset_size(int64_t, const std::string&) const override {}
    std::string name() const override { return "Broken"; }
    std::map<std::string, int64_t> settings() const override { return {}; }
  };
  CHECK_THAT(error_of([] { DataLoader(index_dataset(4), {.batch_size = 2, .sampler = std::make_shared<Broken>(2, std::vector<int64_t>{1, 4})}); }),
             Catch::Contains("DataLoader: Broken::indices(0) returned index 4, outside TensorDataset's [0, 4)"));
  CHECK_THAT(error_of([] { DataLoader(index_dataset(4), {.batch_size = 2, .sampler = std::make_shared<Broken>(3, std::vector<int64_t>{1, 2})}); }),
             Catch::Contains("DataLoader: Broken::indices(0) returned 2 indices but its num_samples() is 3"));
  // A working one: the loader serves exactly its order.
  DataLoader ok(index_dataset(4), {.batch_size = 2, .sampler = std::make_shared<Broken>(3, std::vector<int64_t>{3, 3, 0})});
  CHECK(run_epoch(ok, 0) == std::vector<int64_t>{3, 3, 0});
  CHECK(ok.state().strings.at("sampler") == "Broken");
}

TEST_CASE("Random samplers refuse bad arguments, and the loader a dataset they cannot serve", "[data][sampler]") {
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  CHECK_THAT(error_of([] { WeightedRandomSampler({}); }), Catch::Contains("WeightedRandomSampler: no weights"));
  CHECK_THAT(error_of([] { WeightedRandomSampler({1.0, -1.0}); }),
             Catch::Contains("WeightedRandomSampler: weight 1 is -1; weights must be finite and >= 0"));
  CHECK_THAT(error_of([&] { WeightedRandomSampler({nan}); }), Catch::Contains("weight 0 is nan"));
  CHECK_THAT(error_of([&] { WeightedRandomSampler({inf}); }), Catch::Contains("weight 0 is inf"));
  CHECK_THAT(error_of([] { WeightedRandomSampler({1e308, 1e308}); }),
             Catch::Contains("the weights sum to inf; they must have a finite, positive sum"));
  CHECK_THAT(error_of([] { WeightedRandomSampler({0.0, 0.0}); }), Catch::Contains("the weights sum to 0"));
  CHECK_THAT(error_of([] { WeightedRandomSampler({1.0}, {.num_samples = -1}); }),
             Catch::Contains("num_samples must be >= 0 (0: one per weight), got -1"));
  CHECK_THAT(error_of([] { WeightedRandomSampler({1.0, 0.0, 2.0}, {.num_samples = 3, .replacement = false}); }),
             Catch::Contains("3 samples without replacement, but only 2 of the 3 weights are positive"));
  CHECK_THAT(error_of([] { WeightedRandomSampler({1.0}).indices(int64_t(1) << 32); }),
             Catch::Contains("WeightedRandomSampler::indices: epoch must be in [0, 2^32)"));
  CHECK_THAT(error_of([] { SubsetRandomSampler({0, -2}); }),
             Catch::Contains("SubsetRandomSampler: index 1 of the subset is -2; indices must be >= 0"));
  CHECK_THAT(error_of([] { SubsetRandomSampler({0}).indices(-1); }),
             Catch::Contains("SubsetRandomSampler::indices: epoch must be in [0, 2^32)"));

  CHECK_THAT(error_of([] {
               DataLoader(index_dataset(3), {.batch_size = 2, .sampler = std::make_shared<WeightedRandomSampler>(
                                                                  std::vector<double>{1, 1, 1, 1})});
             }),
             Catch::Contains("DataLoader: the WeightedRandomSampler has 4 weights but TensorDataset has 3 examples"));
  CHECK_THAT(error_of([] {
               DataLoader(index_dataset(3),
                          {.batch_size = 2, .sampler = std::make_shared<SubsetRandomSampler>(std::vector<int64_t>{0, 3})});
             }),
             Catch::Contains("DataLoader: index 1 of the SubsetRandomSampler's subset is 3, beyond TensorDataset's 3 examples"));
  CHECK_THAT(error_of([] {
               DataLoader(index_dataset(3), {.batch_size = 2, .shuffle = true,
                                             .sampler = std::make_shared<SubsetRandomSampler>(std::vector<int64_t>{0})});
             }),
             Catch::Contains("the SubsetRandomSampler decides the order (its own seed); set the loader's .shuffle = false"));
}

namespace {

// Records what the loader passes: each example's index, its repeat count and its first random word.
class RecordingDataset final : public mg::data::Dataset {
 public:
  explicit RecordingDataset(int64_t n) : n_(n) {}
  int64_t size() const override { return n_; }
  mg::data::Batch get_batch(const std::vector<int64_t>& indices, const mg::data::BatchContext& ctx) const override {
    std::vector<int64_t> idx, rep, word;
    for (std::size_t k = 0; k < indices.size(); ++k) {
      idx.push_back(indices[k]);
      rep.push_back(k < ctx.repeats.size() ? ctx.repeats[k] : 0);
      word.push_back(mg::data::example_words(ctx, k, indices[k], mg::data::kAugmentStream).v[0]);
    }
    mg::data::Batch b;
    const int64_t B = int64_t(indices.size());
    b.add("index", mg::from_vector(idx, {B}));
    b.add("repeat", mg::from_vector(rep, {B}));
    b.add("word", mg::from_vector(word, {B}));
    return b;
  }
  std::string name() const override { return "RecordingDataset"; }

 private:
  int64_t n_;
};

std::vector<int64_t> column(const mg::data::Batch& b, const char* name) {
  const mg::Tensor& t = b.at(name);
  return std::vector<int64_t>(t.data<int64_t>(), t.data<int64_t>() + t.numel());
}

}  // namespace

TEST_CASE("A repeated draw gets its own per-example randomness, and a first draw keeps (seed, epoch, index)'s",
          "[data][sampler]") {
  auto sampler = std::make_shared<WeightedRandomSampler>(std::vector<double>{1.0, 0.0, 0.5},
                                                         mg::data::WeightedRandomSamplerOptions{.num_samples = 12, .seed = 2});
  const auto ds = std::make_shared<RecordingDataset>(3);
  for (int prefetch : {0, 2}) {
    DataLoader loader(ds, {.batch_size = 5, .seed = 9, .prefetch = prefetch, .sampler = sampler});
    loader.start_epoch(3);
    std::map<int64_t, int64_t> count;
    std::set<std::pair<int64_t, int64_t>> words;  // (index, word): all different
    while (auto b = loader.next()) {
      const std::vector<int64_t> idx = column(*b, "index"), rep = column(*b, "repeat"), word = column(*b, "word");
      for (std::size_t k = 0; k < idx.size(); ++k) {
        CHECK(rep[k] == count[idx[k]]++);
        if (rep[k] == 0) CHECK(uint32_t(word[k]) == mg::data::random_words(9, 3, idx[k], mg::data::kAugmentStream).v[0]);
        CHECK(words.insert({idx[k], word[k]}).second);
      }
    }
    CHECK(count[1] == 0);
    CHECK(count[0] + count[2] == 12);
  }
  // A loader whose order never repeats passes no repeats.
  DataLoader plain(ds, {.batch_size = 3, .shuffle = true});
  CHECK(column(*plain.next(), "repeat") == std::vector<int64_t>{0, 0, 0});
  // The MLM collator masks a repeat differently from the first draw, and the first draw as before.
  const mg::data::SpecialTokenIds sp{};
  mg::data::MlmCollator collator(100, sp);
  std::vector<int32_t> seq{2};
  for (int i = 0; i < 60; ++i) seq.push_back(10 + i);
  seq.push_back(3);
  mg::data::BatchContext ctx{.seed = 5, .epoch = 1, .repeats = {0, 1}};
  const mg::data::Batch twice = collator.collate({seq, seq}, {7, 7}, ctx);
  const mg::data::Batch once = collator.collate({seq}, {7}, {.seed = 5, .epoch = 1});
  const std::vector<int64_t> ids = column(twice, "input_ids"), first = column(once, "input_ids");
  CHECK(std::vector<int64_t>(ids.begin(), ids.begin() + 62) == first);
  CHECK(std::vector<int64_t>(ids.begin() + 62, ids.end()) != first);
}
