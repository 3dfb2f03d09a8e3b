// safetensors reading and writing: the tensor file format shared with PyTorch and Hugging Face
// (https://github.com/huggingface/safetensors). A file is
//   u64 little-endian N | N bytes of UTF-8 JSON header | byte buffer
// where the header maps each tensor name to {"dtype": "F32", "shape": [2, 3], "data_offsets":
// [begin, end]} (offsets relative to the buffer) plus an optional "__metadata__" of string to
// string; the data is row-major and little-endian. docs/io.md lists every rule and check.
//
// The one decision a reader must know: writing is atomic — the file is written to a temporary
// file beside the target, flushed, fsync'ed and renamed over it, so a crash or an error part-way
// leaves the previous file untouched; reading validates the whole header against the file size
// before it reads any data, and every problem is an mg::Error naming the file and the tensor.
//
//   mg::io::save_safetensors("model.safetensors", model.state_dict(), {{"epoch", "3"}});
//   mg::io::SafetensorsFile f = mg::io::load_safetensors("model.safetensors");
//   mg::Tensor w = f.at("fc.weight");  // a fresh contiguous CPU tensor
#pragma once
#include <functional>
#include <map>
#include <string>

#include "mixgrad/core/tensor.h"
#include "mixgrad/nn/module.h"

namespace mg::io {

// The safetensors dtype name of a mixgrad dtype: F64 F32 F16 BF16 I64 I32 U8 BOOL.
const char* safetensors_dtype_name(DType t);

// The contents of a safetensors file.
struct SafetensorsFile {
  std::string path;
  nn::NamedTensors tensors;                     // contiguous CPU tensors, in the header's order
  std::map<std::string, std::string> metadata;  // "__metadata__" (empty when absent)

  bool contains(const std::string& name) const;
  // The tensor called `name`; throws mg::Error naming the file (and listing a few names) if absent.
  const Tensor& at(const std::string& name) const;
};

// Writes `tensors` (any dtype, device and layout: non-contiguous or non-CPU tensors are copied
// to contiguous CPU memory one at a time) and `metadata` to `path`, atomically. Names must be
// non-empty, unique, valid UTF-8 and not "__metadata__". The header lists the tensors in the
// given order; the buffer holds them sorted by element size, largest first (stable), so every
// tensor is aligned to its element size in the file, as the reference implementation writes.
void save_safetensors(const std::string& path, const nn::NamedTensors& tensors,
                      const std::map<std::string, std::string>& metadata = {});

// Reads a whole safetensors file into CPU tensors after validating it (docs/io.md, "Validation").
SafetensorsFile load_safetensors(const std::string& path);

namespace detail {
// The same with `who` ("save_checkpoint", "load_checkpoint") starting every error message. With a
// `crc32_key`, the metadata also maps that key to the tensors' CRC-32s (io/checksum.h), eight hex
// digits per tensor in the header's order, computed from the bytes as they are written.
void save_safetensors_as(const char* who, const std::string& path, const nn::NamedTensors& tensors,
                         const std::map<std::string, std::string>& metadata, const std::string& crc32_key = {});
// check_metadata, when given, sees the metadata before any tensor entry is parsed (it throws to
// refuse the file: a checkpoint of a newer format version).
using MetadataCheck = std::function<void(const std::map<std::string, std::string>& metadata)>;
SafetensorsFile load_safetensors_as(const char* who, const std::string& path, const MetadataCheck& check_metadata = {});
}  // namespace detail

}  // namespace mg::io
