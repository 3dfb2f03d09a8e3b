#include "mixgrad/data/sampler.h"

#include "mixgrad/core/error.h"

namespace mg::data {

void Sampler::check_epoch(const char* where, int64_t epoch) {
  MG_CHECK(epoch >= 0 && epoch < (int64_t(1) << 32), Error, where, ": epoch must be in [0, 2^32), got ", epoch);
}

}  // namespace mg::data
