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
#include <vector>

namespace mg::io::detail {

// What the writers build: objects keep their keys in insertion order (a checkpoint's, a header's).
using json = nlohmann::ordered_json;
// What parse_json returns: objects in a std::map, O(log n) per key. nlohmann's ordered_map finds
// a key by a linear search, so reading an object of n keys into an ordered_json costs O(n²): 0.9 s
// for a 30,522-token tokenizer.json vocabulary, hours for a hostile 100 MB header. A reader that
// needs the file's order of the top-level keys (safetensors' tensors) asks parse_json for it.
using parsed_json = nlohmann::json;

// The deepest nesting of arrays and objects accepted. A safetensors header nests 3 levels, a
// checkpoint's contents 4; 64 is far above both and far below what overflows a thread's stack.
inline constexpr int kMaxJsonDepth = 64;
// The most JSON values (numbers, strings, arrays, objects, ...) a text may hold: counted by the
// key-checking pass before the tree is built (~80 bytes a value there), so a hostile text costs at
// most ~320 MB. A safetensors header holds ~10 values a tensor, a 250k-token tokenizer.json ~0.5M.
inline constexpr std::size_t kMaxJsonValues = 4'000'000;
// The most characters of a value or name that an error message prints.
inline constexpr std::size_t kExcerptChars = 200;

// Parses `text` (named `what` in messages, e.g. "the header"). Every problem is an mg::Error
// "<who>: "<path>": <what> ...": nesting deeper than kMaxJsonDepth, invalid JSON, a number beyond
// the range of a double (1e999), a key that appears twice in one object, or any other exception
// of the JSON library. `top_level_keys`, when given, receives the top-level object's keys in the
// order the text has them.
parsed_json parse_json(const char* who, const std::string& path, const std::string& what, const std::string& text,
                       std::vector<std::string>* top_level_keys = nullptr);

// v as compact JSON, cut after about kExcerptChars characters ("[1, 2, ... (5000 characters)");
// never serialises more than it prints.
std::string excerpt(const json& v);
std::string excerpt(const parsed_json& v);

// s quoted as JSON, cut after about kExcerptChars characters: for names read from a file.
std::string quoted_excerpt(const std::string& s);

// At most kExcerptChars characters of s followed by " ..." when cut (for the JSON library's
// messages, which quote the offending token whole).
std::string bounded(const std::string& s);

}  // namespace mg::io::detail
