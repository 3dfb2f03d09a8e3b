// Fashion-MNIST: the real files of Debian's dataset-fashion-mnist (sizes, class balance, the first
// label against the raw bytes, mean/std of the normalised training set), batches, augmentation
// (reproducible, keyed by example, actually changing images, the documented crop/flip formula),
// errors for missing or inconsistent files, and a DataLoader resuming an augmented epoch.
// The real dataset is loaded once per process.
#include <catch2/catch.hpp>

#include <zlib.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <iostream>
#include <set>

#include "data/fashion_mnist.h"
#include "data/idx.h"
#include "data/loader.h"
#include "datasets/datasets_fixture.h"
#include "test_util.h"

using mg::data::FashionMnist;
using mg::data::FashionMnistOptions;
using mg::test::datasets::TempDir;

namespace {

constexpr int64_t kPix = 784;

const FashionMnist& train_set() {
  static const FashionMnist ds({.train = true});
  return ds;
}
const FashionMnist& test_set() {
  static const FashionMnist ds({.train = false});
  return ds;
}
std::shared_ptr<const FashionMnist> augmented_test_set() {
  static const auto ds = std::make_shared<const FashionMnist>(
      FashionMnistOptions{.train = false, .augment = true, .crop_padding = 4});
  return ds;
}

// The first `n` bytes of a gzip'ed file, decompressed with zlib directly (not through read_idx).
std::vector<uint8_t> raw_prefix(const std::string& path, unsigned n) {
  gzFile f = gzopen(path.c_str(), "rb");
  REQUIRE(f != nullptr);
  std::vector<uint8_t> out(n);
  const int got = gzread(f, out.data(), n);
  gzclose(f);
  REQUIRE(got == int(n));
  return out;
}

std::vector<float> floats(const mg::Tensor& t) {
  const float* p = t.data<float>();
  return std::vector<float>(p, p + t.numel());
}

float normalised(uint8_t v) {
  return float((v / 255.0 - mg::data::kFashionMnistMean) / mg::data::kFashionMnistStd);
}

}  // namespace

TEST_CASE("fashion_mnist: the installed splits have 60,000 and 10,000 balanced examples",
          "[data][fashion]") {
  const FashionMnist& train = train_set();
  const FashionMnist& test = test_set();
  CHECK(train.size() == 60000);
  CHECK(test.size() == 10000);
  CHECK(train.raw_images().size() == 60000u * 784u);
  CHECK(test.raw_images().size() == 10000u * 784u);
  CHECK(train.name() == "FashionMnist");
  std::vector<int> train_count(10, 0), test_count(10, 0);
  for (uint8_t l : train.raw_labels()) ++train_count[l];
  for (uint8_t l : test.raw_labels()) ++test_count[l];
  for (int c = 0; c < 10; ++c) {
    CHECK(train_count[std::size_t(c)] == 6000);
    CHECK(test_count[std::size_t(c)] == 1000);
  }
  CHECK(FashionMnist::class_names()[0] == "T-shirt/top");
  CHECK(FashionMnist::class_names()[9] == "Ankle boot");
}

TEST_CASE("fashion_mnist: the first examples match the file's raw bytes", "[data][fashion]") {
  const FashionMnist& train = train_set();
  const std::string dir = train.directory();
  // Labels: 8 header bytes (magic 0x00000801, count 60000), then one byte per label.
  const auto labels = raw_prefix(dir + "/train-labels-idx1-ubyte.gz", 8 + 4);
  CHECK(labels[3] == 0x01);
  CHECK((labels[4] << 24 | labels[5] << 16 | labels[6] << 8 | labels[7]) == 60000);
  CHECK(int(labels[8]) == 9);  // the first training image is an ankle boot
  for (int k = 0; k < 4; ++k) CHECK(train.raw_labels()[std::size_t(k)] == labels[8 + std::size_t(k)]);
  // Images: 16 header bytes, then 784 bytes per image.
  const auto images = raw_prefix(dir + "/train-images-idx3-ubyte.gz", 16 + 2 * 784);
  CHECK(std::equal(images.begin() + 16, images.end(), train.raw_images().begin()));

  const mg::data::Batch b = train.get_batch({1, 0}, {});
  const mg::Tensor& x = b.at("input");
  const mg::Tensor& y = b.at("target");
  CHECK(x.shape() == mg::Shape{2, 1, 28, 28});
  CHECK(x.dtype() == mg::DType::F32);
  CHECK(y.shape() == mg::Shape{2});
  CHECK(y.dtype() == mg::DType::I64);
  CHECK(mg::test::values(y) == std::vector<double>{double(labels[9]), 9.0});
  const std::vector<float> v = floats(x);
  for (int64_t j = 0; j < kPix; ++j) {
    REQUIRE(v[std::size_t(j)] == normalised(images[std::size_t(16 + kPix + j)]));        // example 1
    REQUIRE(v[std::size_t(kPix + j)] == normalised(images[std::size_t(16 + j)]));        // example 0
  }
  MG_REQUIRE_ERROR(train.get_batch({0, 60000}, {}), "FashionMnist: index 60000 out of range for 60000 examples");
  MG_REQUIRE_ERROR(train.get_batch({-1}, {}), "index -1 out of range");
  CHECK(train.get_batch({}, {}).at("input").shape() == mg::Shape{0, 1, 28, 28});
}

TEST_CASE("fashion_mnist: mean 0.2860 and std 0.3530 - the normalised training set has 0 and 1",
          "[data][fashion]") {
  const FashionMnist& train = train_set();
  // Raw pixels scaled to [0, 1], accumulated in double.
  double s = 0, ss = 0;
  for (uint8_t p : train.raw_images()) {
    const double x = p / 255.0;
    s += x;
    ss += x * x;
  }
  const double n = double(train.raw_images().size());
  const double mean = s / n, stdev = std::sqrt(ss / n - mean * mean);
  CHECK(mean == Approx(0.2860).margin(5e-5));  // 0.28604
  CHECK(stdev == Approx(0.3530).margin(5e-5));  // 0.35302
  // The normalised batches, in chunks of 6,000 examples (accumulated in double).
  double ns = 0, nss = 0;
  for (int64_t start = 0; start < 60000; start += 6000) {
    std::vector<int64_t> idx(6000);
    for (int64_t k = 0; k < 6000; ++k) idx[std::size_t(k)] = start + k;
    const mg::Tensor x = train.get_batch(idx, {}).at("input");
    const float* p = x.data<float>();
    for (int64_t j = 0; j < x.numel(); ++j) {
      ns += p[j];
      nss += double(p[j]) * p[j];
    }
  }
  const double nmean = ns / n, nstd = std::sqrt(nss / n - nmean * nmean);
  CHECK(std::abs(nmean) < 5e-4);
  CHECK(nstd == Approx(1.0).margin(5e-4));
  // Without normalisation: x / 255.
  const FashionMnist plain({.train = false, .normalize = false});
  const std::vector<float> v = floats(plain.get_batch({0}, {}).at("input"));
  for (int64_t j = 0; j < kPix; ++j) REQUIRE(v[std::size_t(j)] == float(plain.raw_images()[std::size_t(j)] / 255.0));
}

TEST_CASE("fashion_mnist: augmentation is reproducible, per example, and follows the formula",
          "[data][fashion]") {
  const auto aug = augmented_test_set();
  const FashionMnist& plain = test_set();
  const mg::data::BatchContext ctx{.seed = 17, .epoch = 3};

  // The same example looks the same whatever batch or position it is in.
  const std::vector<float> alone = floats(aug->get_batch({5}, ctx).at("input"));
  const std::vector<float> inside = floats(aug->get_batch({9, 5, 2}, ctx).at("input"));
  CHECK(std::equal(alone.begin(), alone.end(), inside.begin() + kPix));
  CHECK((alone == floats(aug->get_batch({5}, ctx).at("input"))));
  CHECK((alone != floats(aug->get_batch({5}, {.seed = 17, .epoch = 4}).at("input"))));
  CHECK((alone != floats(aug->get_batch({5}, {.seed = 18, .epoch = 3}).at("input"))));

  // The documented formula: out[r][c] = image[r + dy][(flip ? 27 - c : c) + dx], black outside,
  // with dy, dx, flip from random_words(seed, epoch, index, kAugmentStream).
  std::vector<int64_t> idx(500);
  for (int64_t k = 0; k < 500; ++k) idx[std::size_t(k)] = k * 20;
  const std::vector<float> got = floats(aug->get_batch(idx, ctx).at("input"));
  const std::vector<float> orig = floats(plain.get_batch(idx, ctx).at("input"));
  int flips = 0, changed = 0;
  std::set<std::pair<int, int>> shifts;
  for (std::size_t k = 0; k < idx.size(); ++k) {
    const mg::Philox4 w = mg::data::random_words(17, 3, idx[k], mg::data::kAugmentStream);
    const int dy = int((uint64_t(w.v[0]) * 9) >> 32) - 4, dx = int((uint64_t(w.v[1]) * 9) >> 32) - 4;
    const bool flip = mg::philox_uniform(w.v[2]) < 0.5f;
    flips += flip;
    shifts.insert({dy, dx});
    const uint8_t* src = plain.raw_images().data() + idx[k] * kPix;
    bool differs = false;
    for (int r = 0; r < 28; ++r) {
      for (int c = 0; c < 28; ++c) {
        const int sr = r + dy, sc = (flip ? 27 - c : c) + dx;
        const uint8_t want = (sr >= 0 && sr < 28 && sc >= 0 && sc < 28) ? src[sr * 28 + sc] : 0;
        const std::size_t at = k * kPix + std::size_t(r * 28 + c);
        REQUIRE(got[at] == normalised(want));
        differs |= got[at] != orig[at];
      }
    }
    changed += differs;
  }
  CHECK(std::abs(flips - 250) < 50);   // p = 0.5; 4.5 sigma
  CHECK(shifts.size() >= 75);          // of the 81 offsets in [-4, 4]^2
  CHECK(changed >= 480);               // only (0, 0) without flip, or a symmetric image, keeps it

  // Flip only (no crop) is an exact mirror; flip probability 1.
  const FashionMnist mirror({.train = false, .augment = true, .crop_padding = 0, .flip_probability = 1.0});
  const std::vector<float> m = floats(mirror.get_batch({7}, ctx).at("input"));
  const std::vector<float> o = floats(plain.get_batch({7}, ctx).at("input"));
  for (int r = 0; r < 28; ++r) {
    for (int c = 0; c < 28; ++c) REQUIRE(m[std::size_t(r * 28 + c)] == o[std::size_t(r * 28 + 27 - c)]);
  }
  // Padding 2: offsets stay within [-2, 2].
  const FashionMnist pad2({.train = false, .augment = true, .crop_padding = 2, .flip_probability = 0});
  const std::vector<float> p2 = floats(pad2.get_batch({0, 1, 2, 3}, ctx).at("input"));
  for (int64_t k = 0; k < 4; ++k) {
    const mg::Philox4 w = mg::data::random_words(17, 3, k, mg::data::kAugmentStream);
    const int dy = int((uint64_t(w.v[0]) * 5) >> 32) - 2, dx = int((uint64_t(w.v[1]) * 5) >> 32) - 2;
    const uint8_t* src = plain.raw_images().data() + k * kPix;
    for (int r = 0; r < 28; ++r) {
      for (int c = 0; c < 28; ++c) {
        const int sr = r + dy, sc = c + dx;
        const uint8_t want = (sr >= 0 && sr < 28 && sc >= 0 && sc < 28) ? src[sr * 28 + sc] : 0;
        REQUIRE(p2[std::size_t(k * kPix + r * 28 + c)] == normalised(want));
      }
    }
  }
}

TEST_CASE("fashion_mnist: a DataLoader over augmented data resumes mid-epoch exactly",
          "[data][fashion][loader]") {
  const auto aug = augmented_test_set();
  const mg::data::DataLoaderOptions opt = {.batch_size = 128, .shuffle = true, .seed = 5};
  mg::data::DataLoader full(aug, opt);
  CHECK(full.num_batches() == 79);  // 10,000 / 128 rounded up
  full.start_epoch(2);
  std::vector<std::vector<float>> want;
  while (auto b = full.next()) {
    if (b->index >= 70) want.push_back(floats(b->at("input")));
  }
  mg::data::DataLoader first(aug, opt);
  first.start_epoch(2);
  for (int k = 0; k < 70; ++k) REQUIRE(first.next());
  const mg::StateDict saved = first.state();
  mg::data::DataLoader resumed(aug, {.batch_size = 128, .shuffle = true, .seed = 0});
  resumed.load_state(saved);
  resumed.start_epoch(2);
  std::size_t k = 0;
  while (auto b = resumed.next()) {
    REQUIRE(k < want.size());
    INFO("batch " << b->index);
    CHECK((floats(b->at("input")) == want[k]));  // parenthesised: no 128 x 784 printout
    ++k;
  }
  CHECK(k == want.size());
}

TEST_CASE("fashion_mnist: missing or inconsistent files give clear errors", "[data][fashion]") {
  TempDir dir;
  const std::string missing = (dir.path / "nothing_here").string();
  MG_REQUIRE_ERROR(FashionMnist({.dir = missing}),
                   "FashionMnist: cannot find train-images-idx3-ubyte.gz (or train-images-idx3-ubyte) in " +
                       missing + " (FashionMnistOptions::dir)");
  MG_REQUIRE_ERROR(FashionMnist({.dir = missing}), "apt-get install dataset-fashion-mnist");
  MG_REQUIRE_ERROR(FashionMnist({.dir = missing}), "scripts/setup");

  MG_REQUIRE_ERROR(FashionMnist({.augment = true, .crop_padding = 28}), "crop_padding must be in [0, 27], got 28");
  MG_REQUIRE_ERROR(FashionMnist({.flip_probability = 1.5}), "flip_probability must be in [0, 1], got 1.5");

  // A test split with good images and (a) too few labels, (b) a label 10, (c) 27-wide images,
  // (d) too few images; files plain (not gzip'ed) to check that these are found too.
  const std::string d = dir.path.string();
  std::vector<uint8_t> images(std::size_t(10000) * 784, 0), labels(10000, 3);
  mg::data::write_idx(dir.file("t10k-images-idx3-ubyte"), {10000, 28, 28}, images, false);
  mg::data::write_idx(dir.file("t10k-labels-idx1-ubyte"), {9999}, std::vector<uint8_t>(9999, 3), false);
  MG_REQUIRE_ERROR(FashionMnist({.dir = d, .train = false}),
                   "t10k-labels-idx1-ubyte holds 9999 labels but the t10k split has 10000 (and 10000 images)");
  labels[42] = 10;
  mg::data::write_idx(dir.file("t10k-labels-idx1-ubyte"), {10000}, labels, false);
  MG_REQUIRE_ERROR(FashionMnist({.dir = d, .train = false}), "label 10 of example 42 is not a class in 0..9");
  labels[42] = 3;
  mg::data::write_idx(dir.file("t10k-labels-idx1-ubyte"), {10000}, labels, false);
  mg::data::write_idx(dir.file("t10k-images-idx3-ubyte"), {10000, 28, 27},
                      std::vector<uint8_t>(std::size_t(10000) * 28 * 27, 0), false);
  MG_REQUIRE_ERROR(FashionMnist({.dir = d, .train = false}),
                   "holds images [10000, 28, 27] but the t10k split has [10000, 28, 28]");
  mg::data::write_idx(dir.file("t10k-images-idx3-ubyte"), {5, 28, 28}, std::vector<uint8_t>(5 * 784, 0), false);
  MG_REQUIRE_ERROR(FashionMnist({.dir = d, .train = false}), "holds images [5, 28, 28]");

  // A good split, found through MG_FASHION_MNIST_DIR; the .gz file wins over the plain one.
  for (std::size_t i = 0; i < images.size(); ++i) images[i] = uint8_t(i % 251);
  mg::data::write_idx(dir.file("t10k-images-idx3-ubyte.gz"), {10000, 28, 28}, images, true);
  ::setenv("MG_FASHION_MNIST_DIR", d.c_str(), 1);
  std::string env_error;
  try {
    const FashionMnist from_env({.train = false});
    CHECK(from_env.directory() == d);
    CHECK((from_env.raw_images() == images));
    CHECK(from_env.raw_labels() == labels);
    env_error = mg::test::error_of([] { FashionMnist({.train = true}); });
  } catch (...) {
    ::unsetenv("MG_FASHION_MNIST_DIR");
    throw;
  }
  ::unsetenv("MG_FASHION_MNIST_DIR");
  CHECK_THAT(env_error, Catch::Matchers::Contains("in " + d + " (from MG_FASHION_MNIST_DIR)"));
}

// Measured costs for docs/data.md (hidden: run with `test_datasets "[.bench]"`).
TEST_CASE("fashion_mnist: load time and loader throughput", "[.bench][data]") {
  using clock = std::chrono::steady_clock;
  const auto seconds = [](clock::time_point t0) {
    return std::chrono::duration<double>(clock::now() - t0).count();
  };
  auto t0 = clock::now();
  auto train = std::make_shared<const FashionMnist>(FashionMnistOptions{.train = true, .augment = true});
  const double load_s = seconds(t0);
  // The peer: zlib alone inflating the images file into a buffer (the floor for the reader).
  t0 = clock::now();
  {
    gzFile f = gzopen((train->directory() + "/train-images-idx3-ubyte.gz").c_str(), "rb");
    REQUIRE(f != nullptr);
    gzbuffer(f, 1 << 18);
    std::vector<uint8_t> buf(std::size_t(16) + 47040000);
    REQUIRE(gzread(f, buf.data(), unsigned(buf.size())) == int(buf.size()));
    gzclose(f);
  }
  const double inflate_s = seconds(t0);
  t0 = clock::now();
  auto plain = std::make_shared<const FashionMnist>(FashionMnistOptions{.train = true});
  const double load2_s = seconds(t0);
  t0 = clock::now();
  const FashionMnist test({.train = false});
  const double test_s = seconds(t0);
  std::cout << "load train split (60,000 images, gunzip + validate): " << load_s * 1e3 << " ms, again "
            << load2_s * 1e3 << " ms; zlib inflating the images file alone: " << inflate_s * 1e3
            << " ms (" << 47040000 / inflate_s / 1e6 << " MB/s); test split: " << test_s * 1e3 << " ms\n";
  for (const auto& [name, ds] : {std::pair{"augmented", train}, std::pair{"plain", plain}}) {
    for (const int prefetch : {0, 2}) {
      mg::data::DataLoader loader(ds, {.batch_size = 128, .shuffle = true, .seed = 1, .prefetch = prefetch});
      t0 = clock::now();
      int64_t n = 0;
      while (auto b = loader.next()) n += b->size();
      const double s = seconds(t0);
      std::cout << name << " batch 128, prefetch " << prefetch << ": " << loader.num_batches() / s
                << " batches/s (" << n / s / 1e6 << " M images/s, "
                << n * 784 * 4 / s / 1e9 << " GB/s written)\n";
    }
  }
}
