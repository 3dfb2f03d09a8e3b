#include "examples/common/metrics_reader.h"

#include <fstream>

#include "core/error.h"
#include "io/json_text.h"

namespace mg::example {

std::vector<nlohmann::json> read_metrics(const std::string& path) {
  std::ifstream in(path);
  MG_CHECK(in.good(), Error, "read_metrics: cannot open ", io::detail::quoted(path));
  std::vector<nlohmann::json> records;
  std::string line;
  for (int64_t number = 1; std::getline(in, line); ++number) {
    if (line.empty()) continue;
    nlohmann::json record = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    MG_CHECK(record.is_object(), Error, "read_metrics: ", io::detail::quoted(path), " line ", number,
             " is not a JSON object: ", io::detail::quoted(line.substr(0, 80)));
    records.push_back(std::move(record));
  }
  return records;
}

}  // namespace mg::example
