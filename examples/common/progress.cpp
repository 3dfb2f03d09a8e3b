#include "examples/common/progress.h"

#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>

#include "core/error.h"
#include "examples/common/format.h"

namespace mg::example {

namespace {

// The first `n` code points of s.
std::string cut(const std::string& s, std::size_t n) {
  std::size_t seen = 0;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if ((static_cast<unsigned char>(s[i]) & 0xC0) != 0x80 && seen++ == n) return s.substr(0, i);
  }
  return s;
}

}  // namespace

bool is_terminal(std::FILE* f) { return f != nullptr && ::isatty(::fileno(f)) == 1; }

int terminal_columns(std::FILE* f) {
  winsize ws{};
  if (f == nullptr || ::ioctl(::fileno(f), TIOCGWINSZ, &ws) != 0) return 0;
  return ws.ws_col;
}

Progress::Progress(int64_t total_steps, std::string label, std::ostream& out, bool is_tty, ProgressOptions opts)
    : total_(total_steps), label_(std::move(label)), out_(out), tty_(is_tty), opts_(std::move(opts)) {
  MG_CHECK(total_ >= 0, Error, "Progress: total_steps must be >= 0, got ", total_);
  MG_CHECK(opts_.log_every >= 0, Error, "Progress: log_every must be >= 0, got ", opts_.log_every);
  MG_CHECK(bool(opts_.clock), Error, "Progress: the clock is empty");
  if (opts_.log_every == 0) opts_.log_every = std::max<int64_t>(1, (total_ + 9) / 10);
  opts_.bar_width = std::max(opts_.bar_width, 1);
  MG_CHECK(opts_.first_step >= 0 && opts_.first_step <= total_, Error, "Progress: first_step must be in [0, ",
           total_, "], got ", opts_.first_step);
  printed_block_ = opts_.first_step / opts_.log_every;
  start_ = opts_.clock();
}

Progress::~Progress() {
  try {
    finish();
  } catch (...) {
    // a destructor must not throw; a failing stream has nothing more to say
  }
}

std::string Progress::render(int64_t step, const std::vector<ProgressField>& fields, double samples_per_second,
                             double elapsed) const {
  const std::string total = std::to_string(total_);
  std::string counter = std::to_string(step);
  std::string line = label_;
  if (tty_) {
    const double frac = total_ > 0 ? std::clamp(double(step) / double(total_), 0.0, 1.0) : 1.0;
    const int filled = int(frac * opts_.bar_width);
    std::string bar(std::size_t(opts_.bar_width), ' ');
    std::fill(bar.begin(), bar.begin() + filled, '=');
    if (filled < opts_.bar_width) bar[std::size_t(filled)] = '>';
    counter.insert(0, total.size() > counter.size() ? total.size() - counter.size() : 0, ' ');
    line += " [" + bar + "] " + counter + "/" + total;
  } else {
    line += " | step " + counter + "/" + total;
  }
  for (const ProgressField& f : fields) line += " | " + f.name + " " + format_number(f.value);
  if (samples_per_second >= 0) line += " | " + format_rate(samples_per_second) + " samples/s";
  if (step >= total_) {
    line += " | done in " + format_duration(elapsed);
  } else {
    const int64_t run = step - opts_.first_step;  // steps timed since the bar started
    const double eta = run > 0 ? elapsed / double(run) * double(total_ - step) : -1.0;
    line += " | ETA " + format_duration(eta);
  }
  return line;
}

void Progress::draw(const std::string& line) {
  std::string shown = opts_.columns > 1 ? cut(line, std::size_t(opts_.columns - 1)) : line;
  const std::size_t len = display_width(shown);
  last_line_ = shown;
  if (len < last_len_) shown += std::string(last_len_ - len, ' ');  // blank what the old line left
  last_len_ = len;
  out_ << '\r' << shown;
  open_ = true;
}

void Progress::update(int64_t step, const std::vector<ProgressField>& fields, double samples_per_second) {
  const double now = opts_.clock();
  const bool last = step >= total_;
  if (tty_) {
    if (drawn_ && !last && now - last_draw_ < opts_.redraw_seconds) return;
    draw(render(step, fields, samples_per_second, now - start_));
    drawn_ = true;
    last_draw_ = now;
    if (last) finish();
    out_.flush();
  } else if (last || step / opts_.log_every > printed_block_) {
    // Each time the step passes a multiple of log_every: also when updates come only every few
    // steps (metrics read at logging points), which may never land on a multiple.
    printed_block_ = step / opts_.log_every;
    out_ << render(step, fields, samples_per_second, now - start_) << '\n';
    out_.flush();
  }
}

void Progress::log(const std::string& line) {
  if (tty_ && open_) {
    const std::size_t len = display_width(line);
    out_ << '\r' << line << std::string(len < last_len_ ? last_len_ - len : 0, ' ') << '\n';
    last_len_ = 0;
    draw(last_line_);
  } else {
    out_ << line << '\n';
  }
  out_.flush();
}

void Progress::finish() {
  if (tty_ && open_) {
    out_ << '\n';
    out_.flush();
    open_ = false;
    last_len_ = 0;
  }
}

}  // namespace mg::example
