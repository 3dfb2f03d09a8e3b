#include "mixgrad/core/parallel.h"

#include <omp.h>

#include <algorithm>
#include <exception>

#include "mixgrad/core/error.h"

namespace mg {

int num_threads() { return omp_get_max_threads(); }

void set_num_threads(int n) {
  MG_CHECK(n >= 1, Error, "set_num_threads: expected n >= 1, got ", n);
  omp_set_num_threads(n);
}

bool in_parallel_region() { return omp_in_parallel() != 0; }

void parallel_for(int64_t begin, int64_t end, int64_t grain,
                  const std::function<void(int64_t, int64_t)>& body) {
  if (end <= begin) return;
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
