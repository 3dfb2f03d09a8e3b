// The source rewrite of the CUDA emulator's build (MG_WITH_CUDA=EMULATE, docs/cuda_emulator.md):
// every kernel launch
//   kernel<template args><<<grid, block, shared, stream>>>(args)
// becomes
//   (::mg_emu::Launch(grid, block, shared, stream) | [=](auto&... mg_emu_a) { kernel<template args>(mg_emu_a...); })(args)
// so that a C++ compiler builds the kernel sources against cuda/emulator/device_side.h, and every
// declaration `__shared__ T name[...];` is followed (on the same line) by
//   ::mg_emu::poison_shared(&name, sizeof(name));
// which fills the variable with 0xff bytes once per block, as a GPU's shared memory holds whatever
// was there: a kernel reading a slot no thread wrote then reads NaN, not a stale value. Comments,
// string and character literals are copied untouched, and line breaks are kept, so the compiler's
// line numbers are the source's. Header-only: the build tool (rewrite_launches.cpp) and its test.
#pragma once
#include <cctype>
#include <string>

namespace mg_emu {

namespace detail {

inline bool launch_ident_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == ':'; }

// The start of the kernel expression that ends just before `end` (exclusive): a possibly qualified
// name followed by balanced template arguments.
inline std::size_t kernel_start(const std::string& s, std::size_t end) {
  std::size_t i = end;
  while (i > 0 && std::isspace(static_cast<unsigned char>(s[i - 1]))) --i;
  if (i > 0 && s[i - 1] == '>') {
    int depth = 0;
    while (i > 0) {
      --i;
      if (s[i] == '>') ++depth;
      if (s[i] == '<' && --depth == 0) break;
    }
  }
  while (i > 0 && launch_ident_char(s[i - 1])) --i;
  return i;
}

// The declared name of the declaration s[begin, end) (end at its ';'): the last identifier before
// the first '[' or '=' (or before the end).
inline std::string declared_name(const std::string& s, std::size_t begin, std::size_t end) {
  std::size_t stop = s.find_first_of("[=", begin);
  if (stop == std::string::npos || stop > end) stop = end;
  std::size_t e = stop;
  while (e > begin && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  std::size_t b = e;
  while (b > begin && (std::isalnum(static_cast<unsigned char>(s[b - 1])) || s[b - 1] == '_')) --b;
  return s.substr(b, e - b);
}

}  // namespace detail

// The rewritten text of `s`; `error` gets the byte offset of a launch it cannot parse (and the
// result is then incomplete), else stays empty. `launches` counts the rewritten launches.
inline std::string rewrite_launches(const std::string& s, std::string& error, int* launches = nullptr) {
  std::string out;
  std::size_t copied = 0;  // s[0, copied) is in out
  int count = 0;
  for (std::size_t i = 0; i < s.size();) {
    if (s.compare(i, 2, "//") == 0) {
      i = s.find('\n', i);
      if (i == std::string::npos) i = s.size();
    } else if (s.compare(i, 2, "/*") == 0) {
      i = s.find("*/", i + 2);
      i = i == std::string::npos ? s.size() : i + 2;
    } else if (s[i] == '"' || s[i] == '\'') {
      const char q = s[i++];
      while (i < s.size() && s[i] != q) i += s[i] == '\\' ? 2 : 1;
      ++i;
    } else if (s.compare(i, 10, "__shared__") == 0 && (i == 0 || !detail::launch_ident_char(s[i - 1])) &&
               (i + 10 >= s.size() || !detail::launch_ident_char(s[i + 10]))) {
      const std::size_t end = s.find(';', i);
      const std::string name = end == std::string::npos ? "" : detail::declared_name(s, i + 10, end);
      if (name.empty() || name == "extern") {
        error = "a __shared__ declaration that cannot be parsed at byte " + std::to_string(i);
        return out;
      }
      out.append(s, copied, end + 1 - copied);
      out += " ::mg_emu::poison_shared(&" + name + ", sizeof(" + name + "));";
      copied = i = end + 1;
    } else if (s.compare(i, 3, "<<<") == 0) {
      const std::size_t start = detail::kernel_start(s, i);
      std::size_t j = i + 3;
      int parens = 0;
      while (j < s.size() && !(parens == 0 && s.compare(j, 3, ">>>") == 0)) {
        if (s[j] == '(') ++parens;
        if (s[j] == ')') --parens;
        ++j;
      }
      const bool no_kernel = s.find_first_not_of(" \t\r\n", start) >= i;
      if (j >= s.size() || start < copied || no_kernel) {
        error = "a kernel launch that cannot be parsed at byte " + std::to_string(i);
        return out;
      }
      out.append(s, copied, start - copied);
      out += "(::mg_emu::Launch(";
      out.append(s, i + 3, j - (i + 3));
      out += ") | [=](auto&... mg_emu_a) { ";
      out.append(s, start, i - start);
      out += "(mg_emu_a...); })";
      copied = i = j + 3;
      ++count;
    } else {
      ++i;
    }
  }
  out.append(s, copied, std::string::npos);
  if (launches != nullptr) *launches = count;
  return out;
}

}  // namespace mg_emu
