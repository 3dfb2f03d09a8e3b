// CPU kernels of the elementwise ops: the shared functors (ops/functors.h) run by the strided
// loops (ops/cpu/loops.h). f16/bf16 load into f32, compute, and round once on store.
#include <algorithm>

#include "mixgrad/ops/cpu/loops.h"
#include "mixgrad/ops/functor_from_attrs.h"
#include "mixgrad/ops/kernel_registry.h"
#include "mixgrad/ops/register.h"

namespace mg::cpu {
namespace {

template <typename T, typename F>
void unary_kernel(const Tensors& in, Tensors& out, const OpAttrs& attrs) {
  unary_loop<T, T>(in[0], out[0], functor_from_attrs<F>(attrs));
}

template <typename T>
void gelu_kernel(const Tensors& in, Tensors& out, const OpAttrs& attrs) {
  if (attrs.mode == 0) {
    unary_loop<T, T>(in[0], out[0], fn::GeluErf{});
  } else {
    unary_loop<T, T>(in[0], out[0], fn::GeluTanh{});
  }
}

// out[i] = f(a[i], b[i]) for dense operands of one shape, in opmath, with f called from one
// place: binary_loop's several call sites make g++ keep a large functor (GELU's backward) out of
// line, which leaves the loop scalar; here it is inlined and the loop vectorizes (the same values).
// False when the operands are not all dense and of the output's shape.
template <typename T, typename F>
bool dense_binary(const Tensor& a, const Tensor& b, const Tensor& out, F f) {
  if (a.shape() != out.shape() || b.shape() != out.shape() || !a.is_contiguous() || !b.is_contiguous() ||
      !out.is_contiguous()) {
    return false;
  }
  const T* x = a.data<T>();  // [numel]
  const T* y = b.data<T>();  // [numel]
  T* o = out.data<T>();      // [numel]
  parallel_for(0, out.numel(), kDefaultGrain, [&](int64_t begin, int64_t end) {
    if constexpr (kIsLowp<T>) {
      float bx[kLowpBlock], by[kLowpBlock], bo[kLowpBlock];
      for (int64_t s = begin; s < end; s += kLowpBlock) {
        const int64_t m = std::min(kLowpBlock, end - s);
        load_f32(x + s, bx, m);
        load_f32(y + s, by, m);
        for (int64_t i = 0; i < m; ++i) bo[i] = f(bx[i], by[i]);
        store_f32(bo, o + s, m);
      }
    } else {
      for (int64_t i = begin; i < end; ++i) o[i] = f(x[i], y[i]);
    }
  });
  return true;
}

// (grad, x) -> grad * f'(x) of an activation, computed in opmath and rounded once: dense
// operands run the vectorised loop, others the strided one (the same values).
template <typename T, typename F>
void activation_backward(const Tensors& in, Tensors& out, F f) {
  if (!dense_binary<T>(in[0], in[1], out[0], f)) binary_loop<T, T>(in[0], in[1], out[0], f);
}
// The table's MG_ACTIVATION_BACKWARD ops.
template <typename T, typename F>
void activation_backward_kernel(const Tensors& in, Tensors& out, const OpAttrs& attrs) {
  activation_backward<T>(in, out, functor_from_attrs<F>(attrs));
}

// (grad, x) -> grad * gelu'(x) in the form attrs.mode names.
template <typename T>
void gelu_backward_kernel(const Tensors& in, Tensors& out, const OpAttrs& attrs) {
  if (attrs.mode == 0) {
    activation_backward<T>(in, out, fn::GeluErfBackward{});
  } else {
    activation_backward<T>(in, out, fn::GeluTanhBackward{});
  }
}

template <typename T, typename F>
void binary_kernel(const Tensors& in, Tensors& out, const OpAttrs& attrs) {
  binary_loop<T, T>(in[0], in[1], out[0], functor_from_attrs<F>(attrs));
}

template <typename T, typename F>
void compare_kernel(const Tensors& in, Tensors& out, const OpAttrs&) {
  binary_loop<bool, T>(in[0], in[1], out[0], F{});
}

// An unsigned integer of N bytes that may alias any type: where() copies values as bits.
template <std::size_t N> struct WhereBitsOf;
template <> struct WhereBitsOf<1> { typedef uint8_t __attribute__((may_alias)) type; };
template <> struct WhereBitsOf<2> { typedef uint16_t __attribute__((may_alias)) type; };
template <> struct WhereBitsOf<4> { typedef uint32_t __attribute__((may_alias)) type; };
template <> struct WhereBitsOf<8> { typedef uint64_t __attribute__((may_alias)) type; };
template <std::size_t N> using WhereBits = typename WhereBitsOf<N>::type;

// Whether g, y and o hold their elements densely in one and the same order (all contiguous, or
// all channels-last with equal strides), so a kernel may run over the flat memory.
bool same_dense_layout(const Tensor& g, const Tensor& y, const Tensor& o) {
  if (g.shape() != o.shape() || y.shape() != o.shape() || g.strides() != o.strides() || y.strides() != o.strides()) {
    return false;
  }
  return o.is_contiguous() || (o.dim() == 4 && o.is_contiguous(MemoryFormat::ChannelsLast));
}

// (grad, y) -> 0 where y <= 0, else grad (a NaN y passes it, as PyTorch's). Dense operands
// (contiguous or channels-last) run over flat memory: f16/bf16 select on the bits — "not y <= 0"
// is "positive (bits - 1 < the bits of +inf) or NaN (magnitude above +inf's)" — and copy g as bits, a 16-bit integer loop that g++ vectorizes (a
// round trip through f32 measured 2.5x slower than gt + where on bf16 [128,64,7,7]); f32/f64 run
// the functor. Other layouts take the strided loop, which is exact too.
template <typename T>
void relu_backward_kernel(const Tensors& in, Tensors& out, const OpAttrs&) {
  const Tensor &g = in[0], &y = in[1], &o = out[0];
  if (!same_dense_layout(g, y, o)) {
    binary_loop<T, T>(g, y, o, fn::ReluBackward{});
    return;
  }
  if constexpr (kIsLowp<T>) {
    constexpr uint16_t kInfBits = std::is_same_v<T, BFloat16> ? 0x7f80 : 0x7c00;
    constexpr uint16_t kMagnitude = 0x7fff;
    using Bits = WhereBits<2>;
    const Bits* gp = static_cast<const Bits*>(g.data_ptr());  // [numel] in memory order
    const Bits* yp = static_cast<const Bits*>(y.data_ptr());  // [numel]
    Bits* op = static_cast<Bits*>(o.data_ptr());              // [numel]
    parallel_for(0, o.numel(), kDefaultGrain, [gp, yp, op](int64_t begin, int64_t end) {
      // local pointers and both loads unconditional: otherwise the may_alias stores make g++
      // reload the captured pointers every element and keep a branch (a scalar loop)
      const Bits* gb = gp;
      const Bits* yb = yp;
      Bits* ob = op;
      for (int64_t i = begin; i < end; ++i) {
        const Bits yv = yb[i], gv = gb[i];
        ob[i] = (uint16_t(yv - 1) < kInfBits || uint16_t(yv & kMagnitude) > kInfBits) ? gv : Bits(0);
      }
    });
  } else {
    const T* gp = g.data<T>();  // [numel] in memory order
    const T* yp = y.data<T>();  // [numel]
    T* op = o.data<T>();        // [numel]
    parallel_for(0, o.numel(), kDefaultGrain, [gp, yp, op](int64_t begin, int64_t end) {
      const fn::ReluBackward f;
      for (int64_t i = begin; i < end; ++i) op[i] = f(gp[i], yp[i]);
    });
  }
}

template <typename T>
void where_kernel(const Tensors& in, Tensors& out, const OpAttrs&) {
  const Tensor& o = out[0];
  const auto plan = make_elementwise_plan<4>(o.shape(),
                                 {o.strides(), broadcast_strides(in[0], o.shape()),
                                  broadcast_strides(in[1], o.shape()), broadcast_strides(in[2], o.shape())},
                                 {int64_t(sizeof(T)), 1, int64_t(sizeof(T)), int64_t(sizeof(T))});
  run_plan<4>(plan,
              {static_cast<char*>(o.data_ptr()), static_cast<char*>(in[0].data_ptr()),
               static_cast<char*>(in[1].data_ptr()), static_cast<char*>(in[2].data_ptr())},
              [](const std::array<char*, 4>& p, int64_t n, const std::array<int64_t, 4>& s) {
                constexpr int64_t es = sizeof(T);
                if (s[0] == es && s[1] == 1 && (s[2] == es || s[2] == 0) && (s[3] == es || s[3] == 0)) {
                  // Dense output and condition, each value dense or a scalar (relu's backward:
                  // where(y > 0, g, 0)): the values' bits are selected by the condition's byte,
                  // which gcc vectorizes (it does not vectorize loads of bool, nor of Half/BFloat16).
                  using Bits = WhereBits<sizeof(T)>;
                  Bits* o = reinterpret_cast<Bits*>(p[0]);
                  const uint8_t* c = reinterpret_cast<const uint8_t*>(p[1]);
                  const Bits* a = reinterpret_cast<const Bits*>(p[2]);
                  const Bits* b = reinterpret_cast<const Bits*>(p[3]);
                  auto select = [&]<int64_t kSa, int64_t kSb>() {
                    for (int64_t i = 0; i < n; ++i) {
                      const Bits av = a[i * kSa], bv = b[i * kSb];
                      o[i] = c[i] != 0 ? av : bv;
                    }
                  };
                  if (s[2] == es && s[3] == es) {
                    select.template operator()<1, 1>();
                  } else if (s[2] == es) {
                    select.template operator()<1, 0>();
                  } else if (s[3] == es) {
                    select.template operator()<0, 1>();
                  } else {
                    select.template operator()<0, 0>();
                  }
                  return;
                }
                for (int64_t i = 0; i < n; ++i) {
                  const bool c = *reinterpret_cast<const bool*>(p[1] + i * s[1]);
                  *reinterpret_cast<T*>(p[0] + i * s[0]) =
                      *reinterpret_cast<const T*>(p[c ? 2 : 3] + i * s[c ? 2 : 3]);
                }
              });
}

// The kernel templates by name, for the registration helpers: K::fn<T> is the kernel for dtype T
// (as cuda/kernels/register_helpers.h on the GPU).
template <typename F> struct UnaryK { template <typename T> static constexpr KernelFn fn = unary_kernel<T, F>; };
template <typename F> struct BinaryK { template <typename T> static constexpr KernelFn fn = binary_kernel<T, F>; };
template <typename F> struct CompareK { template <typename T> static constexpr KernelFn fn = compare_kernel<T, F>; };
template <typename F> struct ActivationBackwardK {
  template <typename T> static constexpr KernelFn fn = activation_backward_kernel<T, F>;
};
struct GeluK { template <typename T> static constexpr KernelFn fn = gelu_kernel<T>; };
struct GeluBackwardK { template <typename T> static constexpr KernelFn fn = gelu_backward_kernel<T>; };
struct ReluBackwardK { template <typename T> static constexpr KernelFn fn = relu_backward_kernel<T>; };

// K's kernels for f64, f32, f16 and bf16 ("Floating").
template <typename K>
void reg_floating(OpId op) {
  register_kernel(op, DeviceType::CPU, DType::F64, K::template fn<double>);
  register_kernel(op, DeviceType::CPU, DType::F32, K::template fn<float>);
  register_kernel(op, DeviceType::CPU, DType::F16, K::template fn<Half>);
  register_kernel(op, DeviceType::CPU, DType::BF16, K::template fn<BFloat16>);
}
// The table's dtype families (ops/elementwise_ops.def).
template <typename F>
void reg_unary_Floating(OpId op) {
  reg_floating<UnaryK<F>>(op);
}
// K's kernels for i64, i32 and u8 ("Integer": the shifts).
template <typename K>
void reg_integer(OpId op) {
  register_kernel(op, DeviceType::CPU, DType::I64, K::template fn<int64_t>);
  register_kernel(op, DeviceType::CPU, DType::I32, K::template fn<int32_t>);
  register_kernel(op, DeviceType::CPU, DType::U8, K::template fn<uint8_t>);
}
// Floating and integer dtypes (neg, abs, sign, relu, clamp, ...); u8's neg wraps, as PyTorch's.
template <typename F>
void reg_unary_Numeric(OpId op) {
  reg_floating<UnaryK<F>>(op);
  reg_integer<UnaryK<F>>(op);
}
template <typename F>
void reg_binary_Floating(OpId op) {
  reg_floating<BinaryK<F>>(op);
}
template <typename F>
void reg_binary_Numeric(OpId op) {
  reg_floating<BinaryK<F>>(op);
  reg_integer<BinaryK<F>>(op);
}
template <typename F>
void reg_binary_Integer(OpId op) {
  reg_integer<BinaryK<F>>(op);
}
// The other bitwise ops: the integers and bool ("Bits").
template <typename F>
void reg_binary_Bits(OpId op) {
  reg_integer<BinaryK<F>>(op);
  register_kernel(op, DeviceType::CPU, DType::Bool, binary_kernel<bool, F>);
}
template <typename F>
void reg_unary_Bits(OpId op) {
  reg_integer<UnaryK<F>>(op);
  register_kernel(op, DeviceType::CPU, DType::Bool, unary_kernel<bool, F>);
}
// Every dtype, bool included.
template <typename F>
void reg_compare(OpId op) {
  reg_floating<CompareK<F>>(op);
  reg_integer<CompareK<F>>(op);
  register_kernel(op, DeviceType::CPU, DType::Bool, compare_kernel<bool, F>);
}

template <typename T>
void fill_kernel(const Tensors&, Tensors& out, const OpAttrs& attrs) {
  // Writes the output only (possibly strided, when run in place by fill_).
  const T v = static_cast<T>(static_cast<opmath_t<T>>(attrs.alpha));
  const Tensor& o = out[0];
  const auto plan = make_elementwise_plan<1>(o.shape(), {o.strides()}, {int64_t(sizeof(T))});
  run_plan<1>(plan, {static_cast<char*>(o.data_ptr())},
              [&](const std::array<char*, 1>& p, int64_t n, const std::array<int64_t, 1>& s) {
                for (int64_t i = 0; i < n; ++i) *reinterpret_cast<T*>(p[0] + i * s[0]) = v;
              });
}

}  // namespace

void register_elementwise_kernels() {
#define MG_UNARY(op, F, dtypes) reg_unary_##dtypes<fn::F>(OpId::op);
#define MG_BINARY(op, F, dtypes) reg_binary_##dtypes<fn::F>(OpId::op);
#define MG_COMPARE(op, F) reg_compare<fn::F>(OpId::op);
#include "mixgrad/ops/elementwise_ops.def"
#undef MG_UNARY
#undef MG_BINARY
#undef MG_COMPARE
#define MG_ACTIVATION_BACKWARD(op, F) reg_floating<ActivationBackwardK<fn::F>>(OpId::op);
#include "mixgrad/ops/activation_backward_ops.def"
#undef MG_ACTIVATION_BACKWARD
  // bool + bool and bool * bool: logical or / and, as PyTorch (C++'s bool conversion of 2 is true).
  register_kernel(OpId::add, DeviceType::CPU, DType::Bool, binary_kernel<bool, fn::Add>);
  register_kernel(OpId::mul, DeviceType::CPU, DType::Bool, binary_kernel<bool, fn::Mul>);
  reg_floating<GeluK>(OpId::gelu);
  reg_floating<GeluBackwardK>(OpId::gelu_backward);
  reg_floating<ReluBackwardK>(OpId::relu_backward);

#define MG_REG_WHERE_FILL(E, n, T)                                        \
  register_kernel(OpId::where, DeviceType::CPU, DType::E, where_kernel<T>); \
  register_kernel(OpId::fill, DeviceType::CPU, DType::E, fill_kernel<T>);
  MG_FORALL_DTYPES(MG_REG_WHERE_FILL)
#undef MG_REG_WHERE_FILL
}

}  // namespace mg::cpu
