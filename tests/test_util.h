// Small helpers shared by the test folders: reading tensors into std::vector<double> and
// asserting that a callable throws an mg::Error whose message contains a given text.
#pragma once
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "autograd/grad_mode.h"
#include "core/parallel.h"
#include "ops/ops.h"

namespace mg::test {

// All elements of t (any dtype, any layout) as doubles, in row-major order.
inline std::vector<double> values(const Tensor& t) {
  NoGradGuard no_grad;
  const Tensor c = contiguous(to(to(t, Device::cpu()), DType::F64));
  const double* p = c.data<double>();
  return std::vector<double>(p, p + c.numel());
}

// Expected values written inline: CHECK(values(y) == V({1, 2, 3})).
inline std::vector<double> V(std::initializer_list<double> v) { return v; }

// Runs f and returns the mg::Error message it throws ("" when it does not throw).
template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const mg::Error& e) {
    return e.what();
  }
  return "";
}

// Calls run() (which returns a vector of results) at 1, 2 and 3 worker threads and checks that
// every result is the same at each count (the summation rule makes results independent of the
// thread count). The thread count is restored even when a check fails.
template <typename F>
void check_same_at_thread_counts(F&& run) {
  struct Restore {
    int threads = num_threads();
    ~Restore() { set_num_threads(threads); }
  } restore;
  set_num_threads(1);
  const auto one = run();
  for (int t : {2, 3}) {
    set_num_threads(t);
    const auto other = run();
    REQUIRE(other.size() == one.size());
    for (std::size_t k = 0; k < one.size(); ++k) {
      INFO("threads " << t << ", result " << k);
      CHECK(other[k] == one[k]);
    }
  }
}

}  // namespace mg::test

// REQUIRE that `expr` throws an mg::Error whose message contains `text`.
#define MG_REQUIRE_ERROR(expr, text)                                        \
  do {                                                                      \
    const std::string mg_msg_ = ::mg::test::error_of([&] { (void)(expr); }); \
    INFO("message: " << mg_msg_);                                           \
    REQUIRE(!mg_msg_.empty());                                              \
    REQUIRE_THAT(mg_msg_, Catch::Matchers::Contains(text));                 \
  } while (0)
