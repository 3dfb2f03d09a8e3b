#include "mixgrad/io/checksum.h"

#include <zlib.h>

#include <cstdio>

namespace mg::io::detail {

uint32_t crc32(const void* data, std::size_t n, uint32_t crc) {
  // crc32_z takes a size_t length (zlib >= 1.2.9), so tensors beyond 4 GiB need no chunking.
  return uint32_t(::crc32_z(crc, static_cast<const Bytef*>(data), n));
}

std::string crc32_hex(uint32_t crc) {
  char buf[9];
  std::snprintf(buf, sizeof buf, "%08x", unsigned(crc));
  return buf;
}

}  // namespace mg::io::detail
