// IDX files (the MNIST / Fashion-MNIST format), plain or gzip'ed (zlib reads both transparently).
// Layout: a big-endian u32 magic 0x0000TTNN (TT the element type, 0x08 = u8; NN the number of
// dimensions), NN big-endian u32 dimensions, then the elements in row-major order. The one
// decision a reader must know: only u8 files are read, and a file is accepted only when its
// magic is the one expected (0x00000801 labels, 0x00000803 images) and its data is exactly the
// product of its dimensions — truncated files and trailing data are errors naming the file.
//
//   mg::data::IdxArray images = mg::data::read_idx(".../train-images-idx3-ubyte.gz", 3);
//   // images.dims == {60000, 28, 28}, images.data.size() == 47040000
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace mg::data {

inline constexpr uint8_t kIdxTypeU8 = 0x08;

struct IdxArray {
  std::vector<int64_t> dims;  // e.g. [N, 28, 28]
  std::vector<uint8_t> data;  // product(dims) bytes, row-major
};

// Reads an IDX file of u8 elements with `ndim` dimensions (1 <= ndim <= 8). Throws mg::Error
// ("read_idx: <path>: ...") when the file cannot be opened or decompressed, when the magic is not
// 0x00000800 | ndim (the message gives the expected and the found magic, decoded), when a
// dimension is 0 or the sizes overflow, or when the data is shorter or longer than the product
// of the dimensions. The data is bounded before it is read: a plain file must hold exactly what
// the dims imply, a gzip'ed one can hold at most 1040 times its size, and inflation stops at the
// dims' count (plus 4 KiB to detect trailing data).
IdxArray read_idx(const std::string& path, int ndim);

// Writes `data` (product(dims) bytes) as a u8 IDX file, gzip'ed when `gzip` is true. Used by the
// tests to make small files; throws mg::Error when the sizes disagree or the file cannot be written.
void write_idx(const std::string& path, const std::vector<int64_t>& dims,
               const std::vector<uint8_t>& data, bool gzip);

}  // namespace mg::data
