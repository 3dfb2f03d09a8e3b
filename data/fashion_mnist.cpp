// Fashion-MNIST dataset (fashion_mnist.h): locating, validating and batching the IDX files.
#include "mixgrad/data/fashion_mnist.h"

#include <cstdlib>
#include <filesystem>

#include "mixgrad/data/idx.h"

namespace mg::data {

namespace {

constexpr int64_t kPixels = kFashionMnistSide * kFashionMnistSide;  // 784

}  // namespace

std::string fashion_mnist_file(const std::string& dir, const std::string& stem) {
  std::string folder = dir, where = "(FashionMnistOptions::dir)";
  if (folder.empty()) {
    const char* env = std::getenv("MG_FASHION_MNIST_DIR");
    if (env && *env) {
      folder = env;
      where = "(from MG_FASHION_MNIST_DIR)";
    } else {
      folder = kFashionMnistDefaultDir;
      where = "(the default location)";
    }
  }
  for (const std::string& name : {stem + ".gz", stem}) {
    const std::filesystem::path p = std::filesystem::path(folder) / name;
    std::error_code ec;
    if (std::filesystem::is_regular_file(p, ec)) return p.string();
  }
  MG_THROW(Error, "FashionMnist: cannot find ", stem, ".gz (or ", stem, ") in ", folder, " ", where,
           "\n  hint: install Debian's package with `sudo apt-get install dataset-fashion-mnist` "
           "(or run scripts/setup as root), or point FashionMnistOptions::dir or "
           "MG_FASHION_MNIST_DIR at a folder holding {train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz]");
}

const std::array<std::string, 10>& FashionMnist::class_names() {
  static const std::array<std::string, 10> names = {"T-shirt/top", "Trouser", "Pullover", "Dress",
                                                    "Coat",        "Sandal",  "Shirt",    "Sneaker",
                                                    "Bag",         "Ankle boot"};
  return names;
}

FashionMnist::FashionMnist(FashionMnistOptions options) : options_(std::move(options)) {
  MG_CHECK(options_.crop_padding >= 0 && options_.crop_padding < kFashionMnistSide, Error,
           "FashionMnist: crop_padding must be in [0, 27], got ", options_.crop_padding);
  MG_CHECK(options_.flip_probability >= 0.0 && options_.flip_probability <= 1.0, Error,
           "FashionMnist: flip_probability must be in [0, 1], got ", options_.flip_probability);
  const std::string split = options_.train ? "train" : "t10k";
  const int64_t expected = options_.train ? 60000 : 10000;
  const std::string images_path = fashion_mnist_file(options_.dir, split + "-images-idx3-ubyte");
  const std::string labels_path = fashion_mnist_file(options_.dir, split + "-labels-idx1-ubyte");
  dir_ = std::filesystem::path(images_path).parent_path().string();

  IdxArray images = read_idx(images_path, 3);
  IdxArray labels = read_idx(labels_path, 1);
  const std::vector<int64_t> want_images = {expected, kFashionMnistSide, kFashionMnistSide};
  MG_CHECK(images.dims == want_images, Error, "FashionMnist: ", images_path, " holds images ",
           images.dims, " but the ", split, " split has ", want_images);
  MG_CHECK(labels.dims[0] == expected, Error, "FashionMnist: ", labels_path, " holds ",
           labels.dims[0], " labels but the ", split, " split has ", expected, " (and ",
           images.dims[0], " images)");
  for (std::size_t i = 0; i < labels.data.size(); ++i) {
    MG_CHECK(labels.data[i] < kFashionMnistClasses, Error, "FashionMnist: ", labels_path,
             ": label ", int(labels.data[i]), " of example ", i, " is not a class in 0..9");
  }
  images_ = std::move(images.data);
  labels_ = std::move(labels.data);

  const double mean = options_.normalize ? kFashionMnistMean : 0.0;
  const double std = options_.normalize ? kFashionMnistStd : 1.0;
  for (int v = 0; v < 256; ++v) lut_[std::size_t(v)] = float((v / 255.0 - mean) / std);
}

Batch FashionMnist::get_batch(const std::vector<int64_t>& indices, const BatchContext& ctx) const {
  const int64_t B = int64_t(indices.size());
  const int64_t n = size();
  Tensor input = empty({B, 1, kFashionMnistSide, kFashionMnistSide});  // [B, 1, 28, 28]
  Tensor target = empty({B}, {.dtype = DType::I64});                   // [B]
  float* x = input.data<float>();
  int64_t* y = target.data<int64_t>();
  const int p = options_.augment ? options_.crop_padding : 0;
  const float zero = lut_[0];  // the padding of the crop is black, normalised like any pixel
  for (int64_t k = 0; k < B; ++k) {
    const int64_t i = indices[std::size_t(k)];
    MG_CHECK(i >= 0 && i < n, IndexError, "FashionMnist: index ", i, " out of range for ", n,
             " examples");
    const uint8_t* src = images_.data() + i * kPixels;  // [28, 28]
    float* dst = x + k * kPixels;                        // [28, 28]
    y[k] = labels_[std::size_t(i)];
    if (!options_.augment) {
      for (int64_t j = 0; j < kPixels; ++j) dst[j] = lut_[src[j]];
      continue;
    }
    // Crop a 28x28 window at offset (dy, dx) in [-p, p]^2 of the zero-padded image, then flip:
    // out[r][c] = image[r + dy][(flip ? 27 - c : c) + dx], 0 outside the image.
    const Philox4 w = example_words(ctx, std::size_t(k), i, kAugmentStream);
    const int dy = int(random_below(w.v[0], uint32_t(2 * p + 1))) - p;
    const int dx = int(random_below(w.v[1], uint32_t(2 * p + 1))) - p;
    const bool flip = philox_uniform(w.v[2]) < options_.flip_probability;
    constexpr int S = int(kFashionMnistSide);
    for (int r = 0; r < S; ++r) {
      float* row = dst + r * S;
      const int sr = r + dy;
      if (sr < 0 || sr >= S) {
        for (int c = 0; c < S; ++c) row[c] = zero;
        continue;
      }
      const uint8_t* srow = src + sr * S;
      for (int c = 0; c < S; ++c) {
        const int sc = (flip ? S - 1 - c : c) + dx;
        row[c] = (sc >= 0 && sc < S) ? lut_[srow[sc]] : zero;
      }
    }
  }
  Batch batch;
  batch.add("input", std::move(input));
  batch.add("target", std::move(target));
  return batch;
}

}  // namespace mg::data
