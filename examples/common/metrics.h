// The metrics file of a training run: JSON lines, one object per logged step and per epoch
// (loss, accuracy, loss scale, skipped steps, step time, samples/s, peak memory, ...), each line
// flushed as soon as it is written, so `tail -f` and a crash both see every finished record.
//
// The one decision a reader must know: a non-finite number (an inf loss on an overflowing f16
// step) is written as null with its key kept, because JSON has no NaN or Infinity; strings are
// escaped by the JSON library (io/json_text.h), integers are exact.
//
//   MetricsWriter metrics("run.jsonl");                 // {.append = true} when resuming
//   metrics.write({{"kind", "step"}, {"epoch", 3}, {"step", 1200}, {"loss", 0.4312},
//                  {"scale", 65536.0}, {"skipped", false}, {"peak_rss", peak_rss_bytes()}});
//   // {"kind":"step","epoch":3,"step":1200,"loss":0.4312,"scale":65536,"skipped":false,"peak_rss":123456789}
#pragma once
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <variant>
#include <vector>

namespace mg::example {

// One JSON value: null, a number (double or exact integer), a bool or a string.
class MetricValue {
 public:
  MetricValue(std::nullptr_t) : v_(std::monostate{}) {}
  MetricValue(double v) : v_(v) {}
  MetricValue(float v) : v_(v) {}
  MetricValue(bool v) : v_(v) {}
  template <std::signed_integral T>
  requires(!std::same_as<T, bool>) MetricValue(T v) : v_(int64_t(v)) {}
  template <std::unsigned_integral T>
  requires(!std::same_as<T, bool>) MetricValue(T v) : v_(uint64_t(v)) {}
  MetricValue(const char* v) : v_(std::string(v)) {}
  MetricValue(std::string v) : v_(std::move(v)) {}

  // The value as JSON text: 0.4312, 65536, null (also for NaN and ±inf), true, "text". Numbers
  // are the shortest text that reads back exactly (a float as a float: 1e-4f is 1e-04, not
  // 9.999999747378752e-05).
  std::string json() const;

 private:
  std::variant<std::monostate, double, float, int64_t, uint64_t, bool, std::string> v_;
};

struct MetricField {
  std::string key;
  MetricValue value;
};

struct MetricsOptions {
  // Add to an existing file (a resumed run) instead of starting a new one. A last line without
  // its newline (a record cut off by a crash) is removed first, so the file stays valid.
  bool append = false;
  // With append: the step the run resumes from. Records of later steps (written after that
  // checkpoint by a run that then crashed) are removed, so each step is recorded once. -1: keep all.
  int64_t resume_step = -1;
};

class MetricsWriter {
 public:
  // Opens (creates or truncates, or appends to) `path`; an mg::Error naming the file if it can't.
  explicit MetricsWriter(const std::string& path, MetricsOptions opts = {});
  ~MetricsWriter();
  MetricsWriter(const MetricsWriter&) = delete;
  MetricsWriter& operator=(const MetricsWriter&) = delete;

  // Writes one record as one line and flushes it. Keys must be non-empty and unique within the
  // record (mg::Error otherwise); a failed write is an mg::Error too.
  void write(const std::vector<MetricField>& record);
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::FILE* file_ = nullptr;
};

// One record as the line MetricsWriter writes (without the '\n').
std::string metrics_line(const std::vector<MetricField>& record);

}  // namespace mg::example
