// parse_json and the bounded excerpts of io/json_parse.h. The depth scan walks the text once,
// skipping strings (and their escapes); the JSON library then parses text that is known to be
// shallow, with a callback that rejects duplicate keys (it would silently keep one of them).
#include "mixgrad/io/json_parse.h"

#include <set>
#include <vector>

#include "mixgrad/core/error.h"
#include "mixgrad/io/json_text.h"

namespace mg::io::detail {

namespace {

// Cuts s to at most n bytes without splitting a UTF-8 sequence.
std::string cut_utf8(const std::string& s, std::size_t n) {
  if (s.size() <= n) return s;
  while (n > 0 && (static_cast<unsigned char>(s[n]) & 0xC0) == 0x80) --n;
  return s.substr(0, n);
}

// The deepest nesting of [ and { outside strings, stopping as soon as it passes `limit`; also
// returns the byte offset where that happened.
int scan_depth(const std::string& text, int limit, std::size_t* where) {
  int depth = 0, deepest = 0;
  bool in_string = false, escaped = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > deepest) deepest = depth;
      if (depth > limit) {
        *where = i;
        return depth;
      }
    } else if (c == ']' || c == '}') {
      --depth;  // unbalanced text is the parser's to report
    }
  }
  return deepest;
}

// Appends compact JSON for v to out, stopping once out is longer than `limit`.
template <typename Json>
void dump_bounded(const Json& v, std::string& out, std::size_t limit) {
  if (out.size() > limit) return;
  if (v.is_object()) {
    out += '{';
    bool first = true;
    for (const auto& item : v.items()) {
      if (out.size() > limit) return;
      if (!first) out += ',';
      first = false;
      out += quoted(cut_utf8(item.key(), limit + 1));
      out += ':';
      dump_bounded(item.value(), out, limit);
    }
    out += '}';
  } else if (v.is_array()) {
    out += '[';
    bool first = true;
    for (const Json& x : v) {
      if (out.size() > limit) return;
      if (!first) out += ',';
      first = false;
      dump_bounded(x, out, limit);
    }
    out += ']';
  } else if (v.is_string()) {
    out += quoted(cut_utf8(v.template get_ref<const std::string&>(), limit + 1));
  } else {
    out += v.dump(-1, ' ', false, Json::error_handler_t::replace);
  }
}

}  // namespace

std::string bounded(const std::string& s) {
  if (s.size() <= kExcerptChars) return s;
  return cut_utf8(s, kExcerptChars) + " ...";
}

namespace {
template <typename Json>
std::string excerpt_of(const Json& v) {
  std::string out;
  dump_bounded(v, out, kExcerptChars);
  if (out.size() <= kExcerptChars) return out;
  return cut_utf8(out, kExcerptChars) + " ... (cut)";
}
}  // namespace

std::string excerpt(const json& v) { return excerpt_of(v); }
std::string excerpt(const parsed_json& v) { return excerpt_of(v); }

std::string quoted_excerpt(const std::string& s) {
  if (s.size() <= kExcerptChars) return quoted(s);
  return quoted(cut_utf8(s, kExcerptChars)) + str_cat(" (cut; ", s.size(), " bytes)");
}

parsed_json parse_json(const char* who, const std::string& path, const std::string& what, const std::string& text,
                       std::vector<std::string>* top_level_keys) {
  const std::string prefix = str_cat(who, ": ", quoted(path), ": ", what);
  std::size_t where = 0;
  const int depth = scan_depth(text, kMaxJsonDepth, &where);
  MG_CHECK(depth <= kMaxJsonDepth, Error, prefix, " nests arrays and objects more than ", kMaxJsonDepth,
           " levels deep (at byte ", where, ")\n  hint: no safetensors header or checkpoint nests that deep; "
           "the file is corrupt or hostile");

  std::vector<std::set<std::string>> keys;  // keys seen in each open object
  std::string top_key;                      // the top-level entry being parsed
  std::string duplicate;
  if (top_level_keys) top_level_keys->clear();
  auto callback = [&](int level, parsed_json::parse_event_t event, parsed_json& parsed) {
    if (event == parsed_json::parse_event_t::object_start) {
      keys.emplace_back();
    } else if (event == parsed_json::parse_event_t::object_end) {
      keys.pop_back();
    } else if (event == parsed_json::parse_event_t::key) {
      const std::string k = parsed.get<std::string>();
      if (level == 1) {
        top_key = k;
        if (top_level_keys) top_level_keys->push_back(k);
      }
      if (!keys.back().insert(k).second && duplicate.empty()) {
        duplicate = level == 1 ? str_cat(what, " names ", quoted_excerpt(k), " twice")
                               : str_cat("in ", what, ", the entry of ", quoted_excerpt(top_key), " has the key ",
                                         quoted_excerpt(k), " twice");
      }
    }
    return true;
  };
  parsed_json out;
  try {
    out = parsed_json::parse(text, callback);
  } catch (const parsed_json::parse_error& e) {
    MG_THROW(Error, prefix, " is not valid JSON: ", bounded(e.what()));
  } catch (const parsed_json::out_of_range& e) {
    MG_THROW(Error, prefix, " has a number beyond the range of a double: ", bounded(e.what()));
  } catch (const parsed_json::exception& e) {
    MG_THROW(Error, prefix, " cannot be read: ", bounded(e.what()));
  }
  MG_CHECK(duplicate.empty(), Error, who, ": ", quoted(path), ": ", duplicate);
  return out;
}

}  // namespace mg::io::detail
