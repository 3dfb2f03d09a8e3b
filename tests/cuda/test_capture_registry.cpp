// The capture registry's decisions (cuda/host/capture_registry.h), on the CPU: which calls a
// thread that captures a CUDA graph may make, what other threads may do meanwhile, and the error
// texts that name what synchronised.
#include <catch2/catch.hpp>

#include "mixgrad/core/error.h"
#include "mixgrad/cuda/host/capture_registry.h"
#include "test_util.h"

using mg::cuda::CaptureRegistry;
using mg::cuda::HostWait;

TEST_CASE("CaptureRegistry: nothing is refused without a capture", "[cuda][graph]") {
  CaptureRegistry r;
  CHECK_FALSE(r.any());
  CHECK(r.refusal("Stream::synchronize", HostWait::Stream, 1, 0).empty());
  CHECK(r.refusal("cuda::synchronize", HostWait::Device, 1, 0).empty());
  CHECK(r.refusal("a host-to-device copy", HostWait::HostCopy, 1, 0).empty());
}

TEST_CASE("CaptureRegistry: the capturing thread may not wait or copy host memory", "[cuda][graph]") {
  CaptureRegistry r;
  r.begin({.thread = 7, .device = 0, .stream = 0x40, .label = "cuda::Graph"});
  REQUIRE(r.any());
  REQUIRE(r.of_thread(7).has_value());
  CHECK(r.of_thread(7)->stream == 0x40);
  const std::string item = r.refusal("a blocking device-to-host copy of 4 bytes (item(), to(cpu), printing a device tensor)",
                                     HostWait::Stream, 7, 0);
  CHECK_THAT(item, Catch::Matchers::StartsWith("a blocking device-to-host copy of 4 bytes (item()"));
  CHECK_THAT(item, Catch::Matchers::Contains("cuda::Graph is capturing a CUDA graph on this thread (cuda:0, stream 0x40)"));
  CHECK_THAT(item, Catch::Matchers::Contains("a captured step must not synchronise"));
  CHECK_THAT(item, Catch::Matchers::Contains("hint: read results"));
  CHECK_FALSE(r.refusal("cuda::synchronize", HostWait::Device, 7, 0).empty());
  CHECK_FALSE(r.refusal("Event::synchronize", HostWait::Stream, 7, 1).empty());  // any device: the thread is capturing
  const std::string copy = r.refusal("an asynchronous host-to-device copy of 64 bytes", HostWait::HostCopy, 7, 0);
  CHECK_THAT(copy, Catch::Matchers::Contains("would be frozen into the graph"));
  CHECK_THAT(copy, Catch::Matchers::Contains("static input"));
}

TEST_CASE("CaptureRegistry: other threads go on, but may not wait for the capturing device", "[cuda][graph]") {
  CaptureRegistry r;
  r.begin({.thread = 7, .device = 0, .stream = 0x40, .label = "StepGraph"});
  // A DataLoader thread pinning and copying, or waiting for its own stream: allowed.
  CHECK(r.refusal("Stream::synchronize", HostWait::Stream, 8, 0).empty());
  CHECK(r.refusal("a host-to-device copy", HostWait::HostCopy, 8, 0).empty());
  // Waiting for the whole device would wait for a stream that never completes during the capture.
  const std::string dev = r.refusal("cuda::synchronize (cudaDeviceSynchronize)", HostWait::Device, 8, 0);
  CHECK_THAT(dev, Catch::Matchers::Contains("another thread is capturing a CUDA graph there (StepGraph"));
  CHECK(r.refusal("cuda::synchronize (cudaDeviceSynchronize)", HostWait::Device, 8, 1).empty());  // another device
  r.end(7);
  CHECK_FALSE(r.any());
  CHECK(r.refusal("cuda::synchronize", HostWait::Device, 8, 0).empty());
  CHECK(r.refusal("Stream::synchronize", HostWait::Stream, 7, 0).empty());
}

TEST_CASE("CaptureRegistry: one capture per thread and per stream", "[cuda][graph]") {
  CaptureRegistry r;
  r.begin({.thread = 1, .device = 0, .stream = 0x10, .label = "cuda::Graph"});
  MG_REQUIRE_ERROR(r.begin({.thread = 1, .device = 0, .stream = 0x20, .label = "cuda::Graph"}),
                   "this thread is already capturing a CUDA graph");
  MG_REQUIRE_ERROR(r.begin({.thread = 2, .device = 0, .stream = 0x10, .label = "cuda::Graph"}),
                   "is already being captured by another thread");
  r.begin({.thread = 2, .device = 1, .stream = 0x10, .label = "cuda::Graph"});  // same handle, another device
  r.end(1);
  r.end(2);
  r.end(3);  // no capture: nothing happens
  CHECK_FALSE(r.any());
}
