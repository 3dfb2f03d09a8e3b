// How DistributedDataParallel groups gradients into buckets: a pure function of the parameters'
// sizes and dtypes, so it is tested without processes.
// Decision (as PyTorch): parameters are taken in reverse registration order, because backward
// produces the last layers' gradients first; each dtype has its own open bucket (a bucket is one
// flat tensor, so one dtype), and a bucket closes when the next parameter would take it past
// `cap_bytes` (a parameter larger than the cap gets a bucket of its own). Buckets are numbered in
// the order they were opened, which is the order they are all-reduced in on every rank.
// DistributedDataParallel plans once in that order and, after its first synchronised backward,
// once more in the order the gradients actually arrived (`order`), as PyTorch rebuilds its buckets.
//
//   BucketPlan plan = plan_buckets({{.numel = 100, .dtype = DType::F32}, ...}, 25 << 20, std::nullopt);
#pragma once
#include <cstdint>
#include <optional>
#include <vector>

#include "mixgrad/core/dtype.h"

namespace mg::distributed {

struct BucketParam {
  int64_t numel = 0;
  DType dtype = DType::F32;  // the parameter's (and its gradient's) dtype
};

struct BucketLayout {
  DType grad_dtype = DType::F32;  // dtype of every gradient in the bucket
  DType comm_dtype = DType::F32;  // dtype of the flat tensor that is all-reduced
  std::vector<int> params;        // indices into the parameter list, in bucket order
  std::vector<int64_t> offsets;   // element offset of each of them in the flat tensor
  int64_t numel = 0;              // elements of the flat tensor
};

struct BucketPlan {
  std::vector<BucketLayout> buckets;
  std::vector<int> bucket_of;     // per parameter: its bucket
  std::vector<int> slot_of;       // per parameter: its position in that bucket's params
};

// cap_bytes counts bytes of the communicated dtype: reduce_dtype when given (f32 for "reduce in
// f32"), else each gradient's own. cap_bytes must be positive. `order`: the parameter indices in
// the order to bucket them (each index once); empty: reverse registration order.
BucketPlan plan_buckets(const std::vector<BucketParam>& params, int64_t cap_bytes, std::optional<DType> reduce_dtype,
                        const std::vector<int>& order = {});

}  // namespace mg::distributed
