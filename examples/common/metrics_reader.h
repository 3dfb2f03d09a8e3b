// Reads a metrics file written by MetricsWriter back as JSON values (nlohmann::json), for tests
// and for tools that plot or compare runs. Kept apart from metrics.h so that writing metrics does
// not pull the JSON library into every example.
//
//   for (const nlohmann::json& r : read_metrics("run.jsonl"))
//     if (r["kind"] == "step" && !r["loss"].is_null()) losses.push_back(r["loss"].get<double>());
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace mg::example {

// One JSON object per non-empty line, in file order. A line that is not a JSON object is an
// mg::Error naming the file and the line number.
std::vector<nlohmann::json> read_metrics(const std::string& path);

}  // namespace mg::example
