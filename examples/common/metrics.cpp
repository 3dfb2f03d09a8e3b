#include "examples/common/metrics.h"

#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>
#include <type_traits>

#include "core/error.h"
#include "io/json_text.h"

namespace mg::example {

namespace {

using io::detail::quoted;

// Removes a last line that lacks its '\n' (a record cut off mid-write) from `path`, if any.
void drop_partial_last_line(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return;  // a new file
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (text.empty() || text.back() == '\n') return;
  const std::size_t keep = text.find_last_of('\n') == std::string::npos ? 0 : text.find_last_of('\n') + 1;
  MG_CHECK(::truncate(path.c_str(), off_t(keep)) == 0, Error,
           "MetricsWriter: cannot remove the unfinished last line of ", quoted(path), ": ", std::strerror(errno));
}

// The integer after "step": in a record line (the field MetricsWriter writes), or -1 without one.
int64_t record_step(const std::string& line) {
  const std::string key = "\"step\":";
  const std::size_t at = line.find(key);
  if (at == std::string::npos) return -1;
  int64_t step = -1;
  const char* begin = line.data() + at + key.size();
  std::from_chars(begin, line.data() + line.size(), step);
  return step;
}

// Removes the records of steps after `last_step` from `path` (a new file: nothing to do).
void drop_records_after(const std::string& path, int64_t last_step) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return;
  std::string line, kept;
  bool dropped = false;
  while (std::getline(in, line)) {
    if (record_step(line) > last_step) {
      dropped = true;
      continue;
    }
    kept += line + "\n";
  }
  in.close();
  if (!dropped) return;
  // Into a temporary file renamed over the original: a crash mid-rewrite keeps the old file.
  const std::string tmp = path + ".resume.tmp";
  std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
  out << kept;
  out.close();
  const bool ok = !out.fail() && std::rename(tmp.c_str(), path.c_str()) == 0;
  if (!ok) std::remove(tmp.c_str());
  MG_CHECK(ok, Error, "MetricsWriter: cannot rewrite ", quoted(path), " without the records after step ", last_step, ": ",
           std::strerror(errno));
}

}  // namespace

std::string MetricValue::json() const {
  return std::visit(
      [](const auto& v) -> std::string {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, std::monostate>) {
          return "null";
        } else if constexpr (std::is_same_v<T, double> || std::is_same_v<T, float>) {
          if (!std::isfinite(v)) return "null";
          char buf[64];
          const auto res = std::to_chars(buf, buf + sizeof buf, v);  // shortest text that reads back exactly
          return std::string(buf, res.ptr);
        } else if constexpr (std::is_same_v<T, bool>) {
          return v ? "true" : "false";
        } else if constexpr (std::is_same_v<T, std::string>) {
          MG_CHECK(io::detail::valid_utf8(v), Error, "MetricsWriter: string value ", quoted(v), " is not valid UTF-8");
          return quoted(v);
        } else {
          return std::to_string(v);
        }
      },
      v_);
}

std::string metrics_line(const std::vector<MetricField>& record) {
  std::string line = "{";
  for (std::size_t i = 0; i < record.size(); ++i) {
    const std::string& key = record[i].key;
    MG_CHECK(!key.empty(), Error, "MetricsWriter: a record has an empty key");
    MG_CHECK(io::detail::valid_utf8(key), Error, "MetricsWriter: key ", quoted(key), " is not valid UTF-8");
    for (std::size_t j = 0; j < i; ++j) {
      MG_CHECK(record[j].key != key, Error, "MetricsWriter: key ", quoted(key), " appears twice in one record");
    }
    if (i > 0) line += ',';
    line += quoted(key);
    line += ':';
    line += record[i].value.json();
  }
  return line + "}";
}

MetricsWriter::MetricsWriter(const std::string& path, MetricsOptions opts) : path_(path) {
  if (opts.append) drop_partial_last_line(path_);
  if (opts.append && opts.resume_step >= 0) drop_records_after(path_, opts.resume_step);
  file_ = std::fopen(path_.c_str(), opts.append ? "ae" : "we");
  MG_CHECK(file_ != nullptr, Error, "MetricsWriter: cannot open ", quoted(path_),
           " for writing: ", std::strerror(errno), "\n  hint: the directory must exist and be writable");
}

MetricsWriter::~MetricsWriter() {
  if (file_) std::fclose(file_);
}

void MetricsWriter::write(const std::vector<MetricField>& record) {
  const std::string line = metrics_line(record) + "\n";
  const bool ok = std::fwrite(line.data(), 1, line.size(), file_) == line.size() && std::fflush(file_) == 0;
  MG_CHECK(ok, Error, "MetricsWriter: writing to ", quoted(path_), " failed: ", std::strerror(errno));
}

}  // namespace mg::example
