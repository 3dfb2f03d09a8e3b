#include "mixgrad/distributed/rank_agreement.h"

#include <algorithm>
#include <cstring>
#include <sstream>

#include "mixgrad/core/factory.h"

namespace mg::distributed {

namespace {

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

std::vector<std::string> split_lines(const std::string& s) {
  std::vector<std::string> out;
  std::istringstream in(s);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

}  // namespace

std::string compare_across_ranks(ProcessGroup& group, Device device, const std::vector<std::string>& lines,
                                 int64_t note, const std::string& note_label) {
  std::string text;
  for (const std::string& l : lines) text += l + "\n";
  const Tensor summary =
      group.all_gather(from_vector<int64_t>({int64_t(lines.size()), note, int64_t(text.size()), int64_t(fnv1a(text) >> 1)},
                                            {4}).to(device))
          .to(Device::cpu());  // [W, 4] i64
  const int world = group.world_size();
  const int64_t* s = summary.data<int64_t>();
  bool same = true;
  int64_t longest = 0;
  for (int r = 0; r < world; ++r) {
    same = same && std::equal(s, s + 4, s + 4 * r);
    longest = std::max(longest, s[4 * r + 2]);
  }
  if (same) return "";
  Tensor mine = zeros({longest}, {.dtype = DType::U8});  // [longest] u8, the text zero-padded
  std::memcpy(mine.data<uint8_t>(), text.data(), text.size());
  const Tensor all = group.all_gather(mine.to(device)).to(Device::cpu());  // [W, longest] u8
  std::vector<std::vector<std::string>> per_rank;
  for (int r = 0; r < world; ++r) {
    const char* row = reinterpret_cast<const char*>(all.data<uint8_t>()) + r * longest;
    per_rank.push_back(split_lines(std::string(row, std::size_t(s[4 * r + 2]))));
  }
  std::ostringstream msg;
  for (int r = 0; r < world; ++r) {
    msg << "\n  rank " << r << ": " << per_rank[std::size_t(r)].size() << " entries (" << s[4 * r + 1] << " "
        << note_label << ")";
  }
  // The first entry where some rank differs from rank 0.
  std::size_t most = 0;
  for (const auto& l : per_rank) most = std::max(most, l.size());
  for (std::size_t i = 0; i < most; ++i) {
    bool differ = false;
    for (int r = 1; r < world; ++r) {
      const auto& a = per_rank[0];
      const auto& b = per_rank[std::size_t(r)];
      differ = differ || (i < a.size()) != (i < b.size()) || (i < a.size() && a[i] != b[i]);
    }
    if (!differ) continue;
    msg << "\n  first difference, entry " << i << ":";
    for (int r = 0; r < world; ++r) {
      const auto& l = per_rank[std::size_t(r)];
      msg << "\n    rank " << r << ": " << (i < l.size() ? l[i] : std::string("(none)"));
    }
    break;
  }
  return msg.str();
}

}  // namespace mg::distributed
