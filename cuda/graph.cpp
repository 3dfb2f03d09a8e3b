// CUDA graphs (cuda/cuda.h): capture on a side stream into a private allocator pool, instantiate,
// replay with fresh generator positions and participant bookkeeping; the process-wide capture
// registry that every synchronising call asks first (cuda/host/capture_registry.h).
// Decision: the Graph owns everything a capture changes (current stream, allocator pool, registry
// entry, generator capture state) and undoes all of it in one place once the capture runs,
// capture_abandon, so an error inside a captured step leaves CUDA and the allocator as they were;
// capture_begin undoes its own stages when one of them fails (only those it began).
#include <algorithm>
#include <atomic>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "mixgrad/core/error.h"
#include "mixgrad/core/factory.h"
#include "mixgrad/core/generator.h"
#include "mixgrad/core/graph_rng.h"
#include "mixgrad/core/graph_participant.h"
#include "mixgrad/core/tensor.h"
#include "mixgrad/cuda/capture.h"
#include "mixgrad/cuda/check.h"
#include "mixgrad/cuda/device_checks.h"
#include "mixgrad/cuda/cuda.h"
#include "mixgrad/cuda/device_allocator.h"
#include "mixgrad/cuda/graph.h"
#include "mixgrad/cuda/host/caching_allocator.h"
#include "mixgrad/cuda/kernels/graph_state.h"

namespace mg::cuda {

namespace {

CaptureRegistry& registry() {
  static CaptureRegistry* r = new CaptureRegistry();  // never destroyed: used until exit
  return *r;
}

uint64_t this_thread_token() { return uint64_t(std::hash<std::thread::id>{}(std::this_thread::get_id())); }

std::atomic<PoolId> g_next_pool{1};

}  // namespace

namespace detail {

void check_host_wait(const std::string& what, HostWait kind, int device) {
  CaptureRegistry& r = registry();
  if (!r.any()) return;  // the common case: one relaxed load under the registry's mutex
  const std::string why = r.refusal(what, kind, this_thread_token(), device);
  if (!why.empty()) throw CudaError(why);
}

bool any_capture() { return registry().any(); }

RelaxedCaptureMode::RelaxedCaptureMode() : previous_(cudaStreamCaptureModeRelaxed) {
  MG_CUDA_CHECK(cudaThreadExchangeStreamCaptureMode(&previous_));
}
RelaxedCaptureMode::~RelaxedCaptureMode() { (void)cudaThreadExchangeStreamCaptureMode(&previous_); }

}  // namespace detail

bool is_capturing() { return registry().any() && registry().of_thread(this_thread_token()).has_value(); }

struct Graph::Impl {
  int device = 0;
  PoolId pool = 0;
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  bool capturing = false;
  Stream stream;                         // the capture stream
  std::unique_ptr<StreamGuard> guard;    // makes it current during the capture
  std::vector<Generator*> generators;    // the default generator first
  std::vector<Tensor> bases;             // per generator: device [2] i64 {seed, offset}
  // The last work on `bases` (their zero fill, then each replay): the next replay's stream waits
  // for it on the device before writing them, so a replay on another stream than the previous
  // one (or than the fill's) never writes a base a running replay still reads, nor is
  // overwritten by a late fill.
  std::unique_ptr<Event> bases_used;
  std::vector<uint64_t> consumed;        // per generator: Philox blocks one replay draws
  std::vector<bool> begun;               // per generator: this capture began its capture
  std::vector<GraphParticipant*> participants;
  std::vector<StreamId> replay_streams;
  int64_t replays = 0;
  std::size_t nodes = 0;

  void destroy_graph() noexcept {
    if (exec != nullptr) (void)cudaGraphExecDestroy(exec);
    if (graph != nullptr) (void)cudaGraphDestroy(graph);
    exec = nullptr;
    graph = nullptr;
    nodes = 0;
  }
  // Leaves capture mode everywhere but CUDA; returns nothing, never throws.
  void leave_capture() noexcept {
    guard.reset();
    // The allocator's mapping before the registry entry (the reverse of capture_begin), so the
    // entry covers the mapping while it exists.
    try {
      caching_allocator(device).end_capture(stream.id());
    } catch (...) {
    }
    registry().end(this_thread_token());
    for (std::size_t i = 0; i < generators.size(); ++i) {
      try {
        consumed[i] = begun[i] ? end_generator_capture(*generators[i]) : 0;
        begun[i] = false;
      } catch (...) {
      }
    }
    capturing = false;
  }
  void release_pool() noexcept {
    if (pool == 0) return;
    try {
      caching_allocator(device).release_pool(pool, replay_streams);
    } catch (...) {
      // The allocator keeps the pool's blocks; nothing else depends on them.
    }
    pool = 0;
    replay_streams.clear();
  }
};

Graph::Graph() : impl_(new Impl) { impl_->generators.push_back(&default_generator()); }

Graph::~Graph() {
  capture_abandon();
  try {
    reset();
  } catch (...) {
  }
  delete impl_;
}

void Graph::add_generator(Generator& generator) {
  MG_CHECK(!impl_->capturing && impl_->exec == nullptr, Error,
           "cuda::Graph::add_generator: add generators before the capture");
  if (std::find(impl_->generators.begin(), impl_->generators.end(), &generator) == impl_->generators.end()) {
    impl_->generators.push_back(&generator);
  }
}

void Graph::add_participant(GraphParticipant& participant) {
  MG_CHECK(!impl_->capturing && impl_->exec == nullptr, Error,
           "cuda::Graph::add_participant: add participants before the capture");
  if (std::find(impl_->participants.begin(), impl_->participants.end(), &participant) == impl_->participants.end()) {
    impl_->participants.push_back(&participant);
  }
}

void Graph::capture_begin(const Stream& stream) {
  Impl& g = *impl_;
  MG_CHECK(!g.capturing && g.exec == nullptr, Error,
           "cuda::Graph::capture_begin: the graph already holds a capture\n  hint: reset() it, or use a new Graph");
  MG_CHECK(stream.handle() != nullptr, Error,
           "cuda::Graph::capture_begin: cannot capture on the default stream of cuda:", stream.device(),
           "\n  hint: capture on a stream of Stream::create (GraphCapture does)");
  MG_CHECK(!is_capturing(), Error, "cuda::Graph::capture_begin: this thread is already capturing a CUDA graph",
           "\n  hint: captures do not nest");
  // Ops launch on the current device's current stream: with another device current, the step
  // would run eagerly there, outside the graph.
  MG_CHECK(stream.device() == current_device(), Error, "cuda::Graph::capture_begin: the capture stream is on cuda:",
           stream.device(), " but the current device is cuda:", current_device(),
           "\n  hint: make its device current first (cuda::DeviceGuard guard(", stream.device(), "))");
  DeviceGuard device_guard(stream.device());
  // The deferred value checks' slot (allocations) before the capture, not in the middle of it.
  (void)detail::device_check_slot(stream.device());
  // The generators' device bases and their event first (allocations and fills on the current
  // stream): nothing is begun yet if they fail.
  g.device = stream.device();
  g.stream = stream;
  g.bases.clear();
  for (std::size_t i = 0; i < g.generators.size(); ++i) {
    g.bases.push_back(zeros({2}, {.dtype = DType::I64, .device = Device::cuda(g.device)}));  // general pool: outlives the capture
  }
  g.bases_used = std::make_unique<Event>(false);
  g.bases_used->record(current_stream(g.device));  // the fills above
  g.consumed.assign(g.generators.size(), 0);
  g.begun.assign(g.generators.size(), false);
  // Then the participants: a refusal leaves nothing begun.
  std::size_t begun = 0;
  auto end_participants = [&](std::size_t n) noexcept {
    for (std::size_t i = 0; i < n; ++i) {
      try {
        g.participants[i]->graph_capture_end(false);
      } catch (...) {
      }
    }
  };
  try {
    for (; begun < g.participants.size(); ++begun) g.participants[begun]->graph_capture_begin();
  } catch (...) {
    end_participants(begun);
    throw;
  }
  // Then the registry (it refuses a stream another thread captures), the allocator's pool, the
  // generators and CUDA's capture. On a failure only what this call began is undone: not another
  // thread's registry entry, allocator mapping or capture of the same stream.
  g.pool = g_next_pool.fetch_add(1);
  bool registered = false, pooled = false, cuda_begun = false;
  try {
    registry().begin({.thread = this_thread_token(), .device = g.device, .stream = stream.id(), .label = "cuda::Graph"});
    registered = true;
    caching_allocator(g.device).begin_capture(g.pool, stream.id());
    pooled = true;
    for (std::size_t i = 0; i < g.generators.size(); ++i) {
      begin_generator_capture(*g.generators[i], g.bases[i].data<int64_t>());
      g.begun[i] = true;
    }
    g.guard = std::make_unique<StreamGuard>(stream);
    MG_CUDA_CHECK(cudaStreamBeginCapture(static_cast<cudaStream_t>(stream.handle()), cudaStreamCaptureModeThreadLocal));
    cuda_begun = true;
    g.capturing = true;
  } catch (...) {
    if (cuda_begun) {
      cudaGraph_t graph = nullptr;
      (void)cudaStreamEndCapture(static_cast<cudaStream_t>(stream.handle()), &graph);
      if (graph != nullptr) (void)cudaGraphDestroy(graph);
    }
    (void)cudaGetLastError();
    g.guard.reset();
    for (std::size_t i = 0; i < g.generators.size(); ++i) {
      if (!g.begun[i]) continue;
      try {
        (void)end_generator_capture(*g.generators[i]);
      } catch (...) {
      }
      g.begun[i] = false;
    }
    if (pooled) {
      try {
        caching_allocator(g.device).end_capture(stream.id());
      } catch (...) {
      }
    }
    if (registered) registry().end(this_thread_token());
    end_participants(g.participants.size());
    if (pooled) g.release_pool();
    g.pool = 0;  // never handed to the allocator otherwise
    throw;
  }
}

void Graph::capture_end() {
  Impl& g = *impl_;
  MG_CHECK(g.capturing, Error, "cuda::Graph::capture_end: no capture in progress");
  DeviceGuard device_guard(g.device);
  cudaGraph_t graph = nullptr;
  const cudaError_t ended = cudaStreamEndCapture(static_cast<cudaStream_t>(g.stream.handle()), &graph);
  g.graph = graph;
  g.leave_capture();
  auto fail = [&](const char* call, cudaError_t status) {
    g.destroy_graph();
    (void)cudaGetLastError();
    for (GraphParticipant* p : g.participants) {
      try {
        p->graph_capture_end(false);
      } catch (...) {
      }
    }
    g.release_pool();
    detail::throw_cuda_error(status, call, __FILE__, __LINE__);
  };
  if (ended != cudaSuccess) fail("cudaStreamEndCapture", ended);
  const cudaError_t inst = cudaGraphInstantiate(&g.exec, g.graph, 0);
  if (inst != cudaSuccess) fail("cudaGraphInstantiate", inst);
  std::size_t nodes = 0;
  if (cudaGraphGetNodes(g.graph, nullptr, &nodes) == cudaSuccess) g.nodes = nodes;
  (void)cudaGetLastError();
  g.replays = 0;
  for (std::size_t i = 0; i < g.participants.size(); ++i) {
    try {
      g.participants[i]->graph_capture_end(true);
    } catch (...) {
      // The captured step left a state the graph cannot replay: discard it.
      for (std::size_t k = i + 1; k < g.participants.size(); ++k) {
        try {
          g.participants[k]->graph_capture_end(false);
        } catch (...) {
        }
      }
      g.destroy_graph();
      g.release_pool();
      throw;
    }
  }
}

void Graph::capture_abandon() noexcept {
  Impl& g = *impl_;
  if (!g.capturing) return;
  cudaGraph_t graph = nullptr;
  (void)cudaStreamEndCapture(static_cast<cudaStream_t>(g.stream.handle()), &graph);
  if (graph != nullptr) (void)cudaGraphDestroy(graph);
  (void)cudaGetLastError();  // an invalidated capture leaves its status behind
  g.leave_capture();
  for (GraphParticipant* p : g.participants) {
    try {
      p->graph_capture_end(false);
    } catch (...) {
    }
  }
  g.release_pool();
}

void Graph::replay() {
  Impl& g = *impl_;
  MG_CHECK(g.exec != nullptr, Error, "cuda::Graph::replay: nothing captured",
           g.capturing ? " (the capture is still in progress: end it first)" : "",
           "\n  hint: capture with cuda::GraphCapture first");
  MG_CHECK(!is_capturing(), Error, "cuda::Graph::replay: this thread is capturing another graph");
  DeviceGuard device_guard(g.device);
  const Stream stream = current_stream(g.device);
  for (const GraphParticipant* p : g.participants) p->graph_replay_check();  // all agree before any changes
  // The previous replay (maybe on another stream) first: the participants' device writes below
  // (the optimizer's lr) must not land while it still reads them.
  g.bases_used->block(stream);
  for (GraphParticipant* p : g.participants) p->graph_replay_prepare();
  for (std::size_t i = 0; i < g.generators.size(); ++i) {
    if (g.consumed[i] == 0) continue;
    const PhiloxArgs base = generator_replay_base(*g.generators[i], g.consumed[i]);
    write_philox_base(g.bases[i].data<int64_t>(), base.seed, base.offset, stream.handle());
  }
  MG_CUDA_CHECK(cudaGraphLaunch(g.exec, static_cast<cudaStream_t>(stream.handle())));
  g.bases_used->record(stream);
  if (std::find(g.replay_streams.begin(), g.replay_streams.end(), stream.id()) == g.replay_streams.end()) {
    g.replay_streams.push_back(stream.id());
    for (const Tensor& b : g.bases) record_stream(b, stream);  // freed only after this stream's replays
  }
  ++g.replays;
  if (detail::sync_after_launch()) {  // MG_CUDA_SYNC=1: the replay's errors surface here, at the replay
    // Asked of the registry first, as every other device wait: another thread may be capturing.
    detail::check_host_wait("MG_CUDA_SYNC=1's device synchronisation after a graph replay", HostWait::Device, g.device);
    detail::count_sync();
    MG_CUDA_CHECK(cudaDeviceSynchronize());
    detail::raise_device_check(g.device, "MG_CUDA_SYNC=1's wait after a graph replay");
  }
}

void Graph::reset() {
  Impl& g = *impl_;
  MG_CHECK(!g.capturing, Error, "cuda::Graph::reset: a capture is in progress (end or abandon it first)");
  if (g.exec == nullptr && g.graph == nullptr && g.pool == 0) return;
  DeviceGuard device_guard(g.device);
  g.destroy_graph();
  g.release_pool();
  g.replays = 0;
}

bool Graph::capturing() const { return impl_->capturing; }
bool Graph::ready() const { return impl_->exec != nullptr; }
int64_t Graph::replays() const { return impl_->replays; }
std::size_t Graph::num_nodes() const { return impl_->nodes; }
int Graph::device() const { return impl_->device; }

GraphCapture::GraphCapture(Graph& graph) : GraphCapture(graph, Stream::create(current_device())) {}

GraphCapture::GraphCapture(Graph& graph, const Stream& stream) : graph_(graph), uncaught_(std::uncaught_exceptions()) {
  graph_.capture_begin(stream);
}

GraphCapture::~GraphCapture() noexcept(false) {
  if (done_) return;
  if (std::uncaught_exceptions() > uncaught_) {
    graph_.capture_abandon();  // the step threw: keep the process usable, let the error go on
    return;
  }
  done_ = true;
  graph_.capture_end();
}

void GraphCapture::end() {
  if (done_) return;
  done_ = true;
  graph_.capture_end();
}

}  // namespace mg::cuda
