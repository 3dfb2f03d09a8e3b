// Command-line flags for the example programs, declared once and parsed in the style of Apex's
// ImageNet example: `--name value` or `--name=value`, values kept as the strings given (so
// "O2", "bf16" or "dynamic" pass straight into amp options) plus typed getters. Every value is
// validated during parse(), so a typo fails at start-up, not after an hour of training.
//
// The one decision a reader must know: parse() throws FlagError (an mg::Error) naming the flag,
// the value given and what is accepted (with "did you mean --epochs?" for near misses); main()
// catches it, prints it and returns 2. `--help` does not exit: parse() records it and the caller
// prints usage().
//
//   Flags f("train_resnet", "Trains ResNet-20 on Fashion-MNIST with mixed precision.");
//   f.add_choice("opt-level", "O1", {"O0", "O1", "O2", "O3"}, "Apex optimisation level");
//   f.add_int("epochs", 10, "passes over the training set", {.min = 1});
//   f.add_double("lr", 0.1, "peak learning rate", {.min = 0, .min_exclusive = true});
//   f.add_string("checkpoint", "", "save a checkpoint here after every epoch", {.metavar = "FILE"});
//   f.add_bool("precision-plan", false, "print each layer's dtypes and exit");
//   try { f.parse(argc, argv); } catch (const FlagError& e) { std::cerr << e.what() << "\n"; return 2; }
//   if (f.help_requested()) { std::cout << f.usage(); return 0; }
//   int64_t epochs = f.get_int("epochs");  std::string level = f.value("opt-level");
#pragma once
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "core/error.h"

namespace mg::example {

// A command-line mistake: unknown flag, missing or bad value. The message starts with the
// program name and ends with a hint line.
class FlagError : public Error {
  using Error::Error;
};

struct IntRange {
  int64_t min = std::numeric_limits<int64_t>::min();
  int64_t max = std::numeric_limits<int64_t>::max();
};

// Bounds of a double flag (inclusive unless min_exclusive). inf and NaN are always refused.
struct DoubleRange {
  double min = -std::numeric_limits<double>::infinity();
  double max = std::numeric_limits<double>::infinity();
  bool min_exclusive = false;
};

// A free-form string flag: how the usage text names its value, and an optional check with the
// words that describe what it accepts ("dynamic or a number > 0").
struct StringSpec {
  std::string metavar = "VALUE";
  std::string accepts;                            // shown in errors and usage; "" = anything
  std::function<bool(const std::string&)> valid;  // empty: every value is valid
};

class Flags {
 public:
  Flags(std::string program, std::string description);

  // Declaration, in the order the usage text lists them. Names are lower-case letters, digits
  // and '-', unique, and not "help". A default outside the accepted values is an mg::Error.
  void add_string(const std::string& name, const std::string& def, const std::string& help, StringSpec spec = {});
  void add_int(const std::string& name, int64_t def, const std::string& help, IntRange range = {});
  void add_double(const std::string& name, double def, const std::string& help, DoubleRange range = {});
  void add_choice(const std::string& name, const std::string& def, std::vector<std::string> choices,
                  const std::string& help);
  // `--name` alone means true; `--name=true|false` and `--name true|false` set it explicitly.
  void add_bool(const std::string& name, bool def, const std::string& help);

  // Reads argv[1..argc-1]. A flag given twice keeps the last value. Throws FlagError.
  void parse(int argc, const char* const* argv);

  bool help_requested() const { return help_; }
  // Whether the flag appeared on the command line (false: its value is the default).
  bool given(const std::string& name) const;
  // Whether a flag of that name was declared (shared helpers read a program's optional flags).
  bool declared(const std::string& name) const;
  // The value as given on the command line, or the default as text ("0.1", "true", "").
  const std::string& value(const std::string& name) const;
  // Typed values; asking for a flag of another kind (get_int of a choice) is an mg::Error.
  int64_t get_int(const std::string& name) const;
  double get_double(const std::string& name) const;
  bool get_bool(const std::string& name) const;

  // The --help text: a usage line, the description, then one entry per flag with its default
  // ("(default: 10)", "(default: none)" for an empty string) unless its help text already says
  // "default:" itself (e.g. "(default: the opt level's)" for an empty string meaning "automatic").
  std::string usage() const;
  const std::string& program() const { return program_; }

 private:
  enum class Kind { String, Int, Double, Choice, Bool };
  struct Flag {
    std::string name;
    Kind kind;
    std::string help;
    std::string def;    // default, as text
    std::string value;  // current value, as text
    bool given = false;
    IntRange int_range;
    DoubleRange double_range;
    StringSpec string_spec;
    std::vector<std::string> choices;
  };

  Flag& declare(const std::string& name, Kind kind, const std::string& help, std::string def);
  const Flag& find(const std::string& name, const char* getter) const;
  Flag* lookup(const std::string& name);
  std::string accepts(const Flag& f) const;
  std::string metavar(const Flag& f) const;
  // The reason `text` is not a valid value of f ("" when it is).
  std::string check(const Flag& f, const std::string& text) const;
  void set(Flag& f, const std::string& text);
  [[noreturn]] void fail(const std::string& what) const;

  std::string program_, description_;
  std::vector<Flag> flags_;
  bool help_ = false;
};

// The edit distance between two strings, counting an insertion, a deletion, a substitution or a
// swap of two neighbouring characters as one edit ("hlep" is 1 from "help"); used for "did you
// mean" suggestions.
std::size_t edit_distance(const std::string& a, const std::string& b);

}  // namespace mg::example
