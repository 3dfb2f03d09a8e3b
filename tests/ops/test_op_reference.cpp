// docs/ops.md must be the generated op reference of the current op list.
#include <catch2/catch.hpp>

#include <fstream>
#include <sstream>

#include "ops/op_reference.h"
#include "mg_test_paths.h"  // MG_SOURCE_DIR and the paths of the programs tests start

TEST_CASE("docs/ops.md matches the op list", "[ops][docs]") {
  std::ifstream in(std::string(MG_SOURCE_DIR) + "/docs/ops.md");
  REQUIRE(in.good());
  std::stringstream ss;
  ss << in.rdbuf();
  INFO("regenerate with: build/tools/mg_op_reference > docs/ops.md");
  REQUIRE(ss.str() == mg::op_reference_markdown());
}
