// Reader for the reference values in tests/data/reference/ (written once by
// tools/reference/gen_reference.py from PyTorch; the tests need no Python), and a comparison of an
// mg::Tensor against a stored tensor that reports the max abs/rel error.
//
//   mg::test::ReferenceFile f = mg::test::load_reference("conv2d.txt");
//   mg::Tensor x = f.tensor("basic.x");                       // f64 (or i64) tensor, a fresh copy
//   mg::test::check_reference(mg::conv2d(x, w, b), f, "basic.y");
//
// File format: '#' comment lines and blank lines are skipped; each tensor is a header line
//   tensor <name> <f64|i64> <rank> <dims...>
// followed by one line of its numel values (row-major; f64 in round-trip precision, inf/nan allowed).
// The one decision a reader must know: a missing file or tensor, or a malformed line, fails the
// running Catch2 test with the file (and tensor) named; nothing is silently defaulted.
#pragma once
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <iomanip>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "autograd/grad_mode.h"
#include "core/factory.h"
#include "ops/ops.h"
#include "test_paths.h"

namespace mg::test {

// One stored tensor: values kept as text-exact doubles (f64) or integers (i64).
struct ReferenceTensor {
  DType dtype = DType::F64;  // F64 or I64
  Shape shape;
  std::vector<double> f64;   // numel values when dtype == F64
  std::vector<int64_t> i64;  // numel values when dtype == I64
};

class ReferenceFile {
 public:
  ReferenceFile() = default;
  ReferenceFile(std::string path, std::map<std::string, ReferenceTensor> tensors,
                std::vector<std::string> order)
      : path_(std::move(path)), tensors_(std::move(tensors)), order_(std::move(order)) {}

  const std::string& path() const { return path_; }
  bool has(const std::string& name) const { return tensors_.count(name) != 0; }
  // Tensor names in file order.
  const std::vector<std::string>& names() const { return order_; }

  // Case names in file order: the distinct parts of the names before their first '.'.
  std::vector<std::string> cases() const {
    std::vector<std::string> out;
    for (const std::string& n : order_) {
      const std::string c = n.substr(0, n.find('.'));
      if (std::find(out.begin(), out.end(), c) == out.end()) out.push_back(c);
    }
    return out;
  }

  // The stored tensor; FAILs the running test when the name is missing.
  const ReferenceTensor& entry(const std::string& name) const {
    const auto it = tensors_.find(name);
    if (it == tensors_.end()) FAIL("reference file " << path_ << ": no tensor named '" << name << "'");
    return it->second;
  }

  // A new contiguous CPU tensor (F64 or I64) holding the stored values; rank 0 gives a 0-d tensor.
  Tensor tensor(const std::string& name) const {
    const ReferenceTensor& r = entry(name);
    if (r.dtype == DType::I64) return from_buffer(r.i64.data(), r.shape, {.dtype = DType::I64});
    return from_buffer(r.f64.data(), r.shape, {.dtype = DType::F64});
  }

  // The values of an i64 tensor (options such as a stride or a normalized_shape).
  std::vector<int64_t> ints(const std::string& name) const {
    const ReferenceTensor& r = entry(name);
    if (r.dtype != DType::I64) FAIL("reference file " << path_ << ": tensor '" << name << "' is not i64");
    return r.i64;
  }
  int64_t int_value(const std::string& name) const {
    const std::vector<int64_t> v = ints(name);
    if (v.size() != 1) FAIL("reference file " << path_ << ": tensor '" << name << "' is not one value");
    return v[0];
  }
  double f64_value(const std::string& name) const {
    const ReferenceTensor& r = entry(name);
    if (r.dtype != DType::F64 || r.f64.size() != 1)
      FAIL("reference file " << path_ << ": tensor '" << name << "' is not one f64 value");
    return r.f64[0];
  }

 private:
  std::string path_;
  std::map<std::string, ReferenceTensor> tensors_;
  std::vector<std::string> order_;
};

// mg::test::source_dir() + "/tests/data/reference/" + file_name.
inline std::string reference_path(const std::string& file_name) {
  return mg::test::source_dir() + "/tests/data/reference/" + file_name;
}

// Parses tests/data/reference/<file_name>; FAILs the running test on a missing file or a
// malformed line (naming the file, the line number and the tensor).
inline ReferenceFile load_reference(const std::string& file_name) {
  const std::string path = reference_path(file_name);
  std::ifstream in(path);
  if (!in) FAIL("cannot open reference file " << path << " (written by tools/reference/gen_reference.py)");
  std::map<std::string, ReferenceTensor> tensors;
  std::vector<std::string> order;
  std::string line;
  int64_t line_no = 0;
  const auto bad = [&](const std::string& what) {
    FAIL("reference file " << path << ":" << line_no << ": " << what);
  };
  while (std::getline(in, line)) {
    ++line_no;
    if (line.empty() || line[0] == '#') continue;
    std::istringstream head(line);
    std::string word, name, dtype;
    int64_t rank = -1;
    head >> word >> name >> dtype >> rank;
    if (word != "tensor" || name.empty() || rank < 0)
      bad("expected 'tensor <name> <f64|i64> <rank> <dims...>', got '" + line + "'");
    if (tensors.count(name)) bad("tensor '" + name + "' appears twice");
    ReferenceTensor r;
    if (dtype == "f64") {
      r.dtype = DType::F64;
    } else if (dtype == "i64") {
      r.dtype = DType::I64;
    } else {
      bad("tensor '" + name + "': unknown dtype '" + dtype + "' (f64 or i64)");
    }
    for (int64_t d = 0; d < rank; ++d) {
      int64_t size = -1;
      head >> size;
      if (!head || size < 0) bad("tensor '" + name + "': bad or missing dimension " + std::to_string(d));
      r.shape.push_back(size);
    }
    const int64_t numel = shape_numel(r.shape);
    std::string values;
    ++line_no;
    if (!std::getline(in, values)) bad("tensor '" + name + "': missing its line of values");
    // strtod / strtoll: exact round trip of the printed doubles and accepts inf, -inf, nan.
    const char* p = values.c_str();
    for (int64_t k = 0; k < numel; ++k) {
      char* end = nullptr;
      if (r.dtype == DType::F64) {
        r.f64.push_back(std::strtod(p, &end));
      } else {
        r.i64.push_back(std::strtoll(p, &end, 10));
      }
      if (end == p) bad("tensor '" + name + "': value " + std::to_string(k) + " of " + std::to_string(numel) + " is missing or not a number");
      p = end;
    }
    while (*p == ' ' || *p == '\t' || *p == '\r') ++p;
    if (*p != '\0') bad("tensor '" + name + "': more than " + std::to_string(numel) + " values");
    order.push_back(name);
    tensors.emplace(name, std::move(r));
  }
  return ReferenceFile(path, std::move(tensors), std::move(order));
}

// The errors of one comparison. scale = max |want| (the tensor's magnitude); rel = max_abs / scale.
struct ReferenceError {
  double max_abs = 0;
  double scale = 0;
  double rel = 0;
};

// Compares `got` (any dtype and device, converted to f64) with the stored tensor `name`: the
// shapes must be equal, non-finite stored values must be matched exactly (inf by inf of the same
// sign, nan by nan), and every finite element must satisfy |got - want| <= rtol * scale, where
// scale = max(max |want|, 1e-300) — an error relative to the tensor's magnitude, so elements
// that cancel to nearly 0 are not held to an impossible relative bound. REQUIREs all of this with
// the file, tensor, worst element and errors in the message; returns the errors for reporting.
inline ReferenceError check_reference(const Tensor& got, const ReferenceFile& file, const std::string& name,
                                      double rtol = 1e-10) {
  const ReferenceTensor& want = file.entry(name);
  INFO("reference file " << file.path() << ", tensor '" << name << "'");
  REQUIRE(got.defined());
  INFO("got " << describe(got) << ", want " << shape_str(want.shape));
  REQUIRE(got.shape() == want.shape);
  std::vector<double> g;
  {
    NoGradGuard no_grad;
    const Tensor c = contiguous(to(to(got.detach(), Device::cpu()), DType::F64));
    g.assign(c.data<double>(), c.data<double>() + c.numel());
  }
  std::vector<double> w = want.f64;
  if (want.dtype == DType::I64) w.assign(want.i64.begin(), want.i64.end());
  ReferenceError err;
  for (double v : w)
    if (std::isfinite(v)) err.scale = std::max(err.scale, std::fabs(v));
  err.scale = std::max(err.scale, 1e-300);
  std::size_t worst = 0;
  for (std::size_t i = 0; i < w.size(); ++i) {
    if (!std::isfinite(w[i])) {
      INFO("element " << i << ": got " << std::setprecision(17) << g[i] << ", want " << w[i]);
      REQUIRE((std::isnan(w[i]) ? std::isnan(g[i]) : g[i] == w[i]));
      continue;
    }
    const double d = std::isfinite(g[i]) ? std::fabs(g[i] - w[i]) : INFINITY;
    if (d > err.max_abs) err.max_abs = d, worst = i;
  }
  err.rel = err.max_abs / err.scale;
  if (w.empty()) return err;
  INFO("max abs error " << err.max_abs << " at element " << worst << " (got " << std::setprecision(17)
                        << g[worst] << ", want " << w[worst] << std::setprecision(6) << "); max |want| "
                        << err.scale << "; relative error " << err.rel << ", rtol " << rtol);
  REQUIRE(err.rel <= rtol);
  return err;
}

}  // namespace mg::test
