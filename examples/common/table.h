// A text table for the final summary of a run: named columns, each left- or right-aligned (numbers
// right, so their digits line up), cells given as strings (format them with format.h), printed
// with a header rule. Widths count UTF-8 code points, so "±" or "×" do not break the alignment.
//
//   Table t({{"opt level"}, {"final loss", Align::Right}, {"samples/s", Align::Right}});
//   t.add_row({"O2", format_fixed(0.4312, 4), format_count(1234)});
//   std::cout << t.to_string();
//   // opt level | final loss | samples/s
//   // ----------+------------+----------
//   // O2        |     0.4312 |     1,234
#pragma once
#include <string>
#include <vector>

namespace mg::example {

enum class Align { Left, Right };

struct Column {
  std::string header;
  Align align = Align::Left;
};

class Table {
 public:
  explicit Table(std::vector<Column> columns);
  // One cell per column; another count is an mg::Error.
  void add_row(std::vector<std::string> cells);
  std::size_t rows() const { return rows_.size(); }
  // Header, rule, rows; columns separated by " | ", no trailing spaces, every line ends in '\n'.
  std::string to_string() const;

 private:
  std::vector<Column> columns_;
  std::vector<std::vector<std::string>> rows_;
};

}  // namespace mg::example
