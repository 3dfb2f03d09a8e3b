// GraphParticipant: a host object whose state a captured CUDA graph would otherwise freeze. A CUDA
// graph records kernels with their arguments once; host-side bookkeeping that a step does (an
// optimizer's step count and learning rate, a loss scaler's "the device state changed" flag) runs
// only at capture. A participant moves what must change between replays into device memory when
// the capture begins, and redoes its host bookkeeping before each replay. cuda::Graph calls these;
// optim::Optimizer and amp::GradScaler implement them (core holds the interface because cuda/ sits
// below optim/ and amp/, DESIGN §1).
//
//   cuda::Graph g;
//   g.add_participant(opt);  g.add_participant(scaler);
//   { cuda::GraphCapture capture(g);  step(); }   // begin, capture, end
//   g.replay();                   // graph_replay_check, graph_replay_prepare, then the launch
#pragma once

namespace mg {

class GraphParticipant {
 public:
  virtual ~GraphParticipant() = default;
  // Before the capture begins (eager, no capture yet): throw mg::Error when the state cannot be
  // captured (say why and how to fix it); move values that may change between replays to device
  // memory, updated by graph_replay_prepare.
  virtual void graph_capture_begin() = 0;
  // After the capture: `ok` is false when it was abandoned (an error inside the step). May throw
  // when the captured step left the state unfit for replay (the graph is then discarded).
  virtual void graph_capture_end(bool ok) = 0;
  // Before each replay, first on every participant of the graph: throw mg::Error when the state
  // changed in a way the graph cannot follow (say what and how to fix it). Changes nothing, so a
  // refusal by one participant leaves every participant as it was.
  virtual void graph_replay_check() const = 0;
  // Then, on the host: refresh the device values with ordinary asynchronous launches on the current
  // stream (never a synchronisation) and do one step's host bookkeeping.
  virtual void graph_replay_prepare() = 0;
};

}  // namespace mg
