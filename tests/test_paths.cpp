// mg::test::source_dir(): the one object of the test main that sees the generated paths header.
#include "test_paths.h"

#include "mg_test_paths.h"

namespace mg::test {

std::string source_dir() { return MG_SOURCE_DIR; }

}  // namespace mg::test
