// SyntheticImages: an ImageNet-shaped stand-in (no ImageNet on this machine) for benchmarking and
// smoke-testing image models: [C, S, S] f32 images of K classes (3 x 224 x 224 and 1000 by default)
// made on the fly, deterministic in (seed, example index), and learnable: the label is a fixed
// function of the image. Decision: each class k owns a pattern, a plane wave product
// sin(2π fy_k y / S + φy) · sin(2π fx_k x / S + φx) with frequencies fy_k, fx_k in [1, 8) cycles
// per image and a colour (one amplitude a_k[c] in [-1, 1) per channel); an example draws its label
// and its look (phases φy, φx and a contrast in [0.5, 1.5)) from random_words(seed, 0, index,
// kSyntheticExampleStream):
//     image[c][y][x] = contrast · a_k[c] · sin(2π fy_k (y + ½) / S + φy) · sin(2π fx_k (x + ½) / S + φx)
// so the class is read off the frequencies and the colour ratios, whatever the phase and contrast.
// No augmentation: the epoch does not change an example.
//
//   auto train = std::make_shared<mg::data::SyntheticImages>(mg::data::SyntheticImagesOptions{});
//   mg::data::SyntheticImages test({.size = 10000, .first_index = train->size()});  // disjoint examples
//   mg::data::Batch b = train->get_batch({0, 1}, {});  // "input" f32 [2, 3, 224, 224], "target" i64 [2]
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "mixgrad/data/dataset.h"

namespace mg::data {

inline constexpr int64_t kImageNetTrainSize = 1281167;  // ImageNet-1k's training images, the default size

struct SyntheticImagesOptions {
  int64_t size = kImageNetTrainSize;  // examples
  int64_t num_classes = 1000;
  int64_t channels = 3;
  int64_t image_size = 224;  // S: images are S x S
  uint64_t seed = 0;         // the class patterns and every example
  int64_t first_index = 0;   // example i is example first_index + i of the seed's stream (a test split
                             // with first_index = the train size shares the classes, not the examples)
};

class SyntheticImages : public Dataset {
 public:
  // Validates the options (positive sizes, at most 2^31 classes, first_index + size < 2^48) and
  // draws the class patterns; throws mg::Error naming the bad field.
  explicit SyntheticImages(SyntheticImagesOptions options = {});

  int64_t size() const override { return options_.size; }
  // "input": f32 [B, C, S, S]; "target": i64 [B] in [0, num_classes). Throws IndexError for an
  // index outside [0, size()).
  Batch get_batch(const std::vector<int64_t>& indices, const BatchContext& ctx) const override;
  std::string name() const override { return "SyntheticImages"; }

  const SyntheticImagesOptions& options() const { return options_; }
  // The label of example i (what get_batch puts in "target").
  int64_t label(int64_t i) const;

 private:
  struct ClassPattern {
    float fy, fx;               // cycles per image along y and x
    std::vector<float> colour;  // [C] amplitude per channel
  };
  SyntheticImagesOptions options_;
  std::vector<ClassPattern> classes_;  // [K]
};

}  // namespace mg::data
