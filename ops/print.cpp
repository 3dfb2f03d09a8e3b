// Tensor printing in PyTorch's style: nested brackets, values right-aligned in one width, fixed
// or scientific notation chosen from the value range, and "..." beyond 1000 elements (first and
// last three entries of each dim).
#include <cmath>
#include <iomanip>
#include <sstream>

#include "mixgrad/autograd/grad_mode.h"
#include "mixgrad/autograd/node.h"
#include "mixgrad/ops/ops.h"

namespace mg {
namespace {

constexpr int64_t kSummarizeAbove = 1000;
constexpr int64_t kEdgeItems = 3;

struct Format {
  bool integral = false;
  bool is_bool = false;
  bool scientific = false;
  int width = 1;
};

std::string format_value(double v, const Format& f) {
  std::ostringstream os;
  if (f.is_bool) {
    os << (v != 0.0 ? "true" : "false");
  } else if (std::isnan(v)) {
    os << "nan";
  } else if (std::isinf(v)) {
    os << (v > 0 ? "inf" : "-inf");
  } else if (f.integral) {
    os << int64_t(v);
  } else if (f.scientific) {
    os << std::scientific << std::setprecision(4) << v;
  } else {
    os << std::fixed << std::setprecision(4) << v;
  }
  return os.str();
}

class Printer {
 public:
  Printer(const Tensor& values, const Format& f, bool summarize)
      : v_(values), data_(values.data<double>()), f_(f), summarize_(summarize) {}

  void print(std::ostringstream& os, int64_t dim, int64_t offset, int indent) const {
    if (v_.dim() == 0) {
      os << format_value(data_[0], f_);
      return;
    }
    const int64_t size = v_.shape()[dim];
    const int64_t stride = v_.strides()[dim];
    os << '[';
    for (int64_t i = 0; i < size; ++i) {
      if (summarize_ && size > 2 * kEdgeItems && i == kEdgeItems) {
        os << (dim + 1 == v_.dim() ? "..., " : "...,\n" + std::string(indent + 1, ' '));
        i = size - kEdgeItems;
      }
      if (dim + 1 == v_.dim()) {
        const std::string s = format_value(data_[offset + i * stride], f_);
        os << std::string(std::max<int>(0, f_.width - int(s.size())), ' ') << s;
        if (i + 1 < size) os << ", ";
      } else {
        print(os, dim + 1, offset + i * stride, indent + 1);
        if (i + 1 < size) os << ',' << std::string(v_.dim() - dim - 1, '\n') << std::string(indent + 1, ' ');
      }
    }
    os << ']';
  }

 private:
  const Tensor& v_;
  const double* data_;
  Format f_;
  bool summarize_;
};

}  // namespace

std::string Tensor::str() const {
  if (!defined()) return "tensor(undefined)";
  NoGradGuard no_grad;
  const Tensor values = mg::contiguous(mg::to(mg::to(*this, Device::cpu()), DType::F64));
  const double* p = values.data<double>();
  Format f;
  f.integral = !is_floating(dtype());
  f.is_bool = dtype() == DType::Bool;
  double max_abs = 0.0, min_abs = INFINITY;
  bool all_whole = true;
  for (int64_t i = 0; i < values.numel(); ++i) {
    if (!std::isfinite(p[i])) continue;
    const double a = std::fabs(p[i]);
    max_abs = std::max(max_abs, a);
    if (a > 0) min_abs = std::min(min_abs, a);
    all_whole = all_whole && p[i] == std::floor(p[i]);
  }
  f.scientific = !f.integral && (max_abs >= 1e8 || (min_abs < 1e-4 && min_abs != INFINITY) ||
                                 (max_abs / (min_abs == INFINITY ? 1 : min_abs) > 1e6 && !all_whole));
  for (int64_t i = 0; i < values.numel(); ++i) f.width = std::max<int>(f.width, int(format_value(p[i], f).size()));
  std::ostringstream os;
  os << "tensor(";
  Printer(values, f, numel() > kSummarizeAbove).print(os, 0, 0, 7);
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
