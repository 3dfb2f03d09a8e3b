// A per-epoch progress display. On a terminal it redraws one line in place with '\r' — label, bar,
// step counter, the caller's fields (loss, accuracy, loss scale, ...), samples/s and ETA — at most
// ten times a second. When the output is not a terminal (a log file, CI) it prints a plain line
// every 10% of the epoch (or every log_every steps) and at the last step, so logs stay readable.
//
// The one decision a reader must know: the caller decides whether the stream is a terminal
// (is_terminal(stdout)) and can inject the clock, so both modes are tested with exact output.
//
//   Progress bar(steps_per_epoch, "epoch 3/10", std::cout, is_terminal(stdout));
//   for (int64_t step = 1; step <= steps_per_epoch; ++step) {
//     ...
//     bar.update(step, {{"loss", loss}, {"acc", acc}, {"scale", scaler.get_scale()}}, rate.per_second());
//   }
//   // non-terminal: "epoch 3/10 | step 10/100 | loss 0.4312 | acc 0.91 | scale 65536 | 1,234 samples/s | ETA 0:09"
#pragma once
#include <cstdint>
#include <cstdio>
#include <ostream>
#include <string>
#include <vector>

#include "examples/common/timer.h"

namespace mg::example {

// Whether `f` is an interactive terminal (isatty), and its width in columns (0 when unknown).
bool is_terminal(std::FILE* f);
int terminal_columns(std::FILE* f);

// One "name value" entry of the line; the value is printed with format_number ("0.4312", "65536").
struct ProgressField {
  std::string name;
  double value;
};

struct ProgressOptions {
  int64_t log_every = 0;        // plain mode: a line each time the step passes a multiple of this (0: 10% of the epoch)
  int64_t first_step = 0;       // the step the epoch resumes from: the ETA counts the steps run since
  double redraw_seconds = 0.1;  // terminal mode: at most one redraw per this interval
  int bar_width = 24;           // terminal mode: characters between the brackets
  int columns = 0;              // terminal mode: cut lines to columns - 1 characters (0: never)
  Clock clock = steady_seconds;
};

class Progress {
 public:
  // total_steps >= 0 steps make one epoch; `label` starts every line ("epoch 3/10").
  Progress(int64_t total_steps, std::string label, std::ostream& out, bool is_tty, ProgressOptions opts = {});
  // Ends a terminal line left open (an epoch interrupted by Ctrl-C).
  ~Progress();
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  // `step` steps (1..total) are done. samples_per_second < 0 leaves the rate out. The ETA assumes
  // the remaining steps take as long as the ones so far (time since construction / step). At
  // step == total the ETA becomes "done in m:ss" and a terminal line is ended.
  void update(int64_t step, const std::vector<ProgressField>& fields, double samples_per_second = -1);
  // Prints a whole line (a warning, a skipped step) without breaking the bar: on a terminal the
  // bar is cleared, the line printed and the bar drawn again below it.
  void log(const std::string& line);
  // Ends the terminal line if one is open; nothing in plain mode.
  void finish();

 private:
  std::string render(int64_t step, const std::vector<ProgressField>& fields, double samples_per_second,
                     double elapsed) const;
  void draw(const std::string& line);

  int64_t total_;
  std::string label_;
  std::ostream& out_;
  bool tty_;
  ProgressOptions opts_;
  double start_;
  double last_draw_ = 0;
  int64_t printed_block_ = 0;  // plain mode: step / log_every at the last line (or at first_step)
  bool drawn_ = false;        // terminal mode: something was drawn since construction
  bool open_ = false;         // terminal mode: a bar line is on screen without its '\n'
  std::size_t last_len_ = 0;  // terminal mode: characters of the line on screen (to blank leftovers)
  std::string last_line_;     // terminal mode: the line on screen (redrawn after log())
};

}  // namespace mg::example
