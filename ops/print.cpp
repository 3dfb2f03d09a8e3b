// Tensor printing in PyTorch's style: nested brackets, values right-aligned in one width, fixed
// or scientific notation chosen from the value range, and "..." beyond 1000 elements (first and
// last three entries of each dim; only those are converted and formatted).
#include <cmath>
#include <iomanip>
#include <sstream>
#include <string>
#include <vector>

#include "mixgrad/autograd/grad_mode.h"
#include "mixgrad/autograd/node.h"
#include "mixgrad/ops/ops.h"

namespace mg {
namespace {

constexpr int64_t kSummarizeAbove = 1000;
constexpr int64_t kEdgeItems = 3;

struct Format {
  bool scientific = false;
  int width = 1;
};

std::string format_float(double v, const Format& f) {
  std::ostringstream os;
  if (std::isnan(v)) {
    os << "nan";
  } else if (std::isinf(v)) {
    os << (v > 0 ? "inf" : "-inf");
  } else if (f.scientific) {
    os << std::scientific << std::setprecision(4) << v;
  } else {
    os << std::fixed << std::setprecision(4) << v;
  }
  return os.str();
}

// The elements to show: the whole tensor, or, when summarised, the first and last kEdgeItems
// along every longer dim (so only those are converted and formatted, whatever the size).
// cut[d]: dim d was cut, and "..." goes after its first kEdgeItems.
Tensor shown_part(const Tensor& x, bool summarize, std::vector<bool>& cut) {
  Tensor out = x;
  cut.assign(std::size_t(x.dim()), false);
  if (!summarize) return out;
  for (int64_t d = 0; d < x.dim(); ++d) {
    const int64_t size = x.shape()[std::size_t(d)];
    if (size <= 2 * kEdgeItems) continue;
    out = cat({slice(out, d, 0, kEdgeItems), slice(out, d, size - kEdgeItems, size)}, d);
    cut[std::size_t(d)] = true;
  }
  return out;
}

class Printer {
 public:
  // text: the shown elements formatted, row-major over `shape`.
  Printer(const Shape& shape, const std::vector<bool>& cut, const std::vector<std::string>& text, int width)
      : shape_(shape), cut_(cut), text_(text), width_(width) {}

  void print(std::ostringstream& os, int64_t dim, int64_t offset, int indent) const {
    if (shape_.empty()) {
      os << text_[0];
      return;
    }
    const int64_t size = shape_[std::size_t(dim)];
    int64_t stride = 1;
    for (std::size_t k = std::size_t(dim) + 1; k < shape_.size(); ++k) stride *= shape_[k];
    const bool last = dim + 1 == int64_t(shape_.size());
    os << '[';
    for (int64_t i = 0; i < size; ++i) {
      if (cut_[std::size_t(dim)] && i == kEdgeItems) {
        os << (last ? "..., " : "...,\n" + std::string(indent + 1, ' '));
      }
      if (last) {
        const std::string& s = text_[std::size_t(offset + i)];
        os << std::string(std::max<int>(0, width_ - int(s.size())), ' ') << s;
        if (i + 1 < size) os << ", ";
      } else {
        print(os, dim + 1, offset + i * stride, indent + 1);
        if (i + 1 < size) os << ',' << std::string(shape_.size() - std::size_t(dim) - 1, '\n') << std::string(indent + 1, ' ');
      }
    }
    os << ']';
  }

 private:
  const Shape& shape_;
  const std::vector<bool>& cut_;
  const std::vector<std::string>& text_;
  int width_;
};

// The shown elements as text: integers exactly (through i64, never f64, which rounds above 2^53),
// bools as true/false, floats in one notation chosen from their range.
std::vector<std::string> format_elements(const Tensor& shown) {
  std::vector<std::string> text;
  const int64_t n = shown.numel();
  text.reserve(std::size_t(n));
  if (shown.dtype() == DType::Bool) {
    const Tensor b = mg::contiguous(mg::to(shown, DType::I64));
    for (int64_t i = 0; i < n; ++i) text.push_back(b.data<int64_t>()[i] != 0 ? "true" : "false");
    return text;
  }
  if (!is_floating(shown.dtype())) {
    const Tensor v = mg::contiguous(mg::to(shown, DType::I64));
    for (int64_t i = 0; i < n; ++i) text.push_back(std::to_string(v.data<int64_t>()[i]));
    return text;
  }
  const Tensor values = mg::contiguous(mg::to(shown, DType::F64));
  const double* p = values.data<double>();
  double max_abs = 0.0, min_abs = INFINITY;
  bool all_whole = true;
  for (int64_t i = 0; i < n; ++i) {
    if (!std::isfinite(p[i])) continue;
    const double a = std::fabs(p[i]);
    max_abs = std::max(max_abs, a);
    if (a > 0) min_abs = std::min(min_abs, a);
    all_whole = all_whole && p[i] == std::floor(p[i]);
  }
  Format f;
  f.scientific = max_abs >= 1e8 || (min_abs < 1e-4 && min_abs != INFINITY) ||
                 (max_abs / (min_abs == INFINITY ? 1 : min_abs) > 1e6 && !all_whole);
  for (int64_t i = 0; i < n; ++i) text.push_back(format_float(p[i], f));
  return text;
}

}  // namespace

std::string Tensor::str() const {
  if (!defined()) return "tensor(undefined)";
  NoGradGuard no_grad;
  std::vector<bool> cut;
  // Cut on the tensor's own device, then copied: a summarised CUDA tensor moves only what is shown.
  const Tensor shown = mg::to(shown_part(*this, numel() > kSummarizeAbove, cut), Device::cpu());
  const std::vector<std::string> text = format_elements(shown);
  int width = 1;
  for (const std::string& t : text) width = std::max<int>(width, int(t.size()));
  std::ostringstream os;
  os << "tensor(";
  Printer(shown.shape(), cut, text, width).print(os, 0, 0, 7);
  os << ", shape=" << shape_str(shape()) << ", dtype=" << dtype_name(dtype()) << ", device=" << device().str();
  if (requires_grad()) {
    if (is_leaf()) {
      os << ", requires_grad=true";
    } else {
      os << ", grad_fn=" << grad_fn()->name();
    }
  }
  os << ')';
  return os.str();
}

std::ostream& operator<<(std::ostream& os, const Tensor& t) { return os << t.str(); }

}  // namespace mg
