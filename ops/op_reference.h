// The generated op reference: every op of ops/op_list.def with its arity, differentiability and
// autocast policy, and the dtype each floating input gets under f16 and bf16 autocast. docs/ops.md
// is this text; tests/ops/test_op_reference.cpp fails when the two drift apart, and
// `build/tools/mg_op_reference > docs/ops.md` regenerates it.
#pragma once
#include <string>

namespace mg {

std::string op_reference_markdown();

}  // namespace mg
