// EC02: the windowed unix-compress container of Debian's bible-kjv-text (/usr/lib/bible.data).
// The decision a reader must know: the file is ONE classic `compress` (LZW, block mode) stream
// whose dictionary is reset with a CLEAR code every `window_size` bytes of text, plus a table of
// the byte offsets where each window's codes begin, so any window decodes on its own. Layout
// (big-endian u32; found by reading the bytes and the `bible` program, docs/text_data.md):
//
//   0x00  "EC"  magic           0x02  "02"  version        0x04  char[80] title, NUL padded
//   0x54  u32 window_size       0x58  u32 n_windows        0x5c  u32 offsets[n_windows + 1]
//   then  1f 9d <flags>  (a compress header: block mode 0x80 | max_bits, read by nobody)
//   window i = bytes [offsets[i], offsets[i+1]): codes of 9..max_bits bits, LSB first, read in
//   chunks of n_bits bytes (classic compress 4.0 getcode), ended by CLEAR (all but the last);
//   it decodes to exactly window_size bytes, the last window to 1..window_size bytes.
//
//   std::string text = mg::data::ec02_read_file("/usr/lib/bible.data");
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace mg::data {

inline constexpr std::size_t kEc02HeaderBytes = 0x5c;  // up to and excluding the offset table

struct Ec02Header {
  std::string title;                // the NUL-padded description ("Compressed Data File")
  uint32_t window_size = 0;         // bytes of text per window
  std::vector<uint32_t> offsets;    // n_windows + 1 file offsets; offsets.back() == end of data
  int max_bits = 16;                // from the compress header after the table (16 when absent)
  std::size_t num_windows() const { return offsets.empty() ? 0 : offsets.size() - 1; }
};

// Parses and validates the header and offset table of an EC02 file held in `bytes`; `name`
// (a path) is used in error messages. Throws mg::Error on a bad magic, version, window size,
// table or compress header, or on offsets that are decreasing or outside the file.
Ec02Header ec02_parse_header(std::string_view bytes, const std::string& name);

// Decodes window `index`, checking every code (no code beyond the dictionary, no output beyond
// window_size, the exact size for all but the last window). Throws mg::Error naming the window.
std::string ec02_decompress_window(std::string_view bytes, const Ec02Header& header,
                                   std::size_t index, const std::string& name);

// The whole decompressed text (all windows concatenated).
std::string ec02_decompress(std::string_view bytes, const std::string& name);

// Reads `path` and returns its decompressed text; throws mg::Error when it cannot be read.
std::string ec02_read_file(const std::string& path);

// Writes `text` as an EC02 file image (the inverse of ec02_decompress): a classic compress
// encoder with max_bits-bit codes, one CLEAR per window boundary. Used by the tests to build
// small and adversarial files; window_size >= 1, max_bits in 9..16.
std::string ec02_compress(std::string_view text, uint32_t window_size = 65536,
                          const std::string& title = "Compressed Data File", int max_bits = 16);

}  // namespace mg::data
