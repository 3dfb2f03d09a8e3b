#include "examples/common/flags.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <optional>

#include "io/json_text.h"

namespace mg::example {

namespace {

using io::detail::quoted;

// Shortest text that reads back as the same double ("0.1", "3e-05").
std::string double_text(double v) {
  char buf[64];
  const auto res = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, res.ptr);
}

std::optional<int64_t> parse_int(const std::string& s) {
  int64_t v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
  return v;
}

std::optional<double> parse_double(const std::string& s) {
  double v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || end != s.data() + s.size() || !std::isfinite(v)) return std::nullopt;
  return v;
}

std::string lower(std::string s) {
  for (char& c : s) c = char(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
  return s;
}

// The candidate `given` was most likely meant to be, or "": a case-insensitive match, the one
// candidate it is a prefix of, or the one candidate nearest in edit distance (within a third of
// its length, at most 3, and only for 4 letters or more: "gpu" is not a typo of "cpu").
std::string suggest(const std::string& given, const std::vector<std::string>& candidates) {
  for (const std::string& c : candidates) {
    if (lower(c) == lower(given)) return c;
  }
  std::vector<std::string> prefixed;
  for (const std::string& c : candidates) {
    if (given.size() >= 3 && c.starts_with(given)) prefixed.push_back(c);
  }
  if (prefixed.size() == 1) return prefixed[0];
  if (given.size() < 4) return "";  // one edit in three letters is another word ("gpu", "cpu")
  const std::size_t limit = std::clamp<std::size_t>(given.size() / 3, 1, 3);
  std::string best;
  std::size_t best_d = limit + 1;
  bool unique = false;
  for (const std::string& c : candidates) {
    const std::size_t d = edit_distance(lower(given), lower(c));
    if (d < best_d) {
      best = c, best_d = d, unique = true;
    } else if (d == best_d) {
      unique = false;
    }
  }
  return unique ? best : "";
}

bool valid_name(const std::string& name) {
  if (name.empty() || name.front() == '-') return false;
  return std::all_of(name.begin(), name.end(),
                     [](char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-'; });
}

// Appends `text` to `out` word by word, breaking lines before `width` columns; continuation lines
// start with `indent` spaces. `column` is where the text starts on the current line.
void wrap(std::string& out, const std::string& text, std::size_t column, std::size_t indent, std::size_t width) {
  std::size_t pos = 0;
  bool first = true;
  while (pos < text.size()) {
    const std::size_t end = std::min(text.find(' ', pos), text.size());
    const std::string word = text.substr(pos, end - pos);
    pos = end + 1;
    if (word.empty()) continue;
    if (!first && column + 1 + word.size() > width) {
      out += '\n';
      out.append(indent, ' ');
      column = indent;
    } else if (!first) {
      out += ' ';
      ++column;
    }
    out += word;
    column += word.size();
    first = false;
  }
}

}  // namespace

std::size_t edit_distance(const std::string& a, const std::string& b) {
  // Rows i-2, i-1 and i of the (|a|+1) x (|b|+1) table of prefix distances.
  std::vector<std::size_t> prev2(b.size() + 1), prev(b.size() + 1), cur(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t subst = prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1);
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, subst});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) cur[j] = std::min(cur[j], prev2[j - 2] + 1);
    }
    std::swap(prev2, prev);
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

Flags::Flags(std::string program, std::string description)
    : program_(std::move(program)), description_(std::move(description)) {}

Flags::Flag& Flags::declare(const std::string& name, Kind kind, const std::string& help, std::string def) {
  MG_CHECK(valid_name(name), Error, program_, ": flag name ", quoted(name),
           " must be lower-case letters, digits and '-', not starting with '-'");
  MG_CHECK(name != "help", Error, program_, ": --help is built in and cannot be declared");
  MG_CHECK(lookup(name) == nullptr, Error, program_, ": flag --", name, " is declared twice");
  Flag f;
  f.name = name;
  f.kind = kind;
  f.help = help;
  f.def = def;
  f.value = std::move(def);
  flags_.push_back(std::move(f));
  return flags_.back();
}

void Flags::add_string(const std::string& name, const std::string& def, const std::string& help, StringSpec spec) {
  Flag& f = declare(name, Kind::String, help, def);
  f.string_spec = std::move(spec);
  // An empty default means "not set" (e.g. no checkpoint) and is allowed whatever the check says.
  const std::string why = def.empty() ? "" : check(f, def);
  if (!why.empty()) {
    flags_.pop_back();
    MG_THROW(Error, program_, ": the default ", quoted(def), " of --", name, " is not valid: ", why);
  }
}

void Flags::add_int(const std::string& name, int64_t def, const std::string& help, IntRange range) {
  Flag& f = declare(name, Kind::Int, help, std::to_string(def));
  f.int_range = range;
  if (const std::string why = check(f, f.def); !why.empty()) {
    flags_.pop_back();
    MG_THROW(Error, program_, ": the default ", def, " of --", name, " is not valid: ", why);
  }
}

void Flags::add_double(const std::string& name, double def, const std::string& help, DoubleRange range) {
  Flag& f = declare(name, Kind::Double, help, double_text(def));
  f.double_range = range;
  if (const std::string why = check(f, f.def); !why.empty()) {
    flags_.pop_back();
    MG_THROW(Error, program_, ": the default ", double_text(def), " of --", name, " is not valid: ", why);
  }
}

void Flags::add_choice(const std::string& name, const std::string& def, std::vector<std::string> choices,
                       const std::string& help) {
  Flag& f = declare(name, Kind::Choice, help, def);
  f.choices = std::move(choices);
  if (f.choices.empty() || !check(f, def).empty()) {
    flags_.pop_back();
    MG_THROW(Error, program_, ": the default ", quoted(def), " of --", name, " is not one of its choices");
  }
}

void Flags::add_bool(const std::string& name, bool def, const std::string& help) {
  declare(name, Kind::Bool, help, def ? "true" : "false");
}

Flags::Flag* Flags::lookup(const std::string& name) {
  for (Flag& f : flags_) {
    if (f.name == name) return &f;
  }
  return nullptr;
}

const Flags::Flag& Flags::find(const std::string& name, const char* getter) const {
  for (const Flag& f : flags_) {
    if (f.name == name) return f;
  }
  MG_THROW(Error, program_, ": ", getter, "(\"", name, "\"): no flag --", name, " was declared");
}

std::string Flags::accepts(const Flag& f) const {
  switch (f.kind) {
    case Kind::Int: {
      const IntRange& r = f.int_range;
      const bool lo = r.min != std::numeric_limits<int64_t>::min();
      const bool hi = r.max != std::numeric_limits<int64_t>::max();
      if (lo && hi) return str_cat("an integer in [", r.min, ", ", r.max, "]");
      if (lo) return str_cat("an integer >= ", r.min);
      if (hi) return str_cat("an integer <= ", r.max);
      return "an integer";
    }
    case Kind::Double: {
      const DoubleRange& r = f.double_range;
      const bool lo = std::isfinite(r.min), hi = std::isfinite(r.max);
      if (lo && hi) {
        return str_cat("a number in ", r.min_exclusive ? "(" : "[", double_text(r.min), ", ", double_text(r.max), "]");
      }
      if (lo) return str_cat("a number ", r.min_exclusive ? "> " : ">= ", double_text(r.min));
      if (hi) return str_cat("a number <= ", double_text(r.max));
      return "a number";
    }
    case Kind::Choice: {
      std::string s = "one of ";
      for (std::size_t i = 0; i < f.choices.size(); ++i) s += (i ? ", " : "") + f.choices[i];
      return s;
    }
    case Kind::Bool:
      return "true or false";
    case Kind::String:
      return f.string_spec.accepts.empty() ? "any text" : f.string_spec.accepts;
  }
  return "";
}

std::string Flags::metavar(const Flag& f) const {
  switch (f.kind) {
    case Kind::Int:
      return "N";
    case Kind::Double:
      return "X";
    case Kind::Choice: {
      std::string s;
      for (std::size_t i = 0; i < f.choices.size(); ++i) s += (i ? "|" : "") + f.choices[i];
      return s;
    }
    case Kind::Bool:
      return "[true|false]";
    case Kind::String:
      return f.string_spec.metavar;
  }
  return "";
}

std::string Flags::check(const Flag& f, const std::string& text) const {
  switch (f.kind) {
    case Kind::Int: {
      const std::optional<int64_t> v = parse_int(text);
      if (!v || *v < f.int_range.min || *v > f.int_range.max) return "expected " + accepts(f);
      return "";
    }
    case Kind::Double: {
      const std::optional<double> v = parse_double(text);
      const DoubleRange& r = f.double_range;
      const bool below = v && (r.min_exclusive ? *v <= r.min : *v < r.min);
      if (!v || below || *v > r.max) return "expected " + accepts(f);
      return "";
    }
    case Kind::Choice:
      if (std::find(f.choices.begin(), f.choices.end(), text) != f.choices.end()) return "";
      return "expected " + accepts(f);
    case Kind::Bool:
      return text == "true" || text == "false" ? "" : "expected " + accepts(f);
    case Kind::String:
      if (!f.string_spec.valid || f.string_spec.valid(text)) return "";
      return "expected " + accepts(f);
  }
  return "";
}

void Flags::fail(const std::string& what) const { throw FlagError(program_ + ": " + what); }

void Flags::set(Flag& f, const std::string& text) {
  if (const std::string why = check(f, text); !why.empty()) {
    std::string msg = str_cat("bad value ", quoted(text), " for --", f.name, "; ", why);
    const std::string near = f.kind == Kind::Choice ? suggest(text, f.choices)
                             : f.kind == Kind::Bool ? suggest(text, {"true", "false"})
                                                    : "";
    msg += near.empty() ? "\n  hint: --help describes every flag" : "\n  hint: did you mean " + near + "?";
    fail(msg);
  }
  f.value = text;
  f.given = true;
}

void Flags::parse(int argc, const char* const* argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      help_ = true;
      continue;
    }
    if (arg.starts_with("--help=")) fail(str_cat("--help takes no value, got ", quoted(arg), "\n  hint: use --help"));
    if (!arg.starts_with("--") || arg.size() == 2) {
      fail(str_cat("unexpected argument ", quoted(arg), " (flags start with --, e.g. --epochs 3)",
                   "\n  hint: --help lists the flags"));
    }
    std::string name = arg.substr(2);
    std::optional<std::string> inline_value;
    if (const std::size_t eq = name.find('='); eq != std::string::npos) {
      inline_value = name.substr(eq + 1);
      name = name.substr(0, eq);
    }
    Flag* f = lookup(name);
    if (f == nullptr) {
      std::vector<std::string> names{"help"};
      for (const Flag& g : flags_) names.push_back(g.name);
      const std::string near = suggest(name, names);
      fail(str_cat("unknown flag --", name,
                   near.empty() ? "\n  hint: --help lists the flags"
                                : "\n  hint: did you mean --" + near + "? (--help lists the flags)"));
    }
    if (inline_value) {
      set(*f, *inline_value);
    } else if (f->kind == Kind::Bool) {
      // The switch form unless the next word is an explicit true/false.
      const bool explicit_value =
          i + 1 < argc && (std::string(argv[i + 1]) == "true" || std::string(argv[i + 1]) == "false");
      set(*f, explicit_value ? std::string(argv[++i]) : "true");
    } else if (i + 1 < argc && !std::string(argv[i + 1]).starts_with("--")) {
      set(*f, argv[++i]);
    } else {
      fail(str_cat("--", name, " needs a value (", accepts(*f), ")\n  hint: --", name, " ", metavar(*f), " or --", name,
                   "=", metavar(*f)));
    }
  }
}

bool Flags::given(const std::string& name) const { return find(name, "given").given; }

bool Flags::declared(const std::string& name) const {
  for (const Flag& f : flags_) {
    if (f.name == name) return true;
  }
  return false;
}

const std::string& Flags::value(const std::string& name) const { return find(name, "value").value; }

int64_t Flags::get_int(const std::string& name) const {
  const Flag& f = find(name, "get_int");
  MG_CHECK(f.kind == Kind::Int, Error, program_, ": get_int(\"", name, "\"): --", name, " is not an int flag");
  return *parse_int(f.value);
}

double Flags::get_double(const std::string& name) const {
  const Flag& f = find(name, "get_double");
  MG_CHECK(f.kind == Kind::Double || f.kind == Kind::Int, Error, program_, ": get_double(\"", name, "\"): --", name,
           " is not a number flag");
  return *parse_double(f.value);
}

bool Flags::get_bool(const std::string& name) const {
  const Flag& f = find(name, "get_bool");
  MG_CHECK(f.kind == Kind::Bool, Error, program_, ": get_bool(\"", name, "\"): --", name, " is not a bool flag");
  return f.value == "true";
}

std::string Flags::usage() const {
  constexpr std::size_t kWidth = 100;                        // wrap help text before this column
  constexpr std::size_t kMaxLeft = 34;                       // a longer "--name VALUE" puts its help on the next line
  std::vector<std::pair<std::string, std::string>> entries;  // "  --name META", help (default)
  for (const Flag& f : flags_) {
    std::string help = f.help;
    if (f.kind == Kind::String && !f.string_spec.accepts.empty()) help += " (" + f.string_spec.accepts + ")";
    if (help.find("default:") == std::string::npos) {  // unless the help states its own default
      help += " (default: " + (f.def.empty() ? std::string("none") : f.def) + ")";
    }
    entries.emplace_back("  --" + f.name + " " + metavar(f), help);
  }
  entries.emplace_back("  --help", "print this text and exit");
  std::size_t left = 0;
  for (const auto& [l, h] : entries) {
    if (l.size() <= kMaxLeft) left = std::max(left, l.size());
  }
  const std::size_t indent = left + 2;

  std::string out = "usage: " + program_ + " [flags]\n";
  if (!description_.empty()) {
    wrap(out, description_, 0, 0, kWidth);
    out += "\n";
  }
  out += "\nflags (--name value or --name=value):\n";
  for (const auto& [l, h] : entries) {
    out += l;
    if (l.size() <= kMaxLeft) {
      out += std::string(indent - l.size(), ' ');
    } else {
      out += '\n';
      out.append(indent, ' ');
    }
    wrap(out, h, indent, indent, kWidth);
    out += "\n";
  }
  return out;
}

}  // namespace mg::example
