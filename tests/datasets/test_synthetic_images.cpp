// SyntheticImages (data/synthetic_images.h): shapes and dtypes, determinism (an example is the
// same in any batch, position or epoch; two datasets of one seed agree), labels spread over the
// classes, the label a function of the image (same-class images have the same colour ratios and
// wave frequencies, whatever their phase and contrast), disjoint splits through first_index, and
// clear errors for bad options and indices.
#include <catch2/catch.hpp>

#include <cmath>
#include <set>
#include <vector>

#include "data/synthetic_images.h"
#include "test_util.h"

using namespace mg;
using namespace mg::data;

namespace {

std::vector<float> pixels(const Tensor& t) {
  const float* p = t.data<float>();
  return std::vector<float>(p, p + t.numel());
}

// Σ x² over channel c of image b of x [B, C, S, S].
double energy(const Tensor& x, int64_t b, int64_t c) {
  const int64_t C = x.size(1), S = x.size(2);
  const float* p = x.data<float>() + (b * C + c) * S * S;
  double e = 0;
  for (int64_t k = 0; k < S * S; ++k) e += double(p[k]) * p[k];
  return e;
}

// Sign changes along row r of channel c: about 2 per cycle of the row wave, so it reads off fx.
int64_t crossings(const Tensor& x, int64_t b, int64_t c, int64_t r) {
  const int64_t C = x.size(1), S = x.size(2);
  const float* row = x.data<float>() + ((b * C + c) * S + r) * S;
  int64_t n = 0;
  for (int64_t q = 1; q < S; ++q) n += (row[q - 1] < 0) != (row[q] < 0) ? 1 : 0;
  return n;
}

}  // namespace

TEST_CASE("SyntheticImages: shapes, dtypes, value range and defaults", "[data]") {
  const SyntheticImages d({.size = 50, .num_classes = 7, .channels = 3, .image_size = 16, .seed = 3});
  CHECK(d.size() == 50);
  CHECK(d.name() == "SyntheticImages");
  const Batch b = d.get_batch({0, 1, 2, 49}, {});
  const Tensor& x = b.at("input");
  const Tensor& y = b.at("target");
  CHECK(x.dtype() == DType::F32);
  CHECK(x.shape() == Shape{4, 3, 16, 16});
  CHECK(y.dtype() == DType::I64);
  CHECK(y.shape() == Shape{4});
  for (float v : pixels(x)) REQUIRE(std::abs(v) < 1.5f);  // contrast < 1.5, |colour| <= 1, |sin| <= 1
  for (int64_t k = 0; k < 4; ++k) CHECK(y.data<int64_t>()[k] == d.label(std::vector<int64_t>{0, 1, 2, 49}[k]));
  const SyntheticImagesOptions def;
  CHECK(def.size == 1281167);
  CHECK(def.num_classes == 1000);
  CHECK(def.channels == 3);
  CHECK(def.image_size == 224);
}

TEST_CASE("SyntheticImages: deterministic per seed, independent of batch, position and epoch", "[data]") {
  const SyntheticImagesOptions o{.size = 40, .num_classes = 5, .image_size = 12, .seed = 11};
  const SyntheticImages a(o), b(o);
  const Batch one = a.get_batch({7}, {.seed = 1, .epoch = 0});
  const Batch many = b.get_batch({3, 7, 9}, {.seed = 2, .epoch = 5});
  const std::vector<float> p1 = pixels(one.at("input")), pm = pixels(many.at("input"));
  const std::size_t n = p1.size();
  CHECK(std::vector<float>(pm.begin() + long(n), pm.begin() + long(2 * n)) == p1);
  CHECK(many.at("target").data<int64_t>()[1] == one.at("target").data<int64_t>()[0]);
  // another seed: other classes and examples
  SyntheticImagesOptions o2 = o;
  o2.seed = 12;
  CHECK(pixels(SyntheticImages(o2).get_batch({7}, {}).at("input")) != p1);
}

TEST_CASE("SyntheticImages: labels cover the classes, and the label is a function of the image", "[data]") {
  const SyntheticImages d({.size = 2000, .num_classes = 10, .channels = 3, .image_size = 32, .seed = 5});
  std::vector<int64_t> idx(2000);
  for (int64_t i = 0; i < 2000; ++i) idx[std::size_t(i)] = i;
  const Batch b = d.get_batch(idx, {});
  const Tensor& x = b.at("input");
  const int64_t* y = b.at("target").data<int64_t>();
  std::vector<int64_t> count(10, 0);
  for (int64_t i = 0; i < 2000; ++i) ++count[std::size_t(y[i])];
  for (int64_t c : count) CHECK(c > 120);  // 200 expected per class
  // Two images of one class: the same channel energy ratios (the class colour; phase and contrast
  // scale every channel alike) and the same number of sign changes along a row (fx) up to 2.
  // Images of different classes differ in at least one of them.
  std::vector<int64_t> first(10, -1);
  for (int64_t i = 0; i < 2000; ++i) {
    const int64_t k = y[i];
    if (first[std::size_t(k)] < 0) {
      first[std::size_t(k)] = i;
      continue;
    }
    const int64_t j = first[std::size_t(k)];
    if (energy(x, j, 0) < 1e-3 || energy(x, i, 0) < 1e-3) continue;
    for (int64_t c = 1; c < 3; ++c) {
      const double rj = energy(x, j, c) / energy(x, j, 0), ri = energy(x, i, c) / energy(x, i, 0);
      REQUIRE(std::abs(ri - rj) <= 1e-3 * (std::abs(rj) + 1e-3));
    }
  }
  std::set<std::vector<double>> signatures;
  for (int64_t k = 0; k < 10; ++k) {
    const int64_t j = first[std::size_t(k)];
    REQUIRE(j >= 0);
    signatures.insert({std::round(100 * energy(x, j, 1) / energy(x, j, 0)),
                       std::round(100 * energy(x, j, 2) / energy(x, j, 0))});
  }
  CHECK(signatures.size() == 10);
  // the row wave's frequency, 1 to 8 cycles over 32 pixels: 2 to 16 sign changes (+-2 for phase)
  for (int64_t k = 0; k < 10; ++k) {
    const int64_t n = crossings(x, first[std::size_t(k)], 0, 16);
    CHECK(n <= 18);
  }
}

TEST_CASE("SyntheticImages: first_index gives a disjoint split with the same classes", "[data]") {
  const SyntheticImagesOptions o{.size = 100, .num_classes = 4, .channels = 2, .image_size = 8, .seed = 9};
  SyntheticImagesOptions t = o;
  t.first_index = 100;
  const SyntheticImages train(o), test(t), whole({.size = 200, .num_classes = 4, .channels = 2, .image_size = 8,
                                                  .seed = 9});
  // example i of the test split is example 100 + i of the stream
  CHECK(pixels(test.get_batch({3}, {}).at("input")) == pixels(whole.get_batch({103}, {}).at("input")));
  CHECK(test.label(3) == whole.label(103));
  CHECK(pixels(test.get_batch({3}, {}).at("input")) != pixels(train.get_batch({3}, {}).at("input")));
}

TEST_CASE("SyntheticImages: bad options and indices are clear errors", "[data]") {
  CHECK_THROWS_WITH(SyntheticImages({.size = 0}), Catch::Matchers::Contains("size must be >= 1, got 0"));
  CHECK_THROWS_WITH(SyntheticImages({.size = 5, .num_classes = 0}),
                    Catch::Matchers::Contains("num_classes must be in [1, 2^31], got 0"));
  CHECK_THROWS_WITH(SyntheticImages({.size = 5, .channels = 0}), Catch::Matchers::Contains("channels must be >= 1"));
  CHECK_THROWS_WITH(SyntheticImages({.size = 5, .image_size = -2}),
                    Catch::Matchers::Contains("image_size must be >= 1, got -2"));
  CHECK_THROWS_WITH(SyntheticImages({.size = 5, .first_index = int64_t(1) << 48}),
                    Catch::Matchers::Contains("first_index + size < 2^48"));
  const SyntheticImages d({.size = 5, .num_classes = 3, .image_size = 4});
  CHECK_THROWS_AS(d.get_batch({5}, {}), IndexError);
  CHECK_THROWS_WITH(d.get_batch({0, -1}, {}), Catch::Matchers::Contains("index -1 out of range for 5 examples"));
  CHECK_THROWS_AS(d.label(7), IndexError);
}
