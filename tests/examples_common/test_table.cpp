// Table: exact aligned output with left and right columns, UTF-8 widths, no trailing spaces, and
// a row of the wrong length is an error.
#include <catch2/catch.hpp>

#include "examples/common/format.h"
#include "examples/common/table.h"
#include "test_util.h"

using namespace mg::example;

TEST_CASE("table: columns are aligned left or right under a rule", "[examples][table]") {
  Table t({{"opt level"}, {"dtype"}, {"final loss", Align::Right}, {"samples/s", Align::Right}, {"note"}});
  t.add_row({"O0", "f32", format_fixed(0.43121, 4), format_count(812), ""});
  t.add_row({"O2", "bf16", format_fixed(0.4398, 4), format_count(2471), "±0.01 × 3"});
  t.add_row({"O3", "f16", "nan", format_count(12345678), "diverged"});
  CHECK(t.rows() == 3);
  CHECK(t.to_string() ==
        "opt level | dtype | final loss |  samples/s | note\n"
        "----------+-------+------------+------------+----------\n"
        "O0        | f32   |     0.4312 |        812 |\n"
        "O2        | bf16  |     0.4398 |      2,471 | ±0.01 × 3\n"
        "O3        | f16   |        nan | 12,345,678 | diverged\n");
}

TEST_CASE("table: a header-only table and a wrong row", "[examples][table]") {
  Table t({{"a", Align::Right}, {"bb"}});
  CHECK(t.to_string() == "a | bb\n--+---\n");
  MG_REQUIRE_ERROR(t.add_row({"1"}), "Table: a row has 1 cells but the table has 2 columns");
  MG_REQUIRE_ERROR(Table(std::vector<Column>{}), "Table: needs at least one column");
}
