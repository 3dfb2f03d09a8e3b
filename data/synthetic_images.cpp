// SyntheticImages (data/synthetic_images.h): class patterns drawn once, examples rendered per batch
// as an outer product of a row wave and a column wave (2 S sines per example, then C S² products).
#include "mixgrad/data/synthetic_images.h"

#include <cmath>
#include <numbers>

#include "mixgrad/core/error.h"
#include "mixgrad/core/philox.h"

namespace mg::data {
namespace {

// What example j draws: its label and its look.
struct ExampleDraw {
  int64_t label;
  float phase_y, phase_x, contrast;
};

ExampleDraw draw_example(uint64_t seed, int64_t j, int64_t classes) {
  const Philox4 w = random_words(seed, 0, j, kSyntheticExampleStream);
  constexpr float kTwoPi = 2.0f * std::numbers::pi_v<float>;
  return {int64_t(random_below(w.v[0], uint32_t(classes))), kTwoPi * philox_uniform(w.v[1]),
          kTwoPi * philox_uniform(w.v[2]), 0.5f + philox_uniform(w.v[3])};
}

}  // namespace

SyntheticImages::SyntheticImages(SyntheticImagesOptions options) : options_(options) {
  const SyntheticImagesOptions& o = options_;
  MG_CHECK(o.size >= 1, Error, "SyntheticImages: size must be >= 1, got ", o.size);
  MG_CHECK(o.num_classes >= 1 && o.num_classes <= (int64_t(1) << 31), Error,
           "SyntheticImages: num_classes must be in [1, 2^31], got ", o.num_classes);
  MG_CHECK(o.channels >= 1, Error, "SyntheticImages: channels must be >= 1, got ", o.channels);
  MG_CHECK(o.image_size >= 1, Error, "SyntheticImages: image_size must be >= 1, got ", o.image_size);
  // (first_index checked before the sum, which could overflow int64 for huge values)
  MG_CHECK(o.first_index >= 0 && o.first_index < (int64_t(1) << 48) && o.size < (int64_t(1) << 48) - o.first_index, Error,
           "SyntheticImages: expected 0 <= first_index and first_index + size < 2^48, got first_index ",
           o.first_index, ", size ", o.size);
  classes_.resize(std::size_t(o.num_classes));
  for (int64_t k = 0; k < o.num_classes; ++k) {
    ClassPattern& p = classes_[std::size_t(k)];
    const Philox4 f = random_words(o.seed, 0, k, kSyntheticClassStream, 0);
    p.fy = 1.0f + 7.0f * philox_uniform(f.v[0]);
    p.fx = 1.0f + 7.0f * philox_uniform(f.v[1]);
    p.colour.resize(std::size_t(o.channels));
    for (int64_t c = 0; c < o.channels; ++c) {  // four amplitudes per block of random words
      const Philox4 a = random_words(o.seed, 0, k, kSyntheticClassStream, uint32_t(1 + c / 4));
      p.colour[std::size_t(c)] = 2.0f * philox_uniform(a.v[c % 4]) - 1.0f;
    }
  }
}

int64_t SyntheticImages::label(int64_t i) const {
  MG_CHECK(i >= 0 && i < size(), IndexError, "SyntheticImages: index ", i, " out of range for ", size(),
           " examples");
  return draw_example(options_.seed, options_.first_index + i, options_.num_classes).label;
}

Batch SyntheticImages::get_batch(const std::vector<int64_t>& indices, const BatchContext& /*ctx*/) const {
  const int64_t B = int64_t(indices.size()), C = options_.channels, S = options_.image_size;
  Tensor input = empty({B, C, S, S});     // [B, C, S, S]
  Tensor target = empty({B}, {.dtype = DType::I64});  // [B]
  float* x = input.data<float>();
  int64_t* y = target.data<int64_t>();
  std::vector<float> wy(static_cast<std::size_t>(S)), wx(static_cast<std::size_t>(S));  // the row and column waves
  constexpr float kTwoPi = 2.0f * std::numbers::pi_v<float>;
  for (int64_t b = 0; b < B; ++b) {
    const int64_t i = indices[std::size_t(b)];
    MG_CHECK(i >= 0 && i < size(), IndexError, "SyntheticImages: index ", i, " out of range for ", size(),
             " examples");
    const ExampleDraw e = draw_example(options_.seed, options_.first_index + i, options_.num_classes);
    const ClassPattern& p = classes_[std::size_t(e.label)];
    y[b] = e.label;
    for (int64_t t = 0; t < S; ++t) {
      const float pos = (float(t) + 0.5f) / float(S);
      wy[std::size_t(t)] = e.contrast * std::sin(kTwoPi * p.fy * pos + e.phase_y);
      wx[std::size_t(t)] = std::sin(kTwoPi * p.fx * pos + e.phase_x);
    }
    float* img = x + b * C * S * S;  // [C, S, S]
    for (int64_t c = 0; c < C; ++c) {
      const float a = p.colour[std::size_t(c)];
      for (int64_t r = 0; r < S; ++r) {
        const float ar = a * wy[std::size_t(r)];
        float* row = img + (c * S + r) * S;
        for (int64_t q = 0; q < S; ++q) row[q] = ar * wx[std::size_t(q)];
      }
    }
  }
  Batch out;
  out.add("input", std::move(input));
  out.add("target", std::move(target));
  return out;
}

}  // namespace mg::data
