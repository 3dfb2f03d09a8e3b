// Helpers for the examples_common tests: a temporary directory removed at the end of a test, whole
// file reads, and a minimal XML well-formedness checker that also returns the elements (name,
// attributes, text, parent) so the SVG tests can look inside the plot.
#pragma once
#include <catch2/catch.hpp>
#include <stdlib.h>

#include <algorithm>
#include <cctype>
#include <cstddef>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <vector>

namespace mg::test {

class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "mg_examples_test_XXXXXX").string();
    REQUIRE(::mkdtemp(tmpl.data()) != nullptr);
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string file(const std::string& name) const { return (path_ / name).string(); }
  std::vector<std::string> entries() const {
    std::vector<std::string> out;
    for (const auto& e : std::filesystem::directory_iterator(path_)) out.push_back(e.path().filename().string());
    std::sort(out.begin(), out.end());
    return out;
  }

 private:
  std::filesystem::path path_;
};

inline std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  REQUIRE(f.good());
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

struct XmlElement {
  std::string name;
  std::map<std::string, std::string> attrs;  // values as written (entities not expanded)
  std::string text;                          // direct character data, entities not expanded
  int parent = -1;                           // index into the element list, -1 for the root
};

struct XmlDoc {
  std::string error;  // "" when well-formed
  std::vector<XmlElement> elements;
};

// Checks XML 1.0 well-formedness for the subset an SVG writer produces: an optional <?xml ...?>
// declaration, comments, elements with double- or single-quoted attributes (unique per element,
// no '<' in values), character data without '<', and only the five named or numeric entity
// references; exactly one root element; properly nested tags; no text outside the root.
inline XmlDoc parse_xml(const std::string& s) {
  XmlDoc doc;
  std::size_t pos = 0;
  std::vector<int> open;
  int roots = 0;
  auto fail = [&](const std::string& why) {
    doc.error = why + " at offset " + std::to_string(pos);
    return doc;
  };
  auto name_char = [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == ':' || c == '.';
  };
  // Validates the character data s[b, e): no '<', and every '&' starts a known reference.
  auto check_chars = [&](std::size_t b, std::size_t e) -> std::string {
    for (std::size_t i = b; i < e; ++i) {
      const auto u = static_cast<unsigned char>(s[i]);
      if (s[i] == '<') return "'<' in character data";
      if (u < 0x20 && s[i] != '\t' && s[i] != '\n' && s[i] != '\r') return "control character";
      if (s[i] != '&') continue;
      const std::size_t semi = s.find(';', i);
      if (semi == std::string::npos || semi >= e) return "unterminated entity reference";
      const std::string ref = s.substr(i + 1, semi - i - 1);
      const bool named = ref == "amp" || ref == "lt" || ref == "gt" || ref == "quot" || ref == "apos";
      const bool dec = ref.size() > 1 && ref[0] == '#' && std::all_of(ref.begin() + 1, ref.end(), [](char c) {
                         return std::isdigit(static_cast<unsigned char>(c));
                       });
      const bool hex =
          ref.size() > 2 && ref[0] == '#' && ref[1] == 'x' &&
          std::all_of(ref.begin() + 2, ref.end(), [](char c) { return std::isxdigit(static_cast<unsigned char>(c)); });
      if (!named && !dec && !hex) return "unknown entity &" + ref + ";";
      i = semi;
    }
    return "";
  };
  if (s.starts_with("<?xml")) {
    pos = s.find("?>");
    if (pos == std::string::npos) return fail("unterminated XML declaration");
    pos += 2;
  }
  while (pos < s.size()) {
    if (s[pos] != '<') {
      const std::size_t end = std::min(s.find('<', pos), s.size());
      if (const std::string why = check_chars(pos, end); !why.empty()) return fail(why);
      if (open.empty() && s.find_first_not_of(" \t\r\n", pos) < end) return fail("text outside the root element");
      if (!open.empty()) doc.elements[std::size_t(open.back())].text += s.substr(pos, end - pos);
      pos = end;
      continue;
    }
    if (s.compare(pos, 4, "<!--") == 0) {
      const std::size_t end = s.find("-->", pos + 4);
      if (end == std::string::npos) return fail("unterminated comment");
      pos = end + 3;
      continue;
    }
    if (s.compare(pos, 2, "</") == 0) {
      std::size_t p = pos + 2;
      while (p < s.size() && name_char(s[p])) ++p;
      const std::string name = s.substr(pos + 2, p - pos - 2);
      while (p < s.size() && std::isspace(static_cast<unsigned char>(s[p]))) ++p;
      if (p >= s.size() || s[p] != '>') return fail("malformed end tag");
      if (open.empty() || doc.elements[std::size_t(open.back())].name != name)
        return fail("mismatched </" + name + ">");
      open.pop_back();
      pos = p + 1;
      continue;
    }
    // a start tag
    std::size_t p = pos + 1;
    while (p < s.size() && name_char(s[p])) ++p;
    XmlElement el;
    el.name = s.substr(pos + 1, p - pos - 1);
    if (el.name.empty() || std::isdigit(static_cast<unsigned char>(el.name[0]))) return fail("bad element name");
    el.parent = open.empty() ? -1 : open.back();
    if (open.empty() && ++roots > 1) return fail("more than one root element");
    bool self_closing = false;
    while (true) {
      const std::size_t ws = p;
      while (p < s.size() && std::isspace(static_cast<unsigned char>(s[p]))) ++p;
      if (p >= s.size()) return fail("unterminated start tag");
      if (s[p] == '>') {
        ++p;
        break;
      }
      if (s.compare(p, 2, "/>") == 0) {
        p += 2;
        self_closing = true;
        break;
      }
      if (p == ws) return fail("no space before an attribute");
      const std::size_t nb = p;
      while (p < s.size() && name_char(s[p])) ++p;
      const std::string aname = s.substr(nb, p - nb);
      if (aname.empty() || p >= s.size() || s[p] != '=') return fail("malformed attribute");
      ++p;
      if (p >= s.size() || (s[p] != '"' && s[p] != '\'')) return fail("unquoted attribute value");
      const char q = s[p];
      const std::size_t vend = s.find(q, p + 1);
      if (vend == std::string::npos) return fail("unterminated attribute value");
      if (const std::string why = check_chars(p + 1, vend); !why.empty()) return fail(why + " in attribute " + aname);
      if (el.attrs.count(aname)) return fail("duplicate attribute " + aname);
      el.attrs[aname] = s.substr(p + 1, vend - p - 1);
      p = vend + 1;
    }
    doc.elements.push_back(el);
    if (!self_closing) open.push_back(int(doc.elements.size()) - 1);
    pos = p;
  }
  if (!open.empty()) return fail("unclosed <" + doc.elements[std::size_t(open.back())].name + ">");
  if (roots != 1) return fail("no root element");
  return doc;
}

}  // namespace mg::test
