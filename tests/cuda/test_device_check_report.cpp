// The deferred device value checks' host side (cuda/host/device_check_report.h), run on the CPU
// with the report slot in ordinary memory: the take/clear protocol a kernel and several host
// waits share, and the messages, which must be the CPU's texts for the same bad value (up to the
// operand descriptions the device cannot see). The kernels that publish reports and the raise at
// each host wait run in the [gpu] tests (test_cuda_nn_ops.cpp, test_cuda_loss_capture.cpp).
#include <catch2/catch.hpp>

#include <string>

#include "core/factory.h"
#include "cuda/host/device_check_report.h"
#include "ops/loss.h"
#include "ops/norm.h"
#include "ops/conv.h"
#include "ops/ops.h"
#include "test_util.h"

using namespace mg;
using namespace mg::cuda;

namespace {

// A report as publish_device_check (cuda/kernels/device_check.cuh) leaves it.
DeviceCheckReport published(DeviceCheck check, int64_t value, int64_t bound, int64_t extra) {
  DeviceCheckReport r{};
  r.complete = 1;
  r.check = int32_t(check);
  r.value = value;
  r.bound = bound;
  r.extra = extra;
  return r;
}

// The device's text up to its note, and the CPU's without its operand descriptions ("; weight
// f32[10, 3] cpu, indices ..." / "; got input ...", which run to the end of the first line).
std::string device_text(const DeviceCheckReport& r) {
  const std::string m = device_check_message(r, 0, "cuda::synchronize");
  return m.substr(0, m.find("\n  note: "));
}
std::string without_operands(std::string cpu) {
  const std::size_t at = cpu.find("; ");
  if (at == std::string::npos) return cpu;
  const std::size_t eol = cpu.find('\n', at);
  return cpu.erase(at, eol == std::string::npos ? std::string::npos : eol - at);
}

}  // namespace

TEST_CASE("a device check report is taken once, only when complete", "[cuda][device_check]") {
  DeviceCheckReport report{};
  CHECK_FALSE(take_device_check_report(&report).has_value());  // empty
  report.value = 7;  // a kernel is still writing the fields
  CHECK_FALSE(take_device_check_report(&report).has_value());
  CHECK(report.value == 7);  // left for a later wait
  report = published(DeviceCheck::Gather, 7, 5, 1);
  const auto r = take_device_check_report(&report);
  REQUIRE(r.has_value());
  CHECK(r->check == int32_t(DeviceCheck::Gather));
  CHECK(r->value == 7);
  CHECK(r->bound == 5);
  CHECK(r->extra == 1);
  CHECK(report.complete == 0);
  CHECK_FALSE(take_device_check_report(&report).has_value());  // raised once
  // A later failing check only marks that it happened; the flag is read once.
  CHECK_FALSE(take_dropped_flag(&report));
  report.dropped = 1;
  CHECK(take_dropped_flag(&report));
  CHECK_FALSE(take_dropped_flag(&report));
}

TEST_CASE("device check messages are the CPU's texts for the same bad value", "[cuda][device_check]") {
  const Tensor x = arange(0, 15, 1, {.dtype = DType::F32}).reshape({3, 5});
  SECTION("index_select, gather, scatter_add: 0 <= index < size along dim") {
    const Tensor bad = from_vector<int64_t>({0, 7}, {2});
    CHECK(device_text(published(DeviceCheck::IndexSelect, 7, 5, 1)) ==
          test::error_of([&] { index_select(x, 1, bad); }));
    const Tensor neg = from_vector<int64_t>({-4, 0, 0, 0, 0}, {1, 5});
    CHECK(device_text(published(DeviceCheck::Gather, -4, 3, 0)) == test::error_of([&] { gather(x, 0, neg); }));
    CHECK(device_text(published(DeviceCheck::ScatterAdd, -4, 3, 0)) ==
          test::error_of([&] { scatter_add(x, 0, neg, x.narrow(0, 0, 1)); }));
  }
  SECTION("embedding: 0 <= index < rows") {
    const std::string cpu = test::error_of([&] { embedding(x, from_vector<int64_t>({1, 3}, {2})); });
    REQUIRE(cpu.find("; weight ") != std::string::npos);
    CHECK(device_text(published(DeviceCheck::Embedding, 3, 3, 0)) == without_operands(cpu));
  }
  SECTION("one_hot: 0 <= value < num_classes") {
    CHECK(device_text(published(DeviceCheck::OneHot, 5, 5, 0)) ==
          test::error_of([&] { one_hot(from_vector<int64_t>({1, 5}, {2}), 5); }));
  }
  SECTION("max_pool2d_backward: an index that is a tap of its own output's window") {
    // One plane (the CPU checks planes in parallel): [1, 1, 4, 4], 2x2 windows, stride 2 -> [2, 2];
    // output (1, 0)'s window holds rows 2-3, columns 0-1, so index 1 (row 0) is not in it.
    const Tensor g = ones({1, 1, 2, 2});
    const Tensor idx = from_vector<int64_t>({0, 2, 1, 10}, {1, 1, 2, 2});
    const std::string cpu = test::error_of([&] {
      max_pool2d_backward(g, idx, {4, 4}, {2, 2}, {2, 2});
    });
    REQUIRE(cpu.find("max_pool2d_backward: index 1 at output (1, 0) of plane 0") == 0);
    DeviceCheckReport r = published(DeviceCheck::MaxPool2dBackward, 1, 4, 4);
    r.detail[0] = 0;
    r.detail[1] = 1;
    r.detail[2] = 0;
    CHECK(device_text(r) == cpu);
  }
  SECTION("cross_entropy, its backward and nll_loss: 0 <= target < classes or ignore_index") {
    const Tensor t = from_vector<int64_t>({1, 5, -100}, {3});
    const std::string ce = test::error_of([&] { cross_entropy(x, t, Reduction::Mean, -100, 0.0); });
    REQUIRE(ce.find("; got input ") != std::string::npos);
    CHECK(device_text(published(DeviceCheck::CrossEntropy, 5, 5, -100)) == without_operands(ce));
    const std::string bw = test::error_of(
        [&] { cross_entropy_backward(full({}, 1.0), x, t, Reduction::Mean, -100, 0.0); });
    CHECK(device_text(published(DeviceCheck::CrossEntropyBackward, 5, 5, -100)) == without_operands(bw));
    const Tensor t7 = from_vector<int64_t>({1, -3, 7}, {3});
    const std::string nll = test::error_of([&] { nll_loss(x, t7, Reduction::Sum, 7); });
    CHECK(device_text(published(DeviceCheck::NllLoss, -3, 5, 7)) == without_operands(nll));
  }
}

TEST_CASE("a device check message says where it was found and raised, and how to raise it at the op",
          "[cuda][device_check]") {
  const std::string m = device_check_message(published(DeviceCheck::CrossEntropy, 12, 10, -100), 1,
                                             "a blocking device-to-host copy: item(), to(cpu), printing");
  CHECK(m.find("cross_entropy: target 12 is out of range for 10 classes") == 0);
  CHECK(m.find("found on cuda:1") != std::string::npos);
  CHECK(m.find("raised at the host's next wait (a blocking device-to-host copy: item(), to(cpu), printing)") !=
        std::string::npos);
  CHECK(m.find("MG_CUDA_SYNC=1") != std::string::npos);
  CHECK(m.find("later index or target checks") == std::string::npos);
  const std::string later = device_check_message(published(DeviceCheck::Gather, 3, 2, 0), 0, "cuda::synchronize", true);
  CHECK(later.find("\n  note: later index or target checks on this device failed too") != std::string::npos);
  // A kind this build does not know (a corrupted slot) still gives a message, not a crash.
  CHECK(device_check_message(published(static_cast<DeviceCheck>(99), 1, 2, 3), 0, "x").find("kind 99") !=
        std::string::npos);
}
