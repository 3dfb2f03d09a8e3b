// Progress: exact output in plain (non-terminal) mode — a line every 10% or every log_every steps
// and at the end, with ETA from a fake clock — and in terminal mode: '\r' redraws at most once per
// redraw interval, blanking leftovers of a longer line, a final newline, log() lines that do not
// break the bar, and cutting to the terminal width.
#include <catch2/catch.hpp>

#include <sstream>
#include <string>

#include "examples/common/progress.h"
#include "test_util.h"

using namespace mg::example;

TEST_CASE("progress: plain mode prints exact lines every log_every steps and at the end", "[examples][progress]") {
  double now = 100.0;
  std::ostringstream out;
  {
    Progress bar(20, "epoch 1/3", out, /*is_tty=*/false, {.log_every = 5, .clock = [&] { return now; }});
    for (int step = 1; step <= 20; ++step) {
      now = 100.0 + 0.5 * step;  // 0.5 s per step
      bar.update(step, {{"loss", 1.0 / step}, {"scale", 65536}}, 256.0);
    }
  }
  CHECK(out.str() ==
        "epoch 1/3 | step 5/20 | loss 0.2 | scale 65536 | 256 samples/s | ETA 0:07\n"
        "epoch 1/3 | step 10/20 | loss 0.1 | scale 65536 | 256 samples/s | ETA 0:05\n"
        "epoch 1/3 | step 15/20 | loss 0.06667 | scale 65536 | 256 samples/s | ETA 0:02\n"
        "epoch 1/3 | step 20/20 | loss 0.05 | scale 65536 | 256 samples/s | done in 0:10\n");
}

TEST_CASE("progress: plain mode defaults to every 10% of the epoch, and the last step", "[examples][progress]") {
  double now = 0.0;
  std::ostringstream out;
  Progress bar(25, "ep", out, false, {.clock = [&] { return now; }});
  for (int step = 1; step <= 25; ++step) {
    now = 1000.0 * step;  // 1000 s per step: ETA with hours
    bar.update(step, {{"acc", 0.5}});
  }
  const std::string s = out.str();
  CHECK(std::count(s.begin(), s.end(), '\n') == 9);                  // steps 3, 6, ..., 24 and 25
  CHECK(s.starts_with("ep | step 3/25 | acc 0.5 | ETA 6:06:40\n"));  // no rate given: left out
  CHECK(s.ends_with("ep | step 24/25 | acc 0.5 | ETA 16:40\nep | step 25/25 | acc 0.5 | done in 6:56:40\n"));
  CHECK(s.find('\r') == std::string::npos);
}

TEST_CASE("progress: plain mode with sparse updates prints when a multiple is passed, and a resumed epoch's ETA",
          "[examples][progress]") {
  // Updates every 7 steps (metrics read at logging points) with a line due every 5: each update
  // that passed a multiple of 5 prints (a step % 5 == 0 rule printed only step 35).
  double now = 0.0;
  std::ostringstream out;
  {
    Progress bar(40, "ep", out, false, {.log_every = 5, .clock = [&] { return now; }});
    for (int step = 7; step <= 40; step += 7) {
      now = double(step);
      bar.update(step, {});
    }
    now = 40.0;
    bar.update(40, {});
  }
  CHECK(out.str() ==
        "ep | step 7/40 | ETA 0:33\nep | step 14/40 | ETA 0:26\nep | step 21/40 | ETA 0:19\n"
        "ep | step 28/40 | ETA 0:12\nep | step 35/40 | ETA 0:05\nep | step 40/40 | done in 0:40\n");
  // Resumed at step 30 of 40: two steps of 1 s each leave 8 steps, 8 s (not 8 x 2/32 s).
  std::ostringstream resumed;
  now = 0.0;
  Progress bar(40, "ep", resumed, false, {.log_every = 1, .first_step = 30, .clock = [&] { return now; }});
  now = 1.0;
  bar.update(31, {});
  now = 2.0;
  bar.update(32, {});
  CHECK(resumed.str() == "ep | step 31/40 | ETA 0:09\nep | step 32/40 | ETA 0:08\n");
  MG_REQUIRE_ERROR(Progress(40, "ep", resumed, false, {.first_step = 41}), "first_step must be in [0, 40], got 41");
}

TEST_CASE("progress: plain mode log() prints the line as is", "[examples][progress]") {
  std::ostringstream out;
  Progress bar(10, "ep", out, false, {.clock = [] { return 0.0; }});
  bar.log("skipped step 4: gradients overflowed, loss scale 65536 -> 32768");
  bar.update(0, {});
  CHECK(out.str() == "skipped step 4: gradients overflowed, loss scale 65536 -> 32768\n");
}

TEST_CASE("progress: terminal mode redraws one line, throttled, and ends it at the last step", "[examples][progress]") {
  double now = 0.0;
  std::ostringstream out;
  Progress bar(8, "ep", out, /*is_tty=*/true, {.redraw_seconds = 15, .bar_width = 8, .clock = [&] { return now; }});
  for (int step = 1; step <= 8; ++step) {
    now = 10.0 * step;  // draws at steps 1 (first), 3, 5, 7 (15 s apart or more) and 8 (last)
    bar.update(step, {{"loss", 1.0 / step}}, 1000.0);
  }
  const std::string l1 = "ep [=>      ] 1/8 | loss 1 | 1,000 samples/s | ETA 1:10";
  const std::string l3 = "ep [===>    ] 3/8 | loss 0.3333 | 1,000 samples/s | ETA 0:50";
  const std::string l5 = "ep [=====>  ] 5/8 | loss 0.2 | 1,000 samples/s | ETA 0:30";
  const std::string l7 = "ep [=======>] 7/8 | loss 0.1429 | 1,000 samples/s | ETA 0:10";
  const std::string l8 = "ep [========] 8/8 | loss 0.125 | 1,000 samples/s | done in 1:20";
  // l5 is 3 characters shorter than l3: 3 spaces blank what l3 left on screen
  CHECK(out.str() == "\r" + l1 + "\r" + l3 + "\r" + l5 + "   \r" + l7 + "\r" + l8 + "\n");
}

TEST_CASE("progress: terminal mode log() keeps the bar below the message", "[examples][progress]") {
  double now = 0.0;
  std::ostringstream out;
  Progress bar(100, "ep", out, true, {.bar_width = 4, .clock = [&] { return now; }});
  now = 1;
  bar.update(10, {});
  bar.log("warn");
  const std::string line = "ep [>   ]  10/100 | ETA 0:09";
  CHECK(out.str() == "\r" + line + "\rwarn" + std::string(line.size() - 4, ' ') + "\n\r" + line);
  out.str("");
  now = 2;
  bar.update(20, {});
  CHECK(out.str() == "\rep [>   ]  20/100 | ETA 0:08");
}

TEST_CASE("progress: a terminal line left open is ended by the destructor, and cut to the width",
          "[examples][progress]") {
  std::ostringstream out;
  {
    Progress bar(4, "a long label", out, true, {.columns = 20, .clock = [] { return 0.0; }});
    bar.update(1, {{"loss", 2}});
  }
  CHECK(out.str() == "\ra long label [=====\n");  // 19 characters, then the destructor's newline
  MG_REQUIRE_ERROR(Progress(-1, "x", out, false), "Progress: total_steps must be >= 0, got -1");
}

TEST_CASE("progress: non-finite field values and an empty epoch", "[examples][progress]") {
  std::ostringstream out;
  Progress bar(0, "ep", out, false, {.clock = [] { return 0.0; }});
  bar.update(0, {{"loss", std::numeric_limits<double>::infinity()}, {"acc", std::nan("")}});
  CHECK(out.str() == "ep | step 0/0 | loss inf | acc nan | done in 0:00\n");
}

TEST_CASE("progress: is_terminal is false for a file", "[examples][progress]") {
  std::FILE* f = std::tmpfile();
  REQUIRE(f != nullptr);
  CHECK_FALSE(is_terminal(f));
  CHECK(terminal_columns(f) == 0);
  std::fclose(f);
  CHECK_FALSE(is_terminal(nullptr));
}
