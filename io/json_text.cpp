#include "mixgrad/io/json_text.h"

#include <nlohmann/json.hpp>

namespace mg::io::detail {

std::string quoted(const std::string& s) {
  try {
    return nlohmann::json(s).dump();
  } catch (const nlohmann::json::exception&) {
    return "\"<invalid UTF-8>\"";
  }
}

bool valid_utf8(const std::string& s) {
  try {
    (void)nlohmann::json(s).dump();
    return true;
  } catch (const nlohmann::json::exception&) {
    return false;
  }
}

}  // namespace mg::io::detail
