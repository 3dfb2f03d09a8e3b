// The source tree's absolute path at run time, for test helpers in headers that read files from
// it (reference data). A function rather than the MG_SOURCE_DIR macro of the generated
// mg_test_paths.h, so that every test file including such a helper stays path-independent for
// ccache: only tests/test_paths.cpp sees the path.
#pragma once

#include <string>

namespace mg::test {

std::string source_dir();

}  // namespace mg::test
