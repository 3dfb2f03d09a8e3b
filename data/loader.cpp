// DataLoader (loader.h). The background workers own nothing but a job description — generation,
// seed, epoch, permutation, next batch to make — all under one mutex; repositioning bumps the
// generation, empties the finished batches and lets each worker drop a batch it was making for
// the old job.
#include "mixgrad/data/loader.h"

#include <algorithm>
#include <condition_variable>
#include <exception>
#include <map>
#include <mutex>
#include <numeric>
#include <thread>
#include <unordered_map>

#include "mixgrad/core/pinned_memory.h"

namespace mg::data {

std::vector<int64_t> epoch_permutation(int64_t n, uint64_t seed, int64_t epoch) {
  MG_CHECK(n >= 0, Error, "epoch_permutation: n must be >= 0, got ", n);
  std::vector<int64_t> order(static_cast<std::size_t>(n));
  std::iota(order.begin(), order.end(), int64_t(0));
  for (int64_t i = n - 1; i > 0; --i) {
    const Philox4 r = random_words(seed, epoch, i, kShuffleStream);
    const uint64_t r64 = (uint64_t(r.v[0]) << 32) | r.v[1];
    const int64_t j = int64_t(r64 % uint64_t(i + 1));  // bias < (i + 1) / 2^64
    std::swap(order[std::size_t(i)], order[std::size_t(j)]);
  }
  return order;
}

namespace {

// Rethrows the exception being handled with `prefix` before its message, as the same mg error
// class (a dataset's IndexError stays catchable as one, an OutOfMemoryError as one); anything
// else becomes an mg::Error.
[[noreturn]] void rethrow_with_context(const std::string& prefix) {
  try {
    throw;
  } catch (const IndexError& e) {
    throw IndexError(prefix + e.what());
  } catch (const ShapeError& e) {
    throw ShapeError(prefix + e.what());
  } catch (const DTypeError& e) {
    throw DTypeError(prefix + e.what());
  } catch (const DeviceError& e) {
    throw DeviceError(prefix + e.what());
  } catch (const OutOfMemoryError& e) {
    throw OutOfMemoryError(prefix + e.what());
  } catch (const CudaError& e) {
    throw CudaError(prefix + e.what());
  } catch (const NotImplementedError& e) {
    throw NotImplementedError(prefix + e.what());
  } catch (const AutogradError& e) {
    throw AutogradError(prefix + e.what());
  } catch (const InternalError& e) {
    throw InternalError(prefix + e.what());
  } catch (const std::exception& e) {
    throw Error(prefix + e.what());
  } catch (...) {
    throw Error(prefix + "unknown exception");
  }
}

// Batch `b` of an epoch whose order is `order`; a get_batch failure is rethrown, as its own mg
// error class, with a message that names the dataset, the batch, the epoch and the first indices. With `pin`, every
// tensor of the batch is copied into pinned host memory (a failure names the tensor and batch).
Batch compute_batch(const Dataset& dataset, const std::vector<int64_t>& order, const std::vector<uint32_t>* repeats,
                    int64_t batch_size, uint64_t seed, int64_t epoch, int64_t b, bool pin) {
  const int64_t begin = b * batch_size;  // < order.size(): b < num_batches
  const int64_t end = begin + std::min<int64_t>(batch_size, int64_t(order.size()) - begin);
  std::vector<int64_t> indices(order.begin() + begin, order.begin() + end);
  BatchContext ctx{.seed = seed, .epoch = epoch};
  if (repeats) ctx.repeats.assign(repeats->begin() + begin, repeats->begin() + end);
  const auto context = [&](const char* what) {
    std::string first;
    for (std::size_t k = 0; k < indices.size() && k < 4; ++k) first += (k ? ", " : "") + std::to_string(indices[k]);
    if (indices.size() > 4) first += ", ...";
    return str_cat("DataLoader: ", dataset.name(), "::get_batch ", what, " batch ", b, " of epoch ", epoch,
                   " (examples [", first, "]): ");
  };
  Batch batch;
  try {
    batch = dataset.get_batch(indices, ctx);
  } catch (...) {
    rethrow_with_context(context("failed on"));
  }
  // A dataset's batch holds one row per example: a tensor of another length would be paired with
  // the wrong examples downstream (Batch::size() is the number of indices).
  for (const auto& [name, t] : batch.tensors) {
    const bool one_row_each = t.defined() && t.dim() >= 1 && t.size(0) == int64_t(indices.size());
    MG_CHECK(one_row_each, Error, context("returned a bad"), "tensor '", name, "' is ",
             t.defined() ? describe(t) : std::string("undefined"), " but the batch has ", indices.size(),
             " examples\n  hint: get_batch must return one row (the first dimension) per index it was given");
  }
  if (pin) {
    for (auto& [name, t] : batch.tensors) {
      try {
        t = t.pin_memory();
      } catch (...) {  // as its own class: an OutOfMemoryError of the pinned allocator stays one
        rethrow_with_context(str_cat("DataLoader: pinning tensor '", name, "' of batch ", b, " of epoch ", epoch,
                                     " failed: "));
      }
    }
  }
  batch.indices = std::move(indices);
  batch.epoch = epoch;
  batch.index = b;
  return batch;
}

// Per position of `order`: how many times its example came earlier in it; null when none repeats.
std::shared_ptr<const std::vector<uint32_t>> repeat_counts(const std::vector<int64_t>& order) {
  std::unordered_map<int64_t, uint32_t> seen;
  seen.reserve(order.size());
  std::vector<uint32_t> repeats(order.size());
  bool any = false;
  for (std::size_t k = 0; k < order.size(); ++k) {
    repeats[k] = seen[order[k]]++;
    any = any || repeats[k] != 0;
  }
  if (!any) return nullptr;
  return std::make_shared<const std::vector<uint32_t>>(std::move(repeats));
}

}  // namespace

struct DataLoader::Prefetcher {
  struct Item {
    Batch batch;
    std::exception_ptr error;
  };

  std::mutex mu;
  std::condition_variable cv_work;   // the workers wait here for a job with room ahead of the caller
  std::condition_variable cv_ready;  // the caller waits here for the next batch
  // ---- guarded by mu ----
  std::map<int64_t, Item> ready;  // finished batches not yet taken, by batch index
  uint64_t generation = 0;
  const Dataset* dataset = nullptr;
  int64_t batch_size = 1;
  int64_t depth = 1;     // batches made or being made ahead of the caller, at most
  bool pin = false;
  uint64_t seed = 0;
  int64_t epoch = 0;
  std::shared_ptr<const std::vector<int64_t>> order;
  std::shared_ptr<const std::vector<uint32_t>> repeats;
  int64_t consume = 0;  // the batch the caller takes next
  int64_t produce = 0;  // next batch to hand to a worker
  int64_t end = 0;      // one past the last batch to make (0 when idle)
  bool failed = false;  // a batch of this job failed: hand out no more until re-armed
  bool stop = false;
  // ----
  std::vector<std::thread> workers;

  // Starts `n` workers; a failure to start one stops and joins those already running.
  void start(int n) {
    try {
      for (int k = 0; k < n; ++k) workers.emplace_back([this] { run(); });
    } catch (...) {
      shut_down();
      throw;
    }
  }
  void shut_down() {
    {
      std::lock_guard<std::mutex> lock(mu);
      stop = true;
    }
    cv_work.notify_all();
    for (std::thread& t : workers) t.join();
    workers.clear();
  }

  // One worker: takes the lowest batch not yet handed out, makes it without the lock, and files it
  // under its index (the workers finish in any order; the caller takes them in order).
  void run() {
    std::unique_lock<std::mutex> lock(mu);
    for (;;) {
      cv_work.wait(lock, [&] { return stop || (!failed && produce < end && produce < consume + depth); });
      if (stop) return;
      const uint64_t gen = generation;
      const int64_t b = produce++;
      const uint64_t job_seed = seed;
      const int64_t job_epoch = epoch;
      const std::shared_ptr<const std::vector<int64_t>> job_order = order;
      const std::shared_ptr<const std::vector<uint32_t>> job_repeats = repeats;
      lock.unlock();
      Item item;
      try {
        item.batch = compute_batch(*dataset, *job_order, job_repeats.get(), batch_size, job_seed, job_epoch, b, pin);
      } catch (...) {
        item.error = std::current_exception();
      }
      lock.lock();
      if (gen != generation) continue;  // repositioned meanwhile: the batch is stale
      // After a failure no later batch is handed out; the earlier ones, already handed out, still
      // arrive, so the caller gets every batch before the failed one and then its error.
      if (item.error) failed = true;
      ready.emplace(b, std::move(item));
      cv_ready.notify_all();
    }
  }
};

DataLoader::DataLoader(std::shared_ptr<const Dataset> dataset, DataLoaderOptions options)
    : dataset_(std::move(dataset)), options_(options) {
  MG_CHECK(dataset_ != nullptr, Error, "DataLoader: the dataset is null");
  MG_CHECK(options_.batch_size >= 1, Error, "DataLoader: batch_size must be >= 1, got ",
           options_.batch_size);
  MG_CHECK(options_.prefetch >= 0, Error, "DataLoader: prefetch must be >= 0, got ",
           options_.prefetch);
  MG_CHECK(options_.num_workers >= 1, Error, "DataLoader: num_workers must be >= 1, got ", options_.num_workers);
  MG_CHECK(options_.prefetch > 0 || options_.num_workers == 1, Error, "DataLoader: num_workers = ",
           options_.num_workers, " needs prefetch > 0",
           "\n  hint: prefetch = 0 makes each batch inside next(), on the caller's thread; set prefetch >= 1");
  if (options_.pin_memory) check_pin_memory_available("DataLoader: pin_memory");
  size_ = dataset_->size();
  MG_CHECK(size_ >= 0, Error, "DataLoader: ", dataset_->name(), "::size() returned ", size_);
  samples_ = size_;
  if (const auto& s = options_.sampler) {
    MG_CHECK(!options_.shuffle, Error, "DataLoader: shuffle = true and a sampler exclude each other",
             "\n  hint: the ", s->name(), " decides the order (its own seed); set the loader's .shuffle = false");
    s->check_dataset_size(size_, dataset_->name());
    samples_ = s->num_samples();
    MG_CHECK(samples_ >= 0, Error, "DataLoader: ", s->name(), "::num_samples() returned ", samples_);
  }
  // Rounded up without samples_ + batch_size - 1, which overflows for a batch_size near INT64_MAX.
  const int64_t bs = options_.batch_size;
  num_batches_ = samples_ / bs + (!options_.drop_last && samples_ % bs != 0 ? 1 : 0);
  reposition(0, 0);
}

DataLoader::~DataLoader() {
  if (prefetcher_) prefetcher_->shut_down();
}

std::vector<int64_t> DataLoader::epoch_order(int64_t epoch) const {
  if (options_.sampler) {
    std::vector<int64_t> order = options_.sampler->indices(epoch);
    // A user's sampler is checked here, where a wrong index would otherwise read out of bounds.
    MG_CHECK(int64_t(order.size()) == samples_, Error, "DataLoader: ", options_.sampler->name(), "::indices(", epoch,
             ") returned ", order.size(), " indices but its num_samples() is ", samples_);
    for (int64_t i : order) {
      MG_CHECK(i >= 0 && i < size_, Error, "DataLoader: ", options_.sampler->name(), "::indices(", epoch,
               ") returned index ", i, ", outside ", dataset_->name(), "'s [0, ", size_, ")");
    }
    return order;
  }
  if (options_.shuffle) return epoch_permutation(size_, options_.seed, epoch);
  std::vector<int64_t> order(static_cast<std::size_t>(size_));
  std::iota(order.begin(), order.end(), int64_t(0));
  return order;
}

void DataLoader::reposition(int64_t epoch, int64_t next_batch) {
  if (!order_ || epoch != epoch_ || order_seed_ != options_.seed) {
    order_ = std::make_shared<const std::vector<int64_t>>(epoch_order(epoch));
    // Only a sampler's order can repeat an example (a shuffle or 0..N-1 cannot).
    repeats_ = options_.sampler ? repeat_counts(*order_) : nullptr;
    order_seed_ = options_.seed;
  }
  epoch_ = epoch;
  next_batch_ = next_batch;
  resumed_ = false;
  armed_ = false;
  if (prefetcher_) {
    std::lock_guard<std::mutex> lock(prefetcher_->mu);
    ++prefetcher_->generation;
    prefetcher_->ready.clear();
    prefetcher_->produce = prefetcher_->end = 0;
  }
}

void DataLoader::start_epoch(int64_t epoch) {
  MG_CHECK(epoch >= 0 && epoch < (int64_t(1) << 32), Error,
           "DataLoader::start_epoch: epoch must be in [0, 2^32), got ", epoch);
  if (resumed_ && epoch == epoch_) {  // keep the position load_state() restored
    resumed_ = false;
    return;
  }
  reposition(epoch, 0);
}

std::optional<Batch> DataLoader::next() {
  resumed_ = false;
  if (next_batch_ >= num_batches_) return std::nullopt;
  if (options_.prefetch == 0) {
    Batch batch = compute_batch(*dataset_, *order_, repeats_.get(), options_.batch_size, options_.seed, epoch_,
                                next_batch_, options_.pin_memory);
    ++next_batch_;
    return batch;
  }
  if (!prefetcher_) {
    auto p = std::make_unique<Prefetcher>();
    p->dataset = dataset_.get();
    p->batch_size = options_.batch_size;
    p->depth = std::max<int64_t>(options_.prefetch, options_.num_workers);  // each worker has one in hand
    p->pin = options_.pin_memory;
    p->start(options_.num_workers);  // kept only once the workers run
    prefetcher_ = std::move(p);
  }
  Prefetcher& p = *prefetcher_;
  std::unique_lock<std::mutex> lock(p.mu);
  if (!armed_) {  // give the workers the job: this epoch from next_batch_ on
    ++p.generation;
    p.ready.clear();
    p.seed = options_.seed;
    p.epoch = epoch_;
    p.order = order_;
    p.repeats = repeats_;
    p.consume = p.produce = next_batch_;
    p.end = num_batches_;
    p.failed = false;
    armed_ = true;
    p.cv_work.notify_all();
  }
  p.cv_ready.wait(lock, [&] { return p.ready.count(next_batch_) != 0; });
  auto node = p.ready.extract(next_batch_);
  Prefetcher::Item& item = node.mapped();
  if (item.error) {  // stay at this batch; the next call re-arms and retries it
    ++p.generation;
    p.ready.clear();
    p.produce = p.end = 0;
    armed_ = false;
    lock.unlock();
    std::rethrow_exception(item.error);
  }
  p.consume = next_batch_ + 1;
  p.cv_work.notify_all();  // room ahead of the caller
  lock.unlock();
  ++next_batch_;
  return std::move(item.batch);
}

std::vector<int64_t> DataLoader::batch_indices(int64_t epoch, int64_t b) const {
  MG_CHECK(b >= 0 && b < num_batches_, IndexError, "DataLoader::batch_indices: batch ", b,
           " out of range for ", num_batches_, " batches");
  MG_CHECK(epoch >= 0 && epoch < (int64_t(1) << 32), Error,
           "DataLoader::batch_indices: epoch must be in [0, 2^32), got ", epoch);
  // The current epoch's order is read in place (a copy per call made logging every batch's
  // indices quadratic in the dataset's size).
  std::vector<int64_t> other;
  const bool current = epoch == epoch_ && order_seed_ == options_.seed;
  if (!current) other = epoch_order(epoch);
  const std::vector<int64_t>& order = current ? *order_ : other;
  const int64_t begin = b * options_.batch_size;
  const int64_t end = begin + std::min(options_.batch_size, samples_ - begin);
  return std::vector<int64_t>(order.begin() + begin, order.begin() + end);
}

StateDict DataLoader::state() const {
  StateDict s;
  s.ints["seed"] = static_cast<int64_t>(options_.seed);  // bit-for-bit
  s.ints["epoch"] = epoch_;
  s.ints["next_batch"] = next_batch_;
  s.ints["dataset_size"] = size_;
  s.ints["batch_size"] = options_.batch_size;
  s.ints["shuffle"] = options_.shuffle;
  s.ints["drop_last"] = options_.drop_last;
  if (const auto& sm = options_.sampler) {
    s.strings["sampler"] = sm->name();
    for (const auto& [name, value] : sm->settings()) s.ints["sampler_" + name] = value;
  }
  return s;
}

void DataLoader::load_state(const StateDict& s) {
  const char* owner = "DataLoader::load_state";
  const auto expect = [&](const char* key, int64_t have) {
    const int64_t saved = s.int_at(owner, key);
    MG_CHECK(saved == have, Error, owner, ": the state was saved with ", key, " ", saved,
             " but this loader has ", have, "; resuming would produce different batches");
  };
  expect("dataset_size", size_);
  expect("batch_size", options_.batch_size);
  expect("shuffle", options_.shuffle);
  expect("drop_last", options_.drop_last);
  // The saved sampler's name; states from before other samplers existed name none but carry a
  // DistributedSampler's sampler_world_size.
  const auto saved_name = s.strings.find("sampler");
  const std::string saved_sampler = saved_name != s.strings.end()  ? saved_name->second
                                    : s.ints.count("sampler_world_size") ? "DistributedSampler"
                                                                         : "";
  const std::string here = options_.sampler ? options_.sampler->name() : "";
  MG_CHECK(saved_sampler == here, Error, owner, ": the state was saved ",
           saved_sampler.empty() ? std::string("without a sampler") : "with a " + saved_sampler, " but this loader has ",
           here.empty() ? std::string("none") : "a " + here, "; resuming would produce different batches");
  if (const auto& sm = options_.sampler) {
    for (const auto& [name, value] : sm->settings()) expect(("sampler_" + name).c_str(), value);
  }
  const int64_t epoch = s.int_at(owner, "epoch");
  const int64_t next_batch = s.int_at(owner, "next_batch");
  MG_CHECK(epoch >= 0 && epoch < (int64_t(1) << 32), Error, owner, ": epoch ", epoch,
           " out of range [0, 2^32)");
  MG_CHECK(next_batch >= 0 && next_batch <= num_batches_, Error, owner, ": next_batch ",
           next_batch, " out of range [0, ", num_batches_, "]");
  options_.seed = static_cast<uint64_t>(s.int_at(owner, "seed"));
  reposition(epoch, next_batch);
  resumed_ = true;
}

}  // namespace mg::data
