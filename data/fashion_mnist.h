// Fashion-MNIST (Zalando): 28x28 grey images of 10 clothing classes, 60,000 for training and
// 10,000 for testing, read from the gzip'ed IDX files of Debian's `dataset-fashion-mnist` package.
// The one decision a reader must know: the images stay in memory as the file's u8 bytes (47 MB
// for the training split) and get_batch converts, normalises and augments them straight into one
// f32 [B, 1, 28, 28] tensor; every augmentation decision of an example is drawn from
// example_words(ctx, position, example index, kAugmentStream) — (seed, epoch, index) and the
// example's repeat in the epoch — so it does not depend on the batch.
//
//   auto train = std::make_shared<mg::data::FashionMnist>(
//       mg::data::FashionMnistOptions{.train = true, .augment = true});
//   mg::data::Batch b = train->get_batch({0, 1}, {.seed = 1, .epoch = 0});
//   // b.at("input"): f32 [2, 1, 28, 28], b.at("target"): i64 [2] (b.at("target")[0] == 9)
//
// Files are looked up in FashionMnistOptions::dir, else $MG_FASHION_MNIST_DIR, else
// /usr/share/datasets/fashion-mnist (the package's location); <name>.gz is preferred over <name>.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "mixgrad/data/dataset.h"

namespace mg::data {

inline constexpr const char* kFashionMnistDefaultDir = "/usr/share/datasets/fashion-mnist";
inline constexpr int64_t kFashionMnistSide = 28;
inline constexpr int64_t kFashionMnistClasses = 10;
// Mean and standard deviation of the training images scaled to [0, 1] (all 60,000 x 784 pixels;
// checked by tests/datasets/test_fashion_mnist.cpp).
inline constexpr double kFashionMnistMean = 0.2860;
inline constexpr double kFashionMnistStd = 0.3530;

struct FashionMnistOptions {
  std::string dir;           // folder with the four IDX files; "" = $MG_FASHION_MNIST_DIR or default
  bool train = true;         // the 60,000 training images (train-*) or the 10,000 test images (t10k-*)
  bool normalize = true;     // input = (x / 255 - 0.2860) / 0.3530; false: x / 255 in [0, 1]
  bool augment = false;      // random crop with zero padding, then horizontal flip
  int crop_padding = 4;      // zero border for the random crop (0: no crop); 0..27
  double flip_probability = 0.5;
};

class FashionMnist : public Dataset {
 public:
  // Reads and validates the split (magic numbers, 28x28 images, 60,000 or 10,000 images and as
  // many labels, labels < 10). Throws mg::Error when the files are missing, with a hint to
  // `apt-get install dataset-fashion-mnist`.
  explicit FashionMnist(FashionMnistOptions options = {});

  int64_t size() const override { return int64_t(labels_.size()); }
  // "input": f32 [B, 1, 28, 28] (normalised, augmented when enabled); "target": i64 [B] in 0..9.
  Batch get_batch(const std::vector<int64_t>& indices, const BatchContext& ctx) const override;
  std::string name() const override { return "FashionMnist"; }

  const FashionMnistOptions& options() const { return options_; }
  // The folder the files were read from.
  const std::string& directory() const { return dir_; }
  // The raw file contents: u8 [N, 28, 28] row-major pixels and u8 [N] labels.
  const std::vector<uint8_t>& raw_images() const { return images_; }
  const std::vector<uint8_t>& raw_labels() const { return labels_; }

  // "T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag",
  // "Ankle boot".
  static const std::array<std::string, 10>& class_names();

 private:
  FashionMnistOptions options_;
  std::string dir_;
  std::vector<uint8_t> images_;  // [N, 28, 28]
  std::vector<uint8_t> labels_;  // [N]
  std::array<float, 256> lut_;   // byte -> normalised value
};

// The folder FashionMnist reads from for `dir` ("" = $MG_FASHION_MNIST_DIR, else the default);
// the file name of `stem` in it (".gz" preferred). Throws mg::Error with installation advice when
// the file is missing.
std::string fashion_mnist_file(const std::string& dir, const std::string& stem);

}  // namespace mg::data
