// Ctrl-C (SIGINT) and SIGTERM as a request to stop cleanly: while an InterruptGuard lives, these
// signals only set a flag, which the training loop polls between steps to save a checkpoint and
// exit. The handler does nothing else (it must be async-signal-safe: no I/O, no allocation).
//
// The one decision a reader must know: the handler is installed with SA_RESETHAND, so the first
// Ctrl-C is caught and the second one gets the default action and kills the process — a user is
// never stuck waiting for a save that hangs.
//
//   InterruptGuard interrupt;
//   for (int64_t step = 1; step <= steps && !interrupt.requested(); ++step) train_step();
//   if (interrupt.requested()) { save_checkpoint(...); return 130; }
#pragma once

namespace mg::example {

class InterruptGuard {
 public:
  // Installs the handlers and clears the flag; only one guard may exist at a time (mg::Error).
  InterruptGuard();
  // Restores the handlers that were installed before.
  ~InterruptGuard();
  InterruptGuard(const InterruptGuard&) = delete;
  InterruptGuard& operator=(const InterruptGuard&) = delete;

  // Whether SIGINT or SIGTERM arrived since construction.
  bool requested() const;
  // The signal that arrived first (SIGINT or SIGTERM), 0 if none.
  int signal_number() const;
  // "SIGINT", "SIGTERM" or "" (for the message "interrupted by SIGINT: saving a checkpoint").
  const char* signal_name() const;
};

}  // namespace mg::example
