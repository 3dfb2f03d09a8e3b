#include "mixgrad/ops/op_reference.h"

#include <sstream>

#include "mixgrad/ops/composite.h"
#include "mixgrad/ops/op.h"

namespace mg {
namespace {

// What autocast makes of an f32 input under a policy, for the table.
std::string autocast_input(CastPolicy p, const char* low) {
  switch (p) {
    case CastPolicy::Lower: return low;
    case CastPolicy::Fp32: return "f32";
    case CastPolicy::Promote: return "widest input";
    case CastPolicy::Keep: return "unchanged";
    case CastPolicy::Banned: return std::string(low) == "f16" ? "error" : "f32";
  }
  return "?";
}

}  // namespace

std::string op_reference_markdown() {
  std::ostringstream os;
  os << "# Op reference\n\n"
     << "Generated from `ops/op_list.def` by `build/tools/mg_op_reference > docs/ops.md`; a test\n"
     << "keeps this file in sync with the op list. Policies are the defaults (`set_policy` overrides\n"
     << "them, see docs/amp.md): **lower** casts floating inputs to the autocast dtype, **fp32** to f32,\n"
     << "**promote** to the widest floating input dtype, **keep** leaves them unchanged, **banned** is an\n"
     << "error under f16 autocast (the op leaves f16's range) and runs in f32 under bf16.\n\n"
     << "| op | inputs | differentiable | policy | f16 autocast | bf16 autocast |\n"
     << "|---|---|---|---|---|---|\n";
  for (int i = 0; i < kNumOps; ++i) {
    const OpDesc& d = op_desc(OpId(i));
    os << "| `" << d.name << "` | " << (d.arity < 0 ? std::string("variadic") : std::to_string(d.arity))
       << " | " << (d.differentiable ? "yes" : "no") << " | " << policy_name(d.default_policy) << " | "
       << autocast_input(d.default_policy, "f16") << " | " << autocast_input(d.default_policy, "bf16")
       << " |\n";
  }
  os << "\n" << kNumOps << " ops.\n\n"
     << "## Composite functions\n\n"
     << "Built from the ops above (autograd differentiates them through those ops), with a policy of\n"
     << "their own from `ops/composite_list.def`, applied to their inputs before they are widened to\n"
     << "f32 (ops/composite.h); `set_policy` does not reach them.\n\n"
     << "| function | policy | f16 autocast | bf16 autocast |\n"
     << "|---|---|---|---|\n";
  for (const detail::CompositeDesc& d : detail::composite_functions()) {
    os << "| `" << d.name << "` | " << policy_name(d.policy) << " | " << autocast_input(d.policy, "f16") << " | "
       << autocast_input(d.policy, "bf16") << " |\n";
  }
  return os.str();
}

}  // namespace mg
