// CRC-32 (the IEEE polynomial of zip, gzip and PNG; Python's zlib.crc32) over tensor bytes, the
// checksum a checkpoint stores for each of its tensors (docs/io.md, "Checksums").
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace mg::io::detail {

// The CRC-32 of n bytes at data, continuing from `crc` (0 starts a new one).
uint32_t crc32(const void* data, std::size_t n, uint32_t crc = 0);
// Eight lowercase hex digits, as a checkpoint stores them.
std::string crc32_hex(uint32_t crc);

}  // namespace mg::io::detail
