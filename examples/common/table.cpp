#include "examples/common/table.h"

#include <algorithm>

#include "core/error.h"
#include "examples/common/format.h"

namespace mg::example {

Table::Table(std::vector<Column> columns) : columns_(std::move(columns)) {
  MG_CHECK(!columns_.empty(), Error, "Table: needs at least one column");
}

void Table::add_row(std::vector<std::string> cells) {
  MG_CHECK(cells.size() == columns_.size(), Error, "Table: a row has ", cells.size(), " cells but the table has ",
           columns_.size(), " columns");
  rows_.push_back(std::move(cells));
}

std::string Table::to_string() const {
  std::vector<std::size_t> width(columns_.size());
  for (std::size_t c = 0; c < columns_.size(); ++c) {
    width[c] = display_width(columns_[c].header);
    for (const auto& row : rows_) width[c] = std::max(width[c], display_width(row[c]));
  }
  auto line = [&](auto cell_of) {
    std::string out;
    for (std::size_t c = 0; c < columns_.size(); ++c) {
      const std::string cell = cell_of(c);
      const std::string pad(width[c] - display_width(cell), ' ');
      if (c > 0) out += " | ";
      out += columns_[c].align == Align::Right ? pad + cell : cell + pad;
    }
    out.erase(out.find_last_not_of(' ') + 1);
    return out + "\n";
  };
  std::string out = line([&](std::size_t c) { return columns_[c].header; });
  for (std::size_t c = 0; c < columns_.size(); ++c) {
    out += (c > 0 ? "-+-" : "") + std::string(width[c], '-');
  }
  out += "\n";
  for (const auto& row : rows_) out += line([&](std::size_t c) { return row[c]; });
  return out;
}

}  // namespace mg::example
