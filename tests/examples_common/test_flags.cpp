// Flags: both value forms, defaults, choices, booleans (switch and explicit), typed getters with
// ranges, string checks, and every error a user can meet — unknown flag with a "did you mean",
// bad value naming the flag, the value and what is accepted, a missing value — plus the exact
// --help text and declaration mistakes.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "examples/common/flags.h"
#include "test_util.h"

using namespace mg::example;

namespace {

// The flags the training examples declare (issue 6), as train_resnet would.
Flags example_flags() {
  Flags f("train_resnet", "Trains ResNet-20 on Fashion-MNIST with mixed precision.");
  f.add_choice("opt-level", "O1", {"O0", "O1", "O2", "O3"}, "Apex optimisation level");
  f.add_choice("dtype", "f16", {"f16", "bf16"}, "low-precision dtype");
  f.add_string("loss-scale", "dynamic", "loss scale",
               {.metavar = "SCALE", .accepts = "dynamic or a number > 0", .valid = [](const std::string& s) {
                  if (s == "dynamic") return true;
                  try {
                    std::size_t used = 0;
                    const double v = std::stod(s, &used);
                    return used == s.size() && v > 0;
                  } catch (const std::exception&) {
                    return false;
                  }
                }});
  f.add_bool("keep-batchnorm-fp32", true, "keep batch norm in f32");
  f.add_choice("device", "cpu", {"cpu", "cuda"}, "where to train");
  f.add_int("epochs", 10, "passes over the training set", {.min = 1});
  f.add_int("batch-size", 128, "examples per step", {.min = 1});
  f.add_double("lr", 0.1, "peak learning rate", {.min = 0, .min_exclusive = true});
  f.add_int("seed", 0, "seed of everything");
  f.add_int("threads", 2, "worker threads", {.min = 1, .max = 1024});
  f.add_string("checkpoint", "", "save a checkpoint here", {.metavar = "FILE"});
  f.add_string("resume", "", "resume from this checkpoint", {.metavar = "FILE"});
  f.add_string("metrics", "", "write JSON lines here", {.metavar = "FILE"});
  f.add_string("plot", "", "write an SVG plot here", {.metavar = "FILE.svg"});
  f.add_bool("precision-plan", false, "print each layer's dtypes");
  f.add_bool("trace-overflow", false, "name the first tensor that overflowed");
  return f;
}

// Parses `args` (without the program name) into a fresh example_flags().
Flags parsed(std::vector<std::string> args) {
  Flags f = example_flags();
  std::vector<const char*> argv{"train_resnet"};
  for (const std::string& a : args) argv.push_back(a.c_str());
  f.parse(int(argv.size()), argv.data());
  return f;
}

// The FlagError message of parsing `args` ("" if it parses).
std::string flag_error(std::vector<std::string> args) {
  try {
    parsed(std::move(args));
  } catch (const FlagError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("flags: defaults without arguments", "[examples][flags]") {
  const Flags f = parsed({});
  CHECK_FALSE(f.help_requested());
  CHECK(f.value("opt-level") == "O1");
  CHECK(f.value("loss-scale") == "dynamic");
  CHECK(f.value("lr") == "0.1");
  CHECK(f.value("checkpoint").empty());
  CHECK(f.get_int("epochs") == 10);
  CHECK(f.get_double("lr") == 0.1);
  CHECK(f.get_bool("keep-batchnorm-fp32"));
  CHECK_FALSE(f.get_bool("precision-plan"));
  CHECK_FALSE(f.given("epochs"));
}

TEST_CASE("flags: '--name value' and '--name=value' forms, values kept as given", "[examples][flags]") {
  const Flags f = parsed({"--opt-level", "O2", "--dtype=bf16", "--epochs", "3", "--lr=5e-4", "--loss-scale", "128",
                          "--checkpoint=ck.safetensors", "--seed", "-7", "--plot", "a=b.svg"});
  CHECK(f.value("opt-level") == "O2");
  CHECK(f.value("dtype") == "bf16");
  CHECK(f.get_int("epochs") == 3);
  CHECK(f.value("lr") == "5e-4");  // the text as given, for amp options
  CHECK(f.get_double("lr") == 5e-4);
  CHECK(f.value("loss-scale") == "128");
  CHECK(f.value("checkpoint") == "ck.safetensors");
  CHECK(f.get_int("seed") == -7);       // one dash: a negative number, not a flag
  CHECK(f.value("plot") == "a=b.svg");  // only the first '=' splits
  CHECK(f.given("epochs"));
  CHECK_FALSE(f.given("batch-size"));
  // a flag given twice keeps the last value
  CHECK(parsed({"--epochs", "3", "--epochs=4"}).get_int("epochs") == 4);
}

TEST_CASE("flags: booleans as switches and with explicit true/false", "[examples][flags]") {
  Flags f = parsed({"--precision-plan", "--keep-batchnorm-fp32", "false", "--epochs", "2"});
  CHECK(f.get_bool("precision-plan"));
  CHECK_FALSE(f.get_bool("keep-batchnorm-fp32"));
  CHECK(f.get_int("epochs") == 2);
  f = parsed({"--keep-batchnorm-fp32=false", "--trace-overflow=true", "--precision-plan"});
  CHECK_FALSE(f.get_bool("keep-batchnorm-fp32"));
  CHECK(f.get_bool("trace-overflow"));
  CHECK(f.get_bool("precision-plan"));  // a switch as the last argument
  CHECK(flag_error({"--trace-overflow=yes"}) ==
        "train_resnet: bad value \"yes\" for --trace-overflow; expected true or false\n"
        "  hint: --help describes every flag");
  CHECK(flag_error({"--trace-overflow=ture"}) ==
        "train_resnet: bad value \"ture\" for --trace-overflow; expected true or false\n"
        "  hint: did you mean true?");
  // a word after a switch that is not true/false is not its value
  CHECK_THAT(flag_error({"--precision-plan", "yes"}),
             Catch::Matchers::StartsWith("train_resnet: unexpected argument \"yes\""));
}

TEST_CASE("flags: choices name the accepted values and suggest a near miss", "[examples][flags]") {
  CHECK(flag_error({"--opt-level", "O4"}) ==
        "train_resnet: bad value \"O4\" for --opt-level; expected one of O0, O1, O2, O3\n"
        "  hint: --help describes every flag");
  CHECK(flag_error({"--opt-level=o2"}) ==
        "train_resnet: bad value \"o2\" for --opt-level; expected one of O0, O1, O2, O3\n"
        "  hint: did you mean O2?");
  CHECK(flag_error({"--dtype", "bfloat16"}) ==
        "train_resnet: bad value \"bfloat16\" for --dtype; expected one of f16, bf16\n"
        "  hint: --help describes every flag");
  CHECK(flag_error({"--device", "gpu"}) ==
        "train_resnet: bad value \"gpu\" for --device; expected one of cpu, cuda\n"
        "  hint: --help describes every flag");
}

TEST_CASE("flags: unknown flags suggest the closest name", "[examples][flags]") {
  CHECK(flag_error({"--epoch", "3"}) ==
        "train_resnet: unknown flag --epoch\n  hint: did you mean --epochs? (--help lists the flags)");
  CHECK_THAT(flag_error({"--batch_size=64"}), Catch::Matchers::Contains("did you mean --batch-size?"));
  CHECK_THAT(flag_error({"--keep-batchnorm-fp16"}), Catch::Matchers::Contains("did you mean --keep-batchnorm-fp32?"));
  CHECK_THAT(flag_error({"--opt", "O2"}), Catch::Matchers::Contains("did you mean --opt-level?"));  // a prefix
  CHECK_THAT(flag_error({"--Seed", "1"}), Catch::Matchers::Contains("did you mean --seed?"));
  CHECK_THAT(flag_error({"--hlep"}), Catch::Matchers::Contains("did you mean --help?"));
  CHECK(flag_error({"--warmup", "5"}) == "train_resnet: unknown flag --warmup\n  hint: --help lists the flags");
  CHECK_THAT(flag_error({"epochs"}),
             Catch::Matchers::StartsWith("train_resnet: unexpected argument \"epochs\" (flags start with --"));
  CHECK_THAT(flag_error({"--"}), Catch::Matchers::StartsWith("train_resnet: unexpected argument \"--\""));
}

TEST_CASE("flags: typed values are validated at parse time, naming the flag", "[examples][flags]") {
  CHECK(flag_error({"--epochs", "ten"}) ==
        "train_resnet: bad value \"ten\" for --epochs; expected an integer >= 1\n"
        "  hint: --help describes every flag");
  CHECK_THAT(flag_error({"--epochs=0"}), Catch::Matchers::Contains("expected an integer >= 1"));
  CHECK_THAT(flag_error({"--epochs=3.5"}), Catch::Matchers::Contains("bad value \"3.5\" for --epochs"));
  CHECK_THAT(flag_error({"--epochs= 3"}), Catch::Matchers::Contains("bad value \" 3\" for --epochs"));
  CHECK_THAT(flag_error({"--epochs=99999999999999999999"}), Catch::Matchers::Contains("for --epochs"));
  CHECK_THAT(flag_error({"--threads=2000"}), Catch::Matchers::Contains("expected an integer in [1, 1024]"));
  CHECK_THAT(flag_error({"--seed=x"}), Catch::Matchers::Contains("for --seed; expected an integer\n"));
  CHECK_THAT(flag_error({"--lr", "0"}), Catch::Matchers::Contains("bad value \"0\" for --lr; expected a number > 0"));
  CHECK_THAT(flag_error({"--lr", "nan"}), Catch::Matchers::Contains("for --lr; expected a number > 0"));
  CHECK_THAT(flag_error({"--lr", "inf"}), Catch::Matchers::Contains("for --lr; expected a number > 0"));
  CHECK_THAT(flag_error({"--lr", "0.1x"}), Catch::Matchers::Contains("for --lr; expected a number > 0"));
  CHECK(flag_error({"--loss-scale", "-1"}) ==
        "train_resnet: bad value \"-1\" for --loss-scale; expected dynamic or a number > 0\n"
        "  hint: --help describes every flag");
  CHECK(parsed({"--loss-scale=1024"}).value("loss-scale") == "1024");
  // control characters in a value stay on one line of the message
  CHECK_THAT(flag_error({"--epochs=1\n2"}), Catch::Matchers::Contains("bad value \"1\\n2\" for --epochs"));
}

TEST_CASE("flags: a missing value says what the flag expects", "[examples][flags]") {
  CHECK(flag_error({"--epochs"}) ==
        "train_resnet: --epochs needs a value (an integer >= 1)\n  hint: --epochs N or --epochs=N");
  CHECK(flag_error({"--checkpoint", "--epochs", "3"}) ==
        "train_resnet: --checkpoint needs a value (any text)\n  hint: --checkpoint FILE or --checkpoint=FILE");
  CHECK_THAT(flag_error({"--opt-level"}),
             Catch::Matchers::Contains("--opt-level needs a value (one of O0, O1, O2, O3)\n"
                                       "  hint: --opt-level O0|O1|O2|O3 or --opt-level=O0|O1|O2|O3"));
  // an explicitly empty value is a value (an empty string flag means "none")
  CHECK(parsed({"--checkpoint="}).value("checkpoint").empty());
  CHECK_THAT(flag_error({"--epochs="}), Catch::Matchers::Contains("bad value \"\" for --epochs"));
}

TEST_CASE("flags: --help is recorded, and the usage text lists every flag with its default", "[examples][flags]") {
  const Flags f = parsed({"--epochs", "3", "--help"});
  CHECK(f.help_requested());
  CHECK(parsed({"-h"}).help_requested());
  // --help takes no value (it suggested "did you mean --help?" for --help=false).
  CHECK(flag_error({"--help=false"}) == "train_resnet: --help takes no value, got \"--help=false\"\n  hint: use --help");
  const std::string usage = f.usage();
  INFO(usage);
  const std::vector<std::pair<std::string, std::string>> expected = {
      {"--opt-level O0|O1|O2|O3", "(default: O1)"},
      {"--dtype f16|bf16", "(default: f16)"},
      {"--loss-scale SCALE", "(default: dynamic)"},
      {"--keep-batchnorm-fp32 [true|false]", "(default: true)"},
      {"--device cpu|cuda", "(default: cpu)"},
      {"--epochs N", "(default: 10)"},
      {"--batch-size N", "(default: 128)"},
      {"--lr X", "(default: 0.1)"},
      {"--seed N", "(default: 0)"},
      {"--threads N", "(default: 2)"},
      {"--checkpoint FILE", "(default: none)"},
      {"--resume FILE", "(default: none)"},
      {"--metrics FILE", "(default: none)"},
      {"--plot FILE.svg", "(default: none)"},
      {"--precision-plan [true|false]", "(default: false)"},
      {"--trace-overflow [true|false]", "(default: false)"}};
  std::size_t pos = 0;
  for (const auto& [flag, def] : expected) {
    const std::size_t at = usage.find("  " + flag, pos);
    INFO(flag);
    REQUIRE(at != std::string::npos);  // listed, in declaration order
    CHECK((usage[at + 2 + flag.size()] == ' ' || usage[at + 2 + flag.size()] == '\n'));
    const std::size_t next = usage.find("\n  --", at);
    CHECK(usage.substr(at, next - at).find(def) != std::string::npos);
    pos = at;
  }
  CHECK(usage.find("  --help ") != std::string::npos);
  CHECK(usage.starts_with("usage: train_resnet [flags]\nTrains ResNet-20 on Fashion-MNIST with mixed precision.\n"));
}

TEST_CASE("flags: exact usage layout, with wrapping of long help", "[examples][flags]") {
  Flags f("demo", "A demo.");
  f.add_int("steps", 100, "SGD steps");
  f.add_string("a-very-long-flag-name-for-layout", "x", "goes on its own line", {.metavar = "SOMETHING"});
  f.add_string("loss-scale", "", "dynamic or a number (default: the opt level's)", {.metavar = "S"});
  f.add_double("lr", 0.05,
               "the peak learning rate of SGD with momentum 0.9 and a cosine decay to zero over the whole run, "
               "which is long enough to wrap");
  CHECK(f.usage() ==
        "usage: demo [flags]\n"
        "A demo.\n"
        "\n"
        "flags (--name value or --name=value):\n"
        "  --steps N       SGD steps (default: 100)\n"
        "  --a-very-long-flag-name-for-layout SOMETHING\n"
        "                  goes on its own line (default: x)\n"
        "  --loss-scale S  dynamic or a number (default: the opt level's)\n"
        "  --lr X          the peak learning rate of SGD with momentum 0.9 and a cosine decay to zero over\n"
        "                  the whole run, which is long enough to wrap (default: 0.05)\n"
        "  --help          print this text and exit\n");
}

TEST_CASE("flags: declaration and getter mistakes are errors", "[examples][flags]") {
  Flags f("prog", "");
  f.add_int("epochs", 1, "");
  MG_REQUIRE_ERROR(f.add_int("epochs", 2, ""), "prog: flag --epochs is declared twice");
  MG_REQUIRE_ERROR(f.add_bool("help", false, ""), "--help is built in");
  MG_REQUIRE_ERROR(f.add_int("Bad_Name", 1, ""), "must be lower-case letters, digits and '-'");
  MG_REQUIRE_ERROR(f.add_int("threads", 0, "", {.min = 1}), "the default 0 of --threads is not valid");
  MG_REQUIRE_ERROR(f.add_choice("level", "O5", {"O0", "O1"}, ""), "the default \"O5\" of --level");
  MG_REQUIRE_ERROR(f.add_double("lr", 0.0, "", {.min = 0, .min_exclusive = true}), "of --lr is not valid");
  f.add_choice("level", "O1", {"O0", "O1"}, "");  // a failed declaration left nothing behind
  MG_REQUIRE_ERROR(f.get_int("level"), "prog: get_int(\"level\"): --level is not an int flag");
  MG_REQUIRE_ERROR(f.get_bool("epochs"), "--epochs is not a bool flag");
  MG_REQUIRE_ERROR(f.value("nope"), "prog: value(\"nope\"): no flag --nope was declared");
  CHECK(f.get_double("epochs") == 1.0);  // an int reads as a number too
}

TEST_CASE("flags: edit distance", "[examples][flags]") {
  CHECK(edit_distance("", "") == 0);
  CHECK(edit_distance("abc", "") == 3);
  CHECK(edit_distance("epoch", "epochs") == 1);
  CHECK(edit_distance("kitten", "sitting") == 3);
  CHECK(edit_distance("flaw", "lawn") == 2);
  CHECK(edit_distance("hlep", "help") == 1);  // a swap of neighbours is one edit
  CHECK(edit_distance("ca", "abc") == 3);
}
