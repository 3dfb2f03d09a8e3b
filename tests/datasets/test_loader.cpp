// DataLoader: every index once per epoch, drop_last, seeded orders (reproducible, different across
// epochs and seeds, independent of the prefetch depth and the number of workers), resume mid-epoch
// from state(), bounded prefetch, clean shutdown mid-epoch and while an exception unwinds, dataset errors surfacing on
// the caller's thread; epoch_permutation and TensorDataset.
#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <limits>
#include <map>
#include <set>
#include <stdexcept>
#include <thread>

#include "core/factory.h"
#include "data/loader.h"
#include "data/tensor_dataset.h"
#include "test_util.h"

using mg::data::Batch;
using mg::data::BatchContext;
using mg::data::DataLoader;
using mg::data::DataLoaderOptions;

namespace {

// Example i is ("index": i, "noise": a random word keyed by (seed, epoch, i)); optional delay per
// batch, a failure on chosen examples (a number of times), and a count of get_batch calls.
class IndexDataset : public mg::data::Dataset {
 public:
  explicit IndexDataset(int64_t n) : n_(n) {}
  int64_t size() const override { return n_; }
  std::string name() const override { return "IndexDataset"; }
  Batch get_batch(const std::vector<int64_t>& indices, const BatchContext& ctx) const override {
    calls.fetch_add(1);
    const int now = in_flight.fetch_add(1) + 1;
    for (int m = max_in_flight.load(); now > m && !max_in_flight.compare_exchange_weak(m, now);) {
    }
    struct Leave {
      std::atomic<int>& n;
      ~Leave() { n.fetch_sub(1); }
    } leave{in_flight};
    if (delay.count() > 0) std::this_thread::sleep_for(delay);
    // 0-4 ms by the first index, so that batches made side by side finish out of order.
    if (jitter && !indices.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(indices[0] * 7919 % 5));
    for (int64_t i : indices) {
      if (i == fail_on && failures_left.load() != 0) {
        failures_left.fetch_sub(1);
        if (throw_std) throw std::runtime_error("disk on fire at " + std::to_string(i));
        if (throw_index) MG_THROW(IndexError, "IndexDataset: no example ", i);
        if (throw_internal) MG_THROW(InternalError, "IndexDataset: broken invariant at ", i);
        MG_THROW(Error, "IndexDataset: cannot read example ", i);
      }
    }
    Batch b;
    b.add("index", mg::from_vector<int64_t>(indices));
    std::vector<int64_t> noise;
    for (int64_t i : indices) {
      noise.push_back(mg::data::random_words(ctx.seed, ctx.epoch, i, mg::data::kAugmentStream).v[0]);
    }
    b.add("noise", mg::from_vector<int64_t>(noise));
    return b;
  }

  int64_t n_;
  std::chrono::milliseconds delay{0};
  int64_t fail_on = -1;
  mutable std::atomic<int> failures_left{-1};  // -1: forever
  bool throw_std = false;
  bool throw_internal = false;
  bool throw_index = false;
  mutable std::atomic<int> calls{0};
  bool jitter = false;
  mutable std::atomic<int> in_flight{0}, max_in_flight{0};  // get_batch calls running at once
};

std::vector<int64_t> as_i64(const mg::Tensor& t) {
  const int64_t* p = t.data<int64_t>();
  return std::vector<int64_t>(p, p + t.numel());
}

// All batches of one epoch as lists of indices (and the noise, when asked).
std::vector<std::vector<int64_t>> run_epoch(DataLoader& loader, int64_t epoch,
                                            std::vector<std::vector<int64_t>>* noise = nullptr) {
  loader.start_epoch(epoch);
  std::vector<std::vector<int64_t>> out;
  while (auto batch = loader.next()) {
    REQUIRE(batch->epoch == epoch);
    REQUIRE(batch->index == int64_t(out.size()));
    const std::vector<int64_t> idx = as_i64(batch->at("index"));
    REQUIRE(idx == batch->indices);
    out.push_back(idx);
    if (noise) noise->push_back(as_i64(batch->at("noise")));
  }
  REQUIRE(int64_t(out.size()) == loader.num_batches());
  REQUIRE(!loader.next());  // stays over
  return out;
}

std::vector<int64_t> flatten(const std::vector<std::vector<int64_t>>& batches) {
  std::vector<int64_t> all;
  for (const auto& b : batches) all.insert(all.end(), b.begin(), b.end());
  return all;
}

}  // namespace

TEST_CASE("loader: epoch_permutation is a seeded permutation", "[data][loader]") {
  for (int64_t n : {0, 1, 2, 7, 1000}) {
    std::vector<int64_t> p = mg::data::epoch_permutation(n, 42, 3);
    REQUIRE(int64_t(p.size()) == n);
    std::sort(p.begin(), p.end());
    for (int64_t i = 0; i < n; ++i) REQUIRE(p[std::size_t(i)] == i);
  }
  const auto a = mg::data::epoch_permutation(1000, 42, 0);
  CHECK(a == mg::data::epoch_permutation(1000, 42, 0));
  CHECK(a != mg::data::epoch_permutation(1000, 42, 1));
  CHECK(a != mg::data::epoch_permutation(1000, 43, 0));
  // Fixed values: a checkpoint written today must resume with the same order tomorrow, so the
  // permutation's definition (loader.h) may not drift.
  CHECK(mg::data::epoch_permutation(10, 42, 0) == std::vector<int64_t>{1, 2, 8, 3, 5, 9, 7, 6, 4, 0});
  // Roughly uniform: position 0 takes each of 10 values about 1/10 of the time over many epochs.
  std::vector<int> first(10, 0);
  for (int64_t e = 0; e < 5000; ++e) ++first[std::size_t(mg::data::epoch_permutation(10, 7, e)[0])];
  for (int c : first) CHECK(std::abs(c - 500) < 100);  // 4.7 sigma
}

TEST_CASE("loader: every index exactly once per epoch - drop_last", "[data][loader]") {
  auto ds = std::make_shared<IndexDataset>(1003);
  for (const bool shuffle : {false, true}) {
    for (const int prefetch : {0, 3}) {
      INFO("shuffle " << shuffle << " prefetch " << prefetch);
      DataLoader keep(ds, {.batch_size = 64, .shuffle = shuffle, .seed = 5, .prefetch = prefetch});
      CHECK(keep.num_batches() == 16);
      const auto batches = run_epoch(keep, 0);
      for (std::size_t b = 0; b < 15; ++b) CHECK(batches[b].size() == 64);
      CHECK(batches[15].size() == 1003 - 15 * 64);  // 43
      std::vector<int64_t> all = flatten(batches);
      if (!shuffle) {
        for (int64_t i = 0; i < 1003; ++i) REQUIRE(all[std::size_t(i)] == i);
      }
      std::sort(all.begin(), all.end());
      for (int64_t i = 0; i < 1003; ++i) REQUIRE(all[std::size_t(i)] == i);

      DataLoader drop(ds, {.batch_size = 64, .shuffle = shuffle, .drop_last = true, .seed = 5,
                           .prefetch = prefetch});
      CHECK(drop.num_batches() == 15);
      const auto dropped = run_epoch(drop, 0);
      for (const auto& b : dropped) CHECK(b.size() == 64);
      std::vector<int64_t> kept = flatten(dropped);
      std::set<int64_t> unique(kept.begin(), kept.end());
      CHECK(unique.size() == 960);  // no repeats; 43 examples left out this epoch
      // The same batches as without drop_last, minus the short one.
      CHECK(std::equal(dropped.begin(), dropped.end(), batches.begin()));
    }
  }
  // Exact multiples and tiny datasets.
  auto ds8 = std::make_shared<IndexDataset>(8);
  CHECK(DataLoader(ds8, {.batch_size = 4}).num_batches() == 2);
  CHECK(DataLoader(ds8, {.batch_size = 4, .drop_last = true}).num_batches() == 2);
  CHECK(DataLoader(ds8, {.batch_size = 16}).num_batches() == 1);
  CHECK(DataLoader(ds8, {.batch_size = 16, .drop_last = true}).num_batches() == 0);
  DataLoader empty_epoch(ds8, {.batch_size = 16, .drop_last = true});
  CHECK(!empty_epoch.next());
  auto ds0 = std::make_shared<IndexDataset>(0);
  DataLoader none(ds0, {.batch_size = 4, .shuffle = true});
  CHECK(none.num_batches() == 0);
  CHECK(!none.next());
}

TEST_CASE("loader: the order is reproducible from the seed and changes across epochs and seeds",
          "[data][loader]") {
  auto ds = std::make_shared<IndexDataset>(500);
  const DataLoaderOptions opt = {.batch_size = 32, .shuffle = true, .seed = 1234};
  DataLoader a(ds, opt), b(ds, opt);
  DataLoaderOptions other_seed = opt;
  other_seed.seed = 1235;
  DataLoader c(ds, other_seed);
  std::vector<std::vector<int64_t>> noise_a0, noise_b0, noise_a1;
  const auto a0 = run_epoch(a, 0, &noise_a0);
  const auto a1 = run_epoch(a, 1, &noise_a1);
  const auto b0 = run_epoch(b, 0, &noise_b0);
  CHECK(a0 == b0);
  CHECK(noise_a0 == noise_b0);        // the context (seed, epoch) reached the dataset
  CHECK(a0 != a1);                    // a new permutation each epoch
  CHECK(noise_a0 != noise_a1);
  CHECK(run_epoch(c, 0) != a0);       // and for another seed
  CHECK(run_epoch(b, 1) == a1);       // epochs need not be visited in order
  CHECK(run_epoch(b, 0) == a0);
  // The order is the documented one.
  const auto perm = mg::data::epoch_permutation(500, 1234, 1);
  CHECK(flatten(a1) == perm);
  CHECK(a.batch_indices(1, 3) == a1[3]);
  CHECK(a.batch_indices(0, 15) == a0[15]);
  MG_REQUIRE_ERROR(a.batch_indices(0, 16), "batch 16 out of range for 16 batches");
  // The batches do not depend on the prefetch depth or the thread's timing.
  for (const int prefetch : {0, 1, 5}) {
    DataLoaderOptions o = opt;
    o.prefetch = prefetch;
    DataLoader p(ds, o);
    std::vector<std::vector<int64_t>> noise;
    CHECK(run_epoch(p, 0, &noise) == a0);
    CHECK(noise == noise_a0);
  }
}

TEST_CASE("loader: state()/load_state() resume mid-epoch with the batches of an uninterrupted run",
          "[data][loader]") {
  auto ds = std::make_shared<IndexDataset>(777);
  const DataLoaderOptions opt = {.batch_size = 50, .shuffle = true, .seed = 99, .prefetch = 3};
  // The uninterrupted run: epochs 0..2.
  DataLoader full(ds, opt);
  std::vector<std::vector<int64_t>> want, want_noise;
  for (int64_t e = 0; e < 3; ++e) {
    std::vector<std::vector<int64_t>> noise;
    for (const auto& b : run_epoch(full, e, &noise)) want.push_back(b);
    for (const auto& n : noise) want_noise.push_back(n);
  }
  const int64_t per_epoch = full.num_batches();  // 16
  REQUIRE(per_epoch == 16);

  for (const int64_t stop_after : {int64_t(0), int64_t(7), per_epoch, per_epoch + 5}) {
    INFO("interrupted after " << stop_after << " batches");
    // The interrupted run: training stops after `stop_after` batches (the thread has prefetched
    // more by then), and a checkpoint is written.
    mg::StateDict saved;
    {
      DataLoader first(ds, opt);
      int64_t seen = 0;
      for (int64_t e = 0; e < 3 && seen < stop_after; ++e) {
        first.start_epoch(e);
        while (seen < stop_after) {
          auto b = first.next();
          if (!b) break;
          REQUIRE(b->indices == want[std::size_t(seen)]);
          ++seen;
        }
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));  // let the thread run ahead
      saved = first.state();
      CHECK(saved.ints.at("next_batch") == (stop_after == per_epoch ? per_epoch : stop_after % per_epoch));
    }
    // The resumed run: a new loader constructed with another seed; the state restores it.
    DataLoaderOptions fresh = opt;
    fresh.seed = 1;
    fresh.prefetch = stop_after % 2 ? 0 : 2;
    DataLoader second(ds, fresh);
    second.load_state(saved);
    CHECK(second.seed() == 99);
    std::vector<std::vector<int64_t>> got, got_noise;
    for (int64_t e = second.epoch(); e < 3; ++e) {
      second.start_epoch(e);  // keeps the restored position in the saved epoch
      while (auto b = second.next()) {
        got.push_back(b->indices);
        got_noise.push_back(as_i64(b->at("noise")));
      }
    }
    REQUIRE(got.size() == want.size() - std::size_t(stop_after));
    CHECK(std::equal(got.begin(), got.end(), want.begin() + stop_after));
    CHECK(std::equal(got_noise.begin(), got_noise.end(), want_noise.begin() + stop_after));
  }
}

TEST_CASE("loader: load_state checks what would change the batches", "[data][loader]") {
  auto ds = std::make_shared<IndexDataset>(100);
  DataLoader a(ds, {.batch_size = 10, .shuffle = true, .seed = 3});
  a.start_epoch(4);
  a.next();
  a.next();
  const mg::StateDict s = a.state();
  CHECK(s.ints.at("seed") == 3);
  CHECK(s.ints.at("epoch") == 4);
  CHECK(s.ints.at("next_batch") == 2);

  DataLoader other_batch(ds, {.batch_size = 20, .shuffle = true});
  MG_REQUIRE_ERROR(other_batch.load_state(s), "saved with batch_size 10 but this loader has 20");
  DataLoader other_shuffle(ds, {.batch_size = 10});
  MG_REQUIRE_ERROR(other_shuffle.load_state(s), "saved with shuffle 1 but this loader has 0");
  auto ds2 = std::make_shared<IndexDataset>(101);
  DataLoader other_size(ds2, {.batch_size = 10, .shuffle = true});
  MG_REQUIRE_ERROR(other_size.load_state(s), "saved with dataset_size 100 but this loader has 101");
  mg::StateDict bad = s;
  bad.ints["next_batch"] = 11;
  DataLoader c(ds, {.batch_size = 10, .shuffle = true});
  MG_REQUIRE_ERROR(c.load_state(bad), "next_batch 11 out of range [0, 10]");
  bad.ints.erase("next_batch");
  MG_REQUIRE_ERROR(c.load_state(bad), "DataLoader::load_state: state has no integer 'next_batch'");

  // start_epoch of another epoch after load_state starts that epoch from batch 0.
  DataLoader d(ds, {.batch_size = 10, .shuffle = true});
  d.load_state(s);
  d.start_epoch(5);
  CHECK(d.next()->indices == a.batch_indices(5, 0));
  // And a second start_epoch of the loaded epoch starts it over.
  d.load_state(s);
  d.start_epoch(4);
  d.start_epoch(4);
  CHECK(d.next()->indices == a.batch_indices(4, 0));
  // next() without start_epoch continues from the loaded position.
  d.load_state(s);
  CHECK(d.next()->indices == a.batch_indices(4, 2));
}

TEST_CASE("loader: the background thread prepares at most `prefetch` batches ahead",
          "[data][loader]") {
  auto ds = std::make_shared<IndexDataset>(1000);
  DataLoader loader(ds, {.batch_size = 10, .prefetch = 3});
  CHECK(ds->calls.load() == 0);  // no thread before the first next()
  REQUIRE(loader.next());
  // The thread fills the queue with batches 1, 2, 3 and then waits for room.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (ds->calls.load() < 4 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  CHECK(ds->calls.load() == 4);
  REQUIRE(loader.next());
  while (ds->calls.load() < 5 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  CHECK(ds->calls.load() == 5);
  CHECK(loader.next_batch() == 2);
}

TEST_CASE("loader: several workers give the batches of one, in order, made side by side", "[data][loader]") {
  auto ds = std::make_shared<IndexDataset>(203);
  ds->jitter = true;
  DataLoader ref(ds, {.batch_size = 8, .shuffle = true, .seed = 5, .prefetch = 0});
  std::vector<std::vector<int64_t>> want_noise[2];
  const std::vector<std::vector<int64_t>> want[2] = {run_epoch(ref, 0, &want_noise[0]), run_epoch(ref, 1, &want_noise[1])};
  for (const int workers : {2, 4}) {
    for (const int prefetch : {1, 6}) {
      INFO("num_workers " << workers << " prefetch " << prefetch);
      ds->max_in_flight = 0;
      DataLoader loader(ds, {.batch_size = 8, .shuffle = true, .seed = 5, .prefetch = prefetch, .num_workers = workers});
      for (int64_t e : {0, 1}) {
        std::vector<std::vector<int64_t>> noise;
        CHECK(run_epoch(loader, e, &noise) == want[e]);
        CHECK(noise == want_noise[e]);
      }
      CHECK(ds->max_in_flight.load() >= 2);  // the workers did run get_batch at the same time
      CHECK(ds->max_in_flight.load() <= workers);
    }
  }
}

TEST_CASE("loader: several workers make at most max(prefetch, num_workers) batches ahead", "[data][loader]") {
  auto ds = std::make_shared<IndexDataset>(1000);
  DataLoader loader(ds, {.batch_size = 10, .prefetch = 2, .num_workers = 3});
  REQUIRE(loader.next());
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (ds->calls.load() < 4 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  CHECK(ds->calls.load() == 4);  // batch 0, then 1, 2, 3 ahead of the caller
  for (int k = 0; k < 3; ++k) REQUIRE(loader.next());
  while (ds->calls.load() < 7 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  CHECK(ds->calls.load() == 7);
}

TEST_CASE("loader: the thread is stopped and joined mid-epoch, on restart and while unwinding",
          "[data][loader]") {
  auto ds = std::make_shared<IndexDataset>(10000);
  ds->delay = std::chrono::milliseconds(20);
  const auto t0 = std::chrono::steady_clock::now();
  for (const int workers : {1, 4}) {
    DataLoader loader(ds, {.batch_size = 10, .shuffle = true, .prefetch = 4, .num_workers = workers});
    REQUIRE(loader.next());
  }  // 999 batches left: the destructor must not wait for them
  {
    DataLoader never_started(ds, {.batch_size = 10, .prefetch = 4});
  }
  try {
    DataLoader loader(ds, {.batch_size = 10, .prefetch = 2});
    while (auto b = loader.next()) {
      if (b->index == 2) throw std::runtime_error("the model diverged");
    }
  } catch (const std::runtime_error& e) {
    CHECK(std::string(e.what()) == "the model diverged");
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  CHECK(seconds < 5.0);  // a handful of 20 ms batches, not 1000 of them

  // start_epoch in the middle of an epoch drops the prefetched batches of the old position.
  ds->delay = std::chrono::milliseconds(0);
  DataLoader a(ds, {.batch_size = 100, .shuffle = true, .seed = 8, .prefetch = 2});
  DataLoader b(ds, {.batch_size = 100, .shuffle = true, .seed = 8, .prefetch = 2});
  a.start_epoch(0);
  for (int k = 0; k < 3; ++k) REQUIRE(a.next());
  CHECK(run_epoch(a, 1) == run_epoch(b, 1));
  a.start_epoch(2);
  a.next();
  CHECK(run_epoch(a, 2) == run_epoch(b, 2));
}

TEST_CASE("loader: many short epochs and restarts (thread handover)", "[data][loader]") {
  auto ds = std::make_shared<IndexDataset>(64);
  DataLoader ref(ds, {.batch_size = 4, .shuffle = true, .seed = 77, .prefetch = 0});
  DataLoader loader(ds, {.batch_size = 4, .shuffle = true, .seed = 77, .prefetch = 2});
  for (int64_t e = 0; e < 200; ++e) {
    loader.start_epoch(e);
    const int64_t take = e % 17;  // sometimes the whole epoch, mostly part of it
    for (int64_t k = 0; k < take; ++k) {
      auto b = loader.next();
      if (!b) break;
      REQUIRE(b->indices == ref.batch_indices(e, k));
    }
  }
}

TEST_CASE("loader: an exception in get_batch surfaces on the caller's thread with context",
          "[data][loader]") {
  for (const auto& [prefetch, workers] : {std::pair{0, 1}, std::pair{2, 1}, std::pair{3, 3}}) {
    for (const bool throw_std : {false, true}) {
      INFO("prefetch " << prefetch << " num_workers " << workers << " std::exception " << throw_std);
      auto ds = std::make_shared<IndexDataset>(100);
      ds->fail_on = 37;
      ds->throw_std = throw_std;
      ds->jitter = workers > 1;
      DataLoader loader(ds, {.batch_size = 10, .prefetch = prefetch, .num_workers = workers});
      for (int k = 0; k < 3; ++k) REQUIRE(loader.next());
      const std::string cause = throw_std ? "disk on fire at 37" : "IndexDataset: cannot read example 37";
      MG_REQUIRE_ERROR(loader.next(), "DataLoader: IndexDataset::get_batch failed on batch 3 of epoch 0 "
                                      "(examples [30, 31, 32, 33, ...]): " + cause);
      CHECK(loader.next_batch() == 3);  // the position stays at the failed batch
      MG_REQUIRE_ERROR(loader.next(), cause);  // a retry fails the same way
      // A transient failure: the retry succeeds and the epoch continues in order.
      ds->failures_left = 1;
      MG_REQUIRE_ERROR(loader.next(), cause);
      auto b = loader.next();
      REQUIRE(b);
      CHECK(b->index == 3);
      CHECK(b->indices.front() == 30);
      int64_t rest = 0;
      while (auto r = loader.next()) {
        CHECK(r->index == 4 + rest);
        ++rest;
      }
      CHECK(rest == 6);
    }
  }
}

TEST_CASE("loader: a dataset's error reaches the caller as its own class", "[data][loader]") {
  // PyTorch re-raises a worker's exception as its class: catch (const mg::IndexError&) works.
  for (const int prefetch : {0, 2}) {
    auto ds = std::make_shared<IndexDataset>(20);
    ds->fail_on = 12;
    ds->throw_index = true;
    DataLoader loader(ds, {.batch_size = 10, .prefetch = prefetch});
    REQUIRE(loader.next());
    try {
      (void)loader.next();
      FAIL("no error");
    } catch (const mg::IndexError& e) {
      CHECK(std::string(e.what()).find("IndexDataset::get_batch failed on batch 1 of epoch 0 (examples [10, 11, 12, "
                                       "13, ...]): IndexDataset: no example 12") != std::string::npos);
    }
  }
}

TEST_CASE("loader: an InternalError of a dataset stays one", "[data][loader]") {
  for (const int prefetch : {0, 2}) {
    auto ds = std::make_shared<IndexDataset>(20);
    ds->fail_on = 3;
    ds->throw_internal = true;
    DataLoader loader(ds, {.batch_size = 10, .prefetch = prefetch});
    CHECK_THROWS_AS(loader.next(), mg::InternalError);
  }
}

TEST_CASE("loader: batch_indices checks the epoch, and a dataset's own batch knows its size", "[data][loader]") {
  auto ds = std::make_shared<IndexDataset>(25);
  DataLoader loader(ds, {.batch_size = 10});
  CHECK(loader.batch_indices(0, 2) == std::vector<int64_t>{20, 21, 22, 23, 24});
  MG_REQUIRE_ERROR(loader.batch_indices(-1, 0), "epoch must be in [0, 2^32)");
  // get_batch called directly (no loader): the batch's size is its tensors' length.
  const Batch b = ds->get_batch({3, 4, 5}, BatchContext{});
  CHECK(b.indices.empty());
  CHECK(b.size() == 3);
  CHECK(Batch{}.size() == 0);
}

TEST_CASE("loader: options are validated", "[data][loader]") {
  auto ds = std::make_shared<IndexDataset>(10);
  MG_REQUIRE_ERROR(DataLoader(ds, {.batch_size = 0}), "DataLoader: batch_size must be >= 1, got 0");
  MG_REQUIRE_ERROR(DataLoader(ds, {.prefetch = -1}), "DataLoader: prefetch must be >= 0, got -1");
  MG_REQUIRE_ERROR(DataLoader(ds, {.num_workers = 0}), "DataLoader: num_workers must be >= 1, got 0");
  MG_REQUIRE_ERROR(DataLoader(ds, {.prefetch = 0, .num_workers = 2}),
                   "DataLoader: num_workers = 2 needs prefetch > 0");
  MG_REQUIRE_ERROR(DataLoader(nullptr), "DataLoader: the dataset is null");
  DataLoader loader(ds);
  MG_REQUIRE_ERROR(loader.start_epoch(-1), "epoch must be in [0, 2^32), got -1");
  CHECK(loader.num_batches() == 10);  // batch_size 1 by default
}

TEST_CASE("loader: a batch_size past the dataset, up to INT64_MAX, gives one batch of everything", "[data][loader]") {
  auto ds = std::make_shared<IndexDataset>(10);
  for (const int64_t bs : {int64_t(11), int64_t(1) << 62, std::numeric_limits<int64_t>::max()}) {
    INFO(bs);
    DataLoader loader(ds, {.batch_size = bs, .shuffle = false});
    CHECK(loader.num_batches() == 1);
    CHECK(run_epoch(loader, 0) == std::vector<std::vector<int64_t>>{{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}});
    DataLoader dropped(ds, {.batch_size = bs, .drop_last = true});
    CHECK(dropped.num_batches() == 0);
  }
}

namespace {
// A dataset whose "x" has one row fewer than the batch has examples.
class ShortRowsDataset : public mg::data::Dataset {
 public:
  int64_t size() const override { return 8; }
  std::string name() const override { return "ShortRows"; }
  Batch get_batch(const std::vector<int64_t>& indices, const BatchContext&) const override {
    Batch b;
    b.add("x", mg::zeros({int64_t(indices.size()) - 1, 2}));
    return b;
  }
};
}  // namespace

TEST_CASE("loader: a dataset batch without one row per example is an error naming the tensor", "[data][loader]") {
  DataLoader loader(std::make_shared<ShortRowsDataset>(), {.batch_size = 4, .prefetch = 0});
  loader.start_epoch(0);
  MG_REQUIRE_ERROR(loader.next(), "ShortRows::get_batch returned a bad batch 0 of epoch 0");
  MG_REQUIRE_ERROR(loader.next(), "tensor 'x' is [3, 2] f32 cpu but the batch has 4 examples");
}

TEST_CASE("loader: TensorDataset gathers rows of named tensors", "[data][loader]") {
  const mg::Tensor x = mg::arange(0, 12, 1, {.dtype = mg::DType::F32}).view({6, 2});  // [6, 2]
  const mg::Tensor y = mg::from_vector<int64_t>({10, 11, 12, 13, 14, 15});           // [6]
  auto ds = std::make_shared<mg::data::TensorDataset>(
      std::vector<std::pair<std::string, mg::Tensor>>{{"input", x}, {"target", y}});
  CHECK(ds->size() == 6);
  const Batch b = ds->get_batch({4, 0, 4}, {});
  CHECK(b.at("input").shape() == mg::Shape{3, 2});
  CHECK(mg::test::values(b.at("input")) == std::vector<double>{8, 9, 0, 1, 8, 9});
  CHECK(b.at("target").dtype() == mg::DType::I64);
  CHECK(mg::test::values(b.at("target")) == std::vector<double>{14, 10, 14});
  CHECK(b.contains("input"));
  CHECK(!b.contains("mask"));
  MG_REQUIRE_ERROR(b.at("mask"), "Batch: no tensor 'mask'; the batch has [input, target]");
  MG_REQUIRE_ERROR(ds->get_batch({6}, {}), "TensorDataset: index 6 out of range for 6 examples");

  DataLoader loader(ds, {.batch_size = 4, .shuffle = true, .seed = 2});
  std::vector<double> targets;
  while (auto batch = loader.next()) {
    for (double v : mg::test::values(batch->at("target"))) targets.push_back(v);
  }
  std::sort(targets.begin(), targets.end());
  CHECK(targets == std::vector<double>{10, 11, 12, 13, 14, 15});

  MG_REQUIRE_ERROR(mg::data::TensorDataset({{"a", x}, {"b", mg::zeros({5})}}),
                   "TensorDataset: tensor 'b' has 5 rows but 'a' has 6");
  MG_REQUIRE_ERROR(mg::data::TensorDataset({{"a", x.t()}}), "must be a contiguous CPU tensor");
  MG_REQUIRE_ERROR(mg::data::TensorDataset({{"a", x}, {"a", x}}), "tensor 'a' given twice");
  MG_REQUIRE_ERROR(mg::data::TensorDataset({}), "TensorDataset: no tensors given");
}
