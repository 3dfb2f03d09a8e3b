// Text helpers shared by the io files (safetensors and checkpoints), both built on the JSON
// library's UTF-8 checking; the header keeps nlohmann out of every includer.
#pragma once
#include <string>

namespace mg::io::detail {

// A string as JSON would quote it, for error messages ('a\nb' stays on one line).
std::string quoted(const std::string& s);
// Whether s is valid UTF-8 (safetensors headers and checkpoint names are JSON text).
bool valid_utf8(const std::string& s);

}  // namespace mg::io::detail
