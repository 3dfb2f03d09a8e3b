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

namespace {
// The SAX pass of parse_json: the keys of every open object (a duplicate is an error), and the
// top-level object's keys in order. Values are skipped, nothing is built.
struct KeyCheck {
  using number_integer_t = parsed_json::number_integer_t;
  using number_unsigned_t = parsed_json::number_unsigned_t;
  using number_float_t = parsed_json::number_float_t;
  using string_t = parsed_json::string_t;
  using binary_t = parsed_json::binary_t;

  const std::string& what;
  std::vector<std::string>* top_level_keys;
  std::vector<std::set<std::string>> keys;  // keys seen in each open object
  int depth = 0;                            // open arrays and objects
  std::string top_key;                      // the top-level entry being read
  std::string duplicate;
  std::size_t values = 0;  // counted up to one past kMaxJsonValues, where the pass stops

  bool more() { return ++values <= kMaxJsonValues; }
  bool null() { return more(); }
  bool boolean(bool) { return more(); }
  bool number_integer(number_integer_t) { return more(); }
  bool number_unsigned(number_unsigned_t) { return more(); }
  bool number_float(number_float_t, const string_t&) { return more(); }
  bool string(string_t&) { return more(); }
  bool binary(binary_t&) { return more(); }
  bool start_object(std::size_t) {
    if (!more()) return false;
    ++depth;
    keys.emplace_back();
    return true;
  }
  bool end_object() {
    --depth;
    keys.pop_back();
    return true;
  }
  bool start_array(std::size_t) {
    if (!more()) return false;
    ++depth;
    return true;
  }
  bool end_array() {
    --depth;
    return true;
  }
  bool key(string_t& k) {
    if (depth == 1) {
      top_key = k;
      if (top_level_keys) top_level_keys->push_back(k);
    }
    if (!keys.back().insert(k).second && duplicate.empty()) {
      duplicate = depth == 1 ? str_cat(what, " names ", quoted_excerpt(k), " twice")
                             : str_cat("in ", what, ", the entry of ", quoted_excerpt(top_key), " has the key ",
                                       quoted_excerpt(k), " twice");
    }
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) { return false; }
};
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

  // Two passes, each linear: the keys (duplicates, the top-level order) through a SAX handler that
  // builds nothing, then the value through the plain parser. nlohmann's callback parser, which did
  // both at once, rescans a container's children each time one of its objects closes: O(n²) in
  // the entries, a minute for a 1 MB header of 100,000 keys.
  if (top_level_keys) top_level_keys->clear();
  KeyCheck check{what, top_level_keys};
  (void)parsed_json::sax_parse(text, &check);  // a syntax error is reported by the parse below
  // Before the tree is built: each value costs ~80 bytes there, so a 100 MB text of "{}," took
  // 3.4 GB (docs/fuzzing.md promises no multi-gigabyte allocation from a small file).
  MG_CHECK(check.values <= kMaxJsonValues, Error, prefix, " holds more than ", kMaxJsonValues,
           " JSON values\n  hint: no safetensors header, checkpoint or tokenizer holds that many; the file is corrupt or hostile");
  parsed_json out;
  try {
    out = parsed_json::parse(text);
  } catch (const parsed_json::parse_error& e) {
    MG_THROW(Error, prefix, " is not valid JSON: ", bounded(e.what()));
  } catch (const parsed_json::out_of_range& e) {
    MG_THROW(Error, prefix, " has a number beyond the range of a double: ", bounded(e.what()));
  } catch (const parsed_json::exception& e) {
    MG_THROW(Error, prefix, " cannot be read: ", bounded(e.what()));
  }
  MG_CHECK(check.duplicate.empty(), Error, who, ": ", quoted(path), ": ", check.duplicate);
  return out;
}

}  // namespace mg::io::detail
