// docs/ops.md must be the generated op reference of the current op list.
#include <catch2/catch.hpp>

#include <fstream>
#include <sstream>

#include "ops/op_reference.h"

TEST_CASE("docs/ops.md matches the op list", "[ops][docs]") {
  std::ifstream in(std::string(MG_SOURCE_DIR) + "/docs/ops.md");
  REQUIRE(in.good());
  std::stringstream ss;
  ss << in.rdbuf();
  INFO("regenerate with: build/tools/mg_op_reference > docs/ops.md");
  REQUIRE(ss.str() == mg::op_reference_markdown());
}
