// The CUDA graph API (docs/cuda.md, "CUDA graphs"), public beside cuda/cuda.h and, like it,
// without any CUDA header; in a build without the backend every capture throws DeviceError.
// A Graph records the kernels a piece of host code launches on one stream, once, and replays them
// with a single launch. What a replay cannot change by itself is handled here:
// - memory: allocations made during the capture come from a private pool of the caching
//   allocator that stays reserved while the graph lives (a replay writes the same addresses);
// - random numbers: the graph's generators (the default generator always) hand graph-safe ops a
//   device {seed, offset} that each replay rewrites, and advance as if the ops had run eagerly;
// - host state: participants (an optimizer's lr and step count, a GradScaler's flags) move what
//   changes between replays into device memory and redo their bookkeeping before each replay;
// - synchronisation: any call that would make the host wait (stream/device/event synchronise,
//   item(), to(cpu), a blocking copy) or copy host memory on the capturing thread throws a
//   CudaError naming it before CUDA is called, and the capture is abandoned (GraphCapture).
// Captures use cudaStreamCaptureModeThreadLocal: only the capturing thread is restricted, so
// DataLoader threads keep pinning memory while a step is captured.
//
//   cuda::Graph graph;
//   graph.add_participant(opt);
//   { cuda::GraphCapture capture(graph);  loss = step(static_x, static_y); }
//   for (...) { static_x.copy_(x); graph.replay(); }   // loss holds each replay's value
#pragma once
#include <cstddef>
#include <cstdint>

#include "mixgrad/cuda/cuda.h"

namespace mg {
class Generator;
class GraphParticipant;
}  // namespace mg

namespace mg::cuda {

class Graph {
 public:
  Graph();
  // Abandons a capture in progress and releases the private pool (its blocks return to the
  // cache once the replays queued so far have run). Never throws.
  ~Graph();
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;

  // A generator the captured ops draw from (besides the default generator); it must outlive the
  // graph. Before the capture only.
  void add_generator(Generator& generator);
  // A participant (see core/graph_participant.h); it must outlive the graph. Before the capture only.
  void add_participant(GraphParticipant& participant);

  // Starts capturing the calling thread's work on `stream`, a non-default stream (Stream::create),
  // and makes it the current stream until capture_end. Calls the participants'
  // graph_capture_begin before beginning anything else of the capture (their errors leave nothing
  // begun). Throws when the graph already
  // holds a capture (reset() first) or the thread is already capturing.
  void capture_begin(const Stream& stream);
  // Ends the capture and instantiates the graph. On a CUDA error (or a participant refusing the
  // result) the capture is abandoned and the error thrown.
  void capture_end();
  // Ends a capture in progress without keeping it: the private pool is released, the generators
  // and participants are told, CUDA is left with no pending error. Never throws.
  void capture_abandon() noexcept;

  // Launches the graph on the current stream after the participants' graph_replay_check (all of
  // them first, so a refusal changes nothing), their graph_replay_prepare and the generators' new
  // positions. Never synchronises.
  void replay();
  // Destroys the captured graph and releases its pool; the Graph can capture again.
  void reset();

  bool capturing() const;
  bool ready() const;        // captured and instantiated
  int64_t replays() const;   // replay() calls since the capture
  std::size_t num_nodes() const;  // kernels, copies, ... in the captured graph (0 before)
  int device() const;

 private:
  struct Impl;
  Impl* impl_;
};

// Captures a Graph for a scope: begins on a new stream of the current device (or `stream`), ends
// and instantiates at the end of the scope, or abandons the capture when the scope is left by an
// exception (the exception goes on; the process stays usable).
class GraphCapture {
 public:
  explicit GraphCapture(Graph& graph);
  GraphCapture(Graph& graph, const Stream& stream);
  ~GraphCapture() noexcept(false);
  GraphCapture(const GraphCapture&) = delete;
  GraphCapture& operator=(const GraphCapture&) = delete;
  // Ends the capture now (as the end of the scope would).
  void end();

 private:
  Graph& graph_;
  int uncaught_;
  bool done_ = false;
};

// Whether the calling thread is capturing a CUDA graph now.
bool is_capturing();

}  // namespace mg::cuda
