#include "mixgrad/core/parallel.h"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <exception>

#include "mixgrad/core/error.h"

namespace mg {

namespace {
std::atomic<int> g_threads{0};        // 0: not chosen yet (OpenMP's default is taken on first use)
std::atomic<uint64_t> g_generation{1};  // bumped by every set_num_threads
thread_local uint64_t t_applied = 0;  // the generation this thread's OpenMP setting follows

int process_threads() {
  int n = g_threads.load(std::memory_order_acquire);
  if (n == 0) {
    int unset = 0;
    g_threads.compare_exchange_strong(unset, omp_get_max_threads());
    n = g_threads.load(std::memory_order_acquire);
  }
  return n;
}
}  // namespace

int num_threads() { return process_threads(); }

void set_num_threads(int n) {
  MG_CHECK(n >= 1, Error, "set_num_threads: expected n >= 1, got ", n);
  g_threads.store(n, std::memory_order_release);
  g_generation.fetch_add(1, std::memory_order_acq_rel);
  apply_num_threads();
}

void apply_num_threads() {
  const uint64_t generation = g_generation.load(std::memory_order_acquire);
  if (t_applied == generation) return;
  omp_set_num_threads(process_threads());
  t_applied = generation;
}

bool in_parallel_region() { return omp_in_parallel() != 0; }

void parallel_for(int64_t begin, int64_t end, int64_t grain,
                  const std::function<void(int64_t, int64_t)>& body) {
  if (end <= begin) return;
  apply_num_threads();
  const int64_t n = end - begin;
  const int threads = num_threads();
  if (n <= grain || threads == 1 || in_parallel_region()) {
    body(begin, end);
    return;
  }
  const int64_t chunks = std::min<int64_t>(threads, (n + grain - 1) / grain);
  std::exception_ptr error;
#pragma omp parallel for num_threads(chunks) schedule(static, 1)
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t b = begin + n * c / chunks;
    const int64_t e = begin + n * (c + 1) / chunks;
    try {
      body(b, e);
    } catch (...) {
#pragma omp critical(mg_parallel_for_error)
      if (!error) error = std::current_exception();
    }
  }
  if (error) std::rethrow_exception(error);
}

}  // namespace mg
