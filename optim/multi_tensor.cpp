#include "mixgrad/optim/multi_tensor.h"

#include <algorithm>

#include "mixgrad/core/parallel.h"

namespace mg::optim {

std::vector<TensorChunk> make_chunks(const std::vector<TensorSlot>& slots) {
  std::vector<TensorChunk> chunks;
  for (std::size_t t = 0; t < slots.size(); ++t) {
    for (int64_t b = 0; b < slots[t].numel; b += kChunkSize) {
      chunks.push_back({int64_t(t), b, std::min(b + kChunkSize, slots[t].numel)});
    }
  }
  return chunks;
}

namespace {
// Runs body over chunks [first, last), in parallel when they hold more than kDefaultGrain elements.
void run_chunks(const std::vector<TensorChunk>& chunks, int64_t first, int64_t last, const ChunkBody& body) {
  int64_t elements = 0;
  for (int64_t c = first; c < last; ++c) elements += chunks[c].end - chunks[c].begin;
  const int64_t grain = elements <= kDefaultGrain ? last - first : 1;
  parallel_for(first, last, grain, [&](int64_t b, int64_t e) {
    for (int64_t c = b; c < e; ++c) body(c, chunks[c]);
  });
}
}  // namespace

std::vector<TensorChunk> for_each_chunk(const std::vector<TensorSlot>& slots, bool fused,
                                        const ChunkBody& body) {
  std::vector<TensorChunk> chunks = make_chunks(slots);
  const int64_t n = int64_t(chunks.size());
  if (fused) {
    run_chunks(chunks, 0, n, body);
    return chunks;
  }
  // Per parameter: the chunks of one tensor are consecutive.
  for (int64_t first = 0; first < n;) {
    int64_t last = first;
    while (last < n && chunks[last].tensor == chunks[first].tensor) ++last;
    run_chunks(chunks, first, last, body);
    first = last;
  }
  return chunks;
}

}  // namespace mg::optim
