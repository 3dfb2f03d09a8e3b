// Helpers for the io tests: a temporary directory removed at the end of a test, whole-file byte
// access, a rewrite of a safetensors header (to make it lie), bit-exact tensor comparison and a
// tensor that claims to live on a CUDA device (copying it to the CPU fails in a CPU-only build,
// which is how the tests make a write fail part-way).
#pragma once
#include <catch2/catch.hpp>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "core/factory.h"
#include "core/storage.h"
#include "core/tensor.h"
#include "ops/ops.h"
#include "test_paths.h"

namespace mg::test {

namespace fs = std::filesystem;

class TempDir {
 public:
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "mg_io_test_XXXXXX").string();
    REQUIRE(::mkdtemp(tmpl.data()) != nullptr);
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string file(const std::string& name) const { return (path_ / name).string(); }
  // The names of the entries in the directory (to see that no temporary file was left behind).
  std::vector<std::string> entries() const {
    std::vector<std::string> out;
    for (const auto& e : fs::directory_iterator(path_)) out.push_back(e.path().filename().string());
    std::sort(out.begin(), out.end());
    return out;
  }

 private:
  fs::path path_;
};

inline std::string read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  REQUIRE(f.good());
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

inline void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), std::streamsize(bytes.size()));
  REQUIRE(f.good());
}

inline uint64_t header_length(const std::string& bytes) {
  REQUIRE(bytes.size() >= 8);
  uint64_t n;
  std::memcpy(&n, bytes.data(), 8);
  return n;
}

// The JSON header of a safetensors file (padding included).
inline std::string header_of(const std::string& path) {
  const std::string b = read_bytes(path);
  return b.substr(8, header_length(b));
}

// Replaces the header of a safetensors file with edit(header) (re-padded to 8 bytes, length
// updated), keeping the data buffer: the way to make a header lie.
template <typename F>
void rewrite_header(const std::string& path, F edit) {
  const std::string b = read_bytes(path);
  const uint64_t n = header_length(b);
  std::string h = b.substr(8, n);
  while (!h.empty() && h.back() == ' ') h.pop_back();
  edit(h);
  h.append((8 - h.size() % 8) % 8, ' ');
  const uint64_t m = h.size();
  std::string out(reinterpret_cast<const char*>(&m), 8);
  out += h;
  out += b.substr(8 + n);
  write_bytes(path, out);
}

// Replaces the one occurrence of `from` in `s` by `to` (fails the test when absent or repeated).
inline void replace_once(std::string& s, const std::string& from, const std::string& to) {
  const std::size_t p = s.find(from);
  INFO("looking for " << from << " in " << s);
  REQUIRE(p != std::string::npos);
  REQUIRE(s.find(from, p + 1) == std::string::npos);
  s.replace(p, from.size(), to);
}

// The raw bytes of a tensor (contiguous CPU copy).
inline std::string raw_bytes(const Tensor& t) {
  const Tensor c = t.to(Device::cpu()).contiguous();
  return std::string(static_cast<const char*>(c.data_ptr()), std::size_t(c.numel()) * c.element_size());
}

// Same dtype, shape and bit pattern (NaN payloads and -0.0 included).
inline bool same_bits(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() && raw_bytes(a) == raw_bytes(b);
}

// A tensor of raw bits: `words` reinterpreted as `dtype` (sizeof(W) == dtype_size(dtype)).
template <typename W>
Tensor from_bits(const std::vector<W>& words, const Shape& shape, DType dtype) {
  REQUIRE(sizeof(W) == dtype_size(dtype));
  REQUIRE(shape_numel(shape) == int64_t(words.size()));
  return from_buffer(words.data(), shape, {.dtype = dtype});
}

// A tensor whose storage claims to be on cuda:0 (it is host memory). Copying it to the CPU
// throws in a build without CUDA; callers skip when a CUDA backend is registered.
inline Tensor fake_cuda_tensor(const Shape& shape) {
  auto* data = new float[std::size_t(shape_numel(shape))]();
  auto storage = std::make_shared<Storage>(data, std::size_t(shape_numel(shape)) * 4, Device::cuda(0),
                                           [](void* p) { delete[] static_cast<float*>(p); });
  return make_tensor(storage, shape, contiguous_strides(shape), 0, DType::F32);
}
inline bool cuda_backend_present() { return find_allocator(DeviceType::CUDA) != nullptr; }

inline std::string reference_path(const std::string& name) {
  return mg::test::source_dir() + "/tests/data/reference/" + name;
}

}  // namespace mg::test
