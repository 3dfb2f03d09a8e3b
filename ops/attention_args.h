// The attributes of the fused attention ops (`attention`, `attention_backward`, ops/op_list.def),
// decoded in one place for the op rules (ops/attention_fused.cpp) and the kernels
// (ops/cpu/attention_kernels.cpp):
//   attrs.alpha = scale, attrs.beta = dropout p, attrs.mode = the kAttention* bits,
//   attrs.ints = {seed, offset} of the dropout's Philox stream (when p > 0), and on CUDA during a
//   graph capture a third: the address of the device {seed, base offset} the offset adds to
//   (core/graph_rng.h, as the dropout op's).
//
//   const mg::AttentionArgs a = mg::AttentionArgs::from(attrs);
#pragma once
#include <cstdint>

#include "mixgrad/ops/op.h"

namespace mg {

inline constexpr int64_t kAttentionMask = 1;      // a mask is the last input
inline constexpr int64_t kAttentionBoolMask = 2;  // ... and it is bool (true = attend); else added
inline constexpr int64_t kAttentionCausal = 4;    // key j > query i is masked

struct AttentionArgs {
  double scale = 1.0;
  double dropout_p = 0.0;
  bool mask = false;
  bool bool_mask = false;
  bool causal = false;
  uint64_t seed = 0, offset = 0;  // the Philox stream of the dropout (element e: word e)
  int64_t device_base = 0;        // a CUDA graph capture's device {seed, base}; 0: none

  static AttentionArgs from(const OpAttrs& a) {
    AttentionArgs r;
    r.scale = a.alpha;
    r.dropout_p = a.beta;
    r.mask = (a.mode & kAttentionMask) != 0;
    r.bool_mask = (a.mode & kAttentionBoolMask) != 0;
    r.causal = (a.mode & kAttentionCausal) != 0;
    if (a.ints.size() >= 2) {
      r.seed = uint64_t(a.ints[0]);
      r.offset = uint64_t(a.ints[1]);
    }
    if (a.ints.size() >= 3) r.device_base = a.ints[2];
    return r;
  }
  OpAttrs attrs() const {
    OpAttrs a;
    a.alpha = scale;
    a.beta = dropout_p;
    a.mode = (mask ? kAttentionMask : 0) | (bool_mask ? kAttentionBoolMask : 0) | (causal ? kAttentionCausal : 0);
    if (dropout_p > 0.0) a.ints = {int64_t(seed), int64_t(offset)};
    if (dropout_p > 0.0 && device_base != 0) a.ints.push_back(device_base);
    return a;
  }
};

}  // namespace mg
