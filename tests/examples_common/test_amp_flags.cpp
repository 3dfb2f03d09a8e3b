// amp_options: the examples' amp flags become amp::initialize's options, resolved at parse time,
// so a value amp refuses is a FlagError (exit 2) naming the flags, and --dtype at O0 (which would
// be ignored) is refused too.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "examples/common/training_run.h"
#include "test_util.h"

using namespace mg;
using namespace mg::example;

namespace {

// train_resnet's amp flags (the shared ones plus its two own).
Flags parsed(const std::vector<std::string>& args) {
  Flags f("train_resnet", "test");
  add_amp_flags(f);
  f.add_string("keep-batchnorm-fp32", "", "O2/O3: keep batch norm in f32", {.metavar = "B"});
  f.add_bool("channels-last", false, "NHWC");
  std::vector<const char*> argv{"train_resnet"};
  for (const std::string& a : args) argv.push_back(a.c_str());
  f.parse(int(argv.size()), argv.data());
  return f;
}

std::string amp_flag_error(const std::vector<std::string>& args) {
  const Flags f = parsed(args);
  try {
    (void)amp_options(f);
  } catch (const FlagError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("amp flags: the options amp::initialize gets", "[examples][flags]") {
  const amp::InitializeOptions d = amp_options(parsed({}));
  CHECK(d.opt_level == "O1");
  CHECK(d.dtype.text() == "bf16");
  CHECK_FALSE(d.loss_scale.is_set());
  CHECK_FALSE(d.keep_batchnorm_fp32.is_set());
  CHECK(d.memory_format == MemoryFormat::Contiguous);
  CHECK(d.verbosity == 0);
  const amp::InitializeOptions o =
      amp_options(parsed({"--opt-level", "O2", "--dtype", "f16", "--loss-scale", "128", "--keep-batchnorm-fp32",
                          "false", "--channels-last"}));
  const amp::Properties p = amp::resolve_properties(o);
  CHECK(p.opt_level == amp::OptLevel::O2);
  CHECK(p.dtype == DType::F16);
  CHECK_FALSE(p.loss_scale.dynamic);
  CHECK(p.loss_scale.value == 128.0);
  CHECK(p.keep_batchnorm_fp32 == false);
  CHECK(o.memory_format == MemoryFormat::ChannelsLast);
}

TEST_CASE("amp flags: values amp refuses are flag errors naming the flags", "[examples][flags]") {
  CHECK(amp_flag_error({"--loss-scale", "abc"}) ==
        "train_resnet: --loss-scale abc: amp: loss_scale must be a finite number, got \"abc\"");
  CHECK_THAT(amp_flag_error({"--loss-scale", "-3"}),
             Catch::StartsWith("train_resnet: --loss-scale -3: amp: loss_scale must be \"dynamic\" or a positive number"));
  CHECK_THAT(amp_flag_error({"--opt-level", "O1", "--keep-batchnorm-fp32", "true"}),
             Catch::StartsWith("train_resnet: --opt-level O1 --keep-batchnorm-fp32 true: amp: keep_batchnorm_fp32 makes "
                               "no sense with O1"));
  CHECK_THAT(amp_flag_error({"--opt-level", "O3", "--dtype", "f16", "--loss-scale", "dynamic"}),
             Catch::Contains("O3 with dynamic loss scaling on f16 parameters without f32 master weights"));
  CHECK_THAT(amp_flag_error({"--opt-level", "O0", "--dtype", "f16"}),
             Catch::StartsWith("train_resnet: --dtype f16 has no effect at --opt-level O0"));
  // O0 with its default dtype, and O0 with a static loss scale (Apex allows one), are fine.
  CHECK(amp_flag_error({"--opt-level", "O0"}).empty());
  CHECK(amp_flag_error({"--opt-level", "O0", "--loss-scale", "8"}).empty());
  CHECK(amp_flag_error({"--opt-level", "O3", "--dtype", "f16", "--loss-scale", "128"}).empty());
}
