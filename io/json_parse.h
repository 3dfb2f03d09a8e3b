// Checked JSON parsing for the io readers (safetensors headers, checkpoint contents): untrusted
// text in, an ordered_json or an mg::Error out. Private to io/*.cpp (it includes nlohmann).
//
// The one decision a reader must know: nesting is limited to kMaxJsonDepth levels by a scan of the
// text *before* the JSON library sees it (its parser and serializer recurse once per level, so
// 100,000 levels overflow the stack), and error messages only ever print bounded excerpts.
//
//   json h = detail::parse_json("load_safetensors", path, "the header", text);
#pragma once
#include <cstddef>
#include <nlohmann/json.hpp>
#include <string>

namespace mg::io::detail {

using json = nlohmann::ordered_json;

// The deepest nesting of arrays and objects accepted. A safetensors header nests 3 levels, a
// checkpoint's contents 4; 64 is far above both and far below what overflows a thread's stack.
inline constexpr int kMaxJsonDepth = 64;
// The most characters of a value or name that an error message prints.
inline constexpr std::size_t kExcerptChars = 200;

// Parses `text` (named `what` in messages, e.g. "the header"). Every problem is an mg::Error
// "<who>: "<path>": <what> ...": nesting deeper than kMaxJsonDepth, invalid JSON, a number beyond
// the range of a double (1e999), a key that appears twice in one object, or any other exception
// of the JSON library.
json parse_json(const char* who, const std::string& path, const std::string& what, const std::string& text);

// v as compact JSON, cut after about kExcerptChars characters ("[1, 2, ... (5000 characters)");
// never serialises more than it prints.
std::string excerpt(const json& v);

// s quoted as JSON, cut after about kExcerptChars characters: for names read from a file.
std::string quoted_excerpt(const std::string& s);

// At most kExcerptChars characters of s followed by " ..." when cut (for the JSON library's
// messages, which quote the offending token whole).
std::string bounded(const std::string& s);

}  // namespace mg::io::detail
