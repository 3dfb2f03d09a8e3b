// Lookups into the generated tables: a binary search over the class ranges and the folds (an
// ASCII table first, since almost all text is ASCII), Hangul syllables decomposed by formula.
#include "mixgrad/data/text/bert_unicode.h"

#include <algorithm>
#include <array>

namespace mg::data::detail {

namespace {

constexpr uint32_t kHangulFirst = 0xAC00, kHangulLast = 0xD7A3;

BertCharClass lookup_class(uint32_t cp) {
  const BertClassRange* end = kBertClassRanges + kBertClassRangeCount;
  const BertClassRange* it =
      std::upper_bound(kBertClassRanges, end, cp, [](uint32_t v, const BertClassRange& r) { return v < r.first; });
  return it == kBertClassRanges ? BertCharClass::kOther : (it - 1)->cls;
}

const std::array<BertCharClass, 128>& ascii_classes() {
  static const std::array<BertCharClass, 128> table = [] {
    std::array<BertCharClass, 128> t{};
    for (uint32_t c = 0; c < 128; ++c) t[c] = lookup_class(c);
    return t;
  }();
  return table;
}

}  // namespace

BertCharClass bert_char_class(uint32_t cp) {
  if (cp < 128) return ascii_classes()[cp];
  if ((cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF) return BertCharClass::kOther;  // invalid bytes
  return lookup_class(cp);
}

int bert_combining_class(uint32_t cp) {
  if (cp < kBertCombiningClasses[0].cp) return 0;  // all of ASCII, Latin, Greek, Cyrillic, ...
  const BertCombiningClass* end = kBertCombiningClasses + kBertCombiningClassCount;
  const BertCombiningClass* it = std::lower_bound(kBertCombiningClasses, end, cp,
                                                  [](const BertCombiningClass& c, uint32_t v) { return c.cp < v; });
  return it != end && it->cp == cp ? it->ccc : 0;
}

void append_utf8(uint32_t cp, std::string& out) {
  if (cp >= 0xDC80 && cp <= 0xDCFF) {  // an invalid byte, decoded as Python's surrogateescape does
    out.push_back(char(cp - 0xDC00));
  } else if (cp < 0x80) {
    out.push_back(char(cp));
  } else if (cp < 0x800) {
    out.push_back(char(0xC0 | cp >> 6));
    out.push_back(char(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(char(0xE0 | cp >> 12));
    out.push_back(char(0x80 | (cp >> 6 & 0x3F)));
    out.push_back(char(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(char(0xF0 | cp >> 18));
    out.push_back(char(0x80 | (cp >> 12 & 0x3F)));
    out.push_back(char(0x80 | (cp >> 6 & 0x3F)));
    out.push_back(char(0x80 | (cp & 0x3F)));
  }
}

int bert_uncased(uint32_t cp, uint32_t out[3]) {
  if (cp < 128) {
    out[0] = cp >= 'A' && cp <= 'Z' ? cp - 'A' + 'a' : cp;
    return 1;
  }
  if (cp >= kHangulFirst && cp <= kHangulLast) {  // Unicode's canonical decomposition of a syllable
    const uint32_t s = cp - kHangulFirst;
    out[0] = 0x1100 + s / 588;
    out[1] = 0x1161 + s % 588 / 28;
    out[2] = 0x11A7 + s % 28;
    return s % 28 != 0 ? 3 : 2;
  }
  const BertFold1* end1 = kBertFold1 + kBertFold1Count;
  const BertFold1* f1 = std::lower_bound(kBertFold1, end1, cp, [](const BertFold1& f, uint32_t v) { return f.from < v; });
  if (f1 != end1 && f1->from == cp) {
    out[0] = f1->to;
    return 1;
  }
  const BertFoldN* endn = kBertFoldN + kBertFoldNCount;
  const BertFoldN* fn = std::lower_bound(kBertFoldN, endn, cp, [](const BertFoldN& f, uint32_t v) { return f.from < v; });
  if (fn != endn && fn->from == cp) {
    int n = 0;
    for (uint32_t t : fn->to) {
      if (t != 0) out[n++] = t;
    }
    return n;
  }
  out[0] = cp;
  return 1;
}

}  // namespace mg::data::detail
