// EC02 reader and writer. The LZW codec follows classic compress 4.0 bit for bit: codes are
// packed LSB first into chunks of n_bits bytes; a chunk ends early (the rest is padding) when the
// code width grows or after a CLEAR. Widths grow after exactly 256·2^k codes, a multiple of 8, so
// in practice only CLEAR leaves padding. Every input is treated as untrusted: each code is checked
// against the dictionary, each window's output against window_size.
#include "mixgrad/data/text/ec02.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <fstream>
#include <iterator>
#include <sstream>

#include "mixgrad/core/error.h"
#include "mixgrad/core/regular_file.h"

namespace mg::data {
namespace {

constexpr int kInitBits = 9;
constexpr uint32_t kClear = 256;  // block mode: resets the dictionary
constexpr uint32_t kFirst = 257;  // first free dictionary entry
constexpr std::size_t kTitleBytes = 80;
constexpr uint32_t kMaxWindowSize = 1u << 26;  // sanity bound for a corrupt header (64 MiB)

uint32_t read_be32(std::string_view b, std::size_t at) {
  const auto* p = reinterpret_cast<const unsigned char*>(b.data()) + at;
  return uint32_t(p[0]) << 24 | uint32_t(p[1]) << 16 | uint32_t(p[2]) << 8 | uint32_t(p[3]);
}

void write_be32(std::string& out, uint32_t v) {
  out.push_back(char(v >> 24));
  out.push_back(char(v >> 16));
  out.push_back(char(v >> 8));
  out.push_back(char(v));
}

// Classic compress getcode() over one window's bytes: reads a chunk of n_bits bytes whenever the
// current one is used up, the width changes or a CLEAR was seen.
class ChunkReader {
 public:
  explicit ChunkReader(std::string_view bytes) : bytes_(bytes) {}

  // Next code of `n_bits` bits, or -1 at the end of the data. `new_chunk` forces a fresh chunk.
  int64_t next(int n_bits, bool new_chunk) {
    if (new_chunk || offset_ + n_bits > size_) {
      const std::size_t take = std::min<std::size_t>(std::size_t(n_bits), bytes_.size() - pos_);
      if (take * 8 < std::size_t(n_bits)) return -1;  // fewer bits left than one code: the end
      buf_.fill(0);
      std::memcpy(buf_.data(), bytes_.data() + pos_, take);
      pos_ += take;
      offset_ = 0;
      size_ = int(take) * 8;
    }
    // A code spans at most 3 bytes (16 bits at a bit offset of up to 7); buf_ has slack zeros.
    const int byte = offset_ >> 3;
    const uint32_t word = uint32_t(buf_[byte]) | uint32_t(buf_[byte + 1]) << 8 |
                          uint32_t(buf_[byte + 2]) << 16;
    const uint32_t code = (word >> (offset_ & 7)) & ((1u << n_bits) - 1);
    offset_ += n_bits;
    return code;
  }

 private:
  std::string_view bytes_;
  std::size_t pos_ = 0;              // next unread byte
  std::array<unsigned char, 20> buf_{};  // one chunk (<= 16 bytes) + slack
  int offset_ = 0, size_ = 0;        // bits used / held in buf_
};

// Bit packer mirroring ChunkReader: classic compress output(). Like the original, it never clears
// its chunk buffer: a code overwrites the bytes it touches (keeping the low bits of its first
// byte), so the padding of a chunk cut short by CLEAR holds stale bytes of earlier chunks, which
// is what makes our output identical to Debian's bible.data.
class ChunkWriter {
 public:
  explicit ChunkWriter(std::string& out) : out_(out) {}
  void put(uint32_t code, int n_bits) {
    int byte = offset_ >> 3, bits = n_bits;
    const int r_off = offset_ & 7;
    buf_[byte] = uint8_t((buf_[byte] & ((1u << r_off) - 1)) | ((code << r_off) & (0xFFu << r_off)));
    ++byte;
    bits -= 8 - r_off;
    code >>= 8 - r_off;
    if (bits >= 8) {
      buf_[byte++] = uint8_t(code);
      code >>= 8;
      bits -= 8;
    }
    if (bits > 0) buf_[byte] = uint8_t(code);
    offset_ += n_bits;
    if (offset_ == n_bits * 8) flush_bytes(std::size_t(n_bits));
  }
  // Ends the current chunk, written at its full n_bits bytes (width change, CLEAR).
  void end_chunk(int n_bits) {
    if (offset_ > 0) flush_bytes(std::size_t(n_bits));
  }
  // Writes the bytes holding the remaining codes (end of stream).
  void finish() {
    if (offset_ > 0) flush_bytes(std::size_t(offset_ + 7) / 8);
  }

 private:
  void flush_bytes(std::size_t n) {
    out_.append(reinterpret_cast<const char*>(buf_.data()), n);
    offset_ = 0;
  }
  std::string& out_;
  std::array<uint8_t, 20> buf_{};  // one chunk (<= 16 bytes) + slack; never cleared (see above)
  int offset_ = 0;
};

}  // namespace

Ec02Header ec02_parse_header(std::string_view bytes, const std::string& name) {
  const std::string who = "EC02 file '" + name + "'";
  MG_CHECK(bytes.size() >= kEc02HeaderBytes, Error, who, ": ", bytes.size(),
           " bytes, shorter than the ", kEc02HeaderBytes, "-byte header (truncated?)");
  MG_CHECK(bytes.substr(0, 2) == "EC", Error, who, ": bad magic number (expected \"EC\" at offset 0)");
  MG_CHECK(bytes.substr(2, 2) == "02", Error, who, ": wrong version '", std::string(bytes.substr(2, 2)),
           "' (expected \"02\")");
  Ec02Header h;
  const std::string_view title = bytes.substr(4, kTitleBytes);
  h.title = std::string(title.substr(0, std::min(title.find('\0'), title.size())));
  h.window_size = read_be32(bytes, 0x54);
  const uint32_t n_windows = read_be32(bytes, 0x58);
  MG_CHECK(h.window_size >= 1 && h.window_size <= kMaxWindowSize, Error, who, ": window size ",
           h.window_size, " is outside 1..", kMaxWindowSize, " (corrupt header)");
  MG_CHECK(n_windows >= 1, Error, who, ": the header says it holds 0 windows");
  const uint64_t table_end = kEc02HeaderBytes + 4 * (uint64_t(n_windows) + 1);
  MG_CHECK(table_end <= bytes.size(), Error, who, ": the offset table of ", n_windows,
           " windows ends at byte ", table_end, " but the file has ", bytes.size(), " bytes (truncated?)");
  h.offsets.resize(std::size_t(n_windows) + 1);
  for (std::size_t i = 0; i < h.offsets.size(); ++i) h.offsets[i] = read_be32(bytes, kEc02HeaderBytes + 4 * i);
  MG_CHECK(h.offsets.front() >= table_end, Error, who, ": window 0 starts at byte ", h.offsets.front(),
           ", inside the header (which ends at ", table_end, ")");
  for (std::size_t i = 0; i + 1 < h.offsets.size(); ++i) {
    MG_CHECK(h.offsets[i] < h.offsets[i + 1], Error, who, ": window ", i, " spans bytes [", h.offsets[i], ", ",
             h.offsets[i + 1], "), which is empty or reversed (corrupt offset table)");
  }
  MG_CHECK(h.offsets.back() <= bytes.size(), Error, who, ": window ", n_windows - 1, " ends at byte ",
           h.offsets.back(), " but the file has ", bytes.size(), " bytes (truncated?)");
  // The compress stream header (1f 9d flags) sits between the table and window 0 when present.
  if (h.offsets.front() >= table_end + 3 && uint8_t(bytes[table_end]) == 0x1f &&
      uint8_t(bytes[table_end + 1]) == 0x9d) {
    const int flags = uint8_t(bytes[table_end + 2]);
    h.max_bits = flags & 0x1f;
    MG_CHECK(flags & 0x80, Error, who, ": the compress header says the stream is not in block mode (flags 0x",
             std::hex, flags, ")");
    MG_CHECK(h.max_bits >= kInitBits && h.max_bits <= 16, Error, who, ": compressed with ", h.max_bits,
             "-bit codes; this reader handles 9..16");
  }
  return h;
}

std::string ec02_decompress_window(std::string_view bytes, const Ec02Header& h, std::size_t index,
                                   const std::string& name) {
  MG_CHECK(index < h.num_windows(), Error, "EC02 file '", name, "': window ", index, " out of range 0..",
           h.num_windows() - 1);
  // The fields ec02_parse_header validated, checked again for this window: the header is a
  // public struct a caller may have built or changed (a max_bits below 9 would make the
  // dictionary smaller than its 256 single-byte entries).
  MG_CHECK(h.max_bits >= kInitBits && h.max_bits <= 16, Error, "EC02 file '", name, "': max_bits ", h.max_bits,
           " is outside ", kInitBits, "..16 (use the header ec02_parse_header returns)");
  MG_CHECK(h.window_size >= 1 && h.window_size <= kMaxWindowSize, Error, "EC02 file '", name, "': window size ",
           h.window_size, " is outside 1..", kMaxWindowSize);
  MG_CHECK(h.offsets[index] < h.offsets[index + 1] && h.offsets[index + 1] <= bytes.size(), Error, "EC02 file '",
           name, "': window ", index, " spans bytes [", h.offsets[index], ", ", h.offsets[index + 1],
           "), which is empty, reversed or beyond the ", bytes.size(), " bytes given");
  const bool last = index + 1 == h.num_windows();
  auto fail = [&](const auto&... why) {
    MG_THROW(Error, "EC02 file '", name, "': window ", index, " of ", h.num_windows(), " (bytes ", h.offsets[index],
             "..", h.offsets[index + 1], ") is corrupt: ", why...);
  };
  const uint32_t max_entries = 1u << h.max_bits;
  // Dictionary: entry c >= 257 is the string of prefix[c] followed by byte suffix[c]; prefix[c]
  // is always an earlier entry, so walking prefixes terminates within max_entries steps.
  std::vector<uint16_t> prefix(max_entries);
  std::vector<uint8_t> suffix(max_entries);
  std::vector<uint8_t> stack(max_entries + 1);
  for (uint32_t c = 0; c < 256; ++c) suffix[c] = uint8_t(c);

  std::string out;
  out.reserve(h.window_size);
  ChunkReader reader(bytes.substr(h.offsets[index], h.offsets[index + 1] - h.offsets[index]));
  int n_bits = kInitBits;
  uint32_t max_code = (1u << n_bits) - 1;  // the largest code the current width can carry
  uint32_t free_entry = kFirst;
  bool clear_seen = false;
  int64_t old_code = -1;  // previous code; -1 at the start of the window and after a CLEAR
  uint8_t first_byte = 0;  // first byte of the previous code's string
  for (;;) {
    const bool grow = free_entry > max_code && n_bits < h.max_bits;
    if (grow) {
      ++n_bits;
      max_code = n_bits == h.max_bits ? max_entries : (1u << n_bits) - 1;
    }
    if (clear_seen) {
      n_bits = kInitBits;
      max_code = (1u << n_bits) - 1;
    }
    const int64_t read = reader.next(n_bits, grow || clear_seen);
    clear_seen = false;
    if (read < 0) break;
    const uint32_t code = uint32_t(read);
    if (code == kClear) {
      clear_seen = true;
      free_entry = kClear;  // the literal after the CLEAR fills (and wastes) entry 256
      old_code = -1;
      continue;
    }
    if (old_code < 0) {  // first code of the window or after a CLEAR: a literal byte
      if (code > 255) fail("code ", code, " where a literal byte (0..255) must start the dictionary");
      if (out.size() + 1 > h.window_size) fail("it decodes to more than the window size ", h.window_size);
      out.push_back(char(code));
      first_byte = uint8_t(code);
      if (free_entry == kClear) {  // classic compress records (junk) entry 256 here
        free_entry = kFirst;
      }
      old_code = code;
      continue;
    }
    if (code > free_entry || (code == free_entry && free_entry >= max_entries)) {
      fail("code ", code, " is beyond the dictionary (", free_entry, " entries)");
    }
    // Expand the string of `code` backwards on the stack; code == free_entry is the KwKwK case
    // (the entry being defined: old string + its own first byte).
    std::size_t depth = 0;
    uint32_t c = code;
    if (code == free_entry) {
      stack[depth++] = first_byte;
      c = uint32_t(old_code);
    }
    while (c >= 256) {
      stack[depth++] = suffix[c];
      c = prefix[c];
    }
    stack[depth++] = uint8_t(c);
    first_byte = uint8_t(c);
    if (out.size() + depth > h.window_size) fail("it decodes to more than the window size ", h.window_size);
    for (std::size_t k = depth; k-- > 0;) out.push_back(char(stack[k]));
    if (free_entry < max_entries) {
      prefix[free_entry] = uint16_t(old_code);
      suffix[free_entry] = first_byte;
      ++free_entry;
    }
    old_code = code;
  }
  if (!last && out.size() != h.window_size) {
    fail("it decodes to ", out.size(), " bytes instead of the window size ", h.window_size);
  }
  if (last && out.empty()) fail("it decodes to 0 bytes");
  return out;
}

std::string ec02_decompress(std::string_view bytes, const std::string& name) {
  const Ec02Header h = ec02_parse_header(bytes, name);
  std::string text;  // not reserved from the header: its claim is only checked window by window
  for (std::size_t i = 0; i < h.num_windows(); ++i) text += ec02_decompress_window(bytes, h, i, name);
  return text;
}

std::string ec02_read_file(const std::string& path) {
  refuse_non_regular_file("EC02 file", path);  // before the open: a FIFO would block it
  std::ifstream in(path, std::ios::binary);
  MG_CHECK(in.good(), Error, "EC02 file '", path, "': cannot open it for reading");
  in.seekg(0, std::ios::end);
  const std::streamoff size = in.tellg();
  in.seekg(0, std::ios::beg);
  std::ostringstream buf;
  buf << in.rdbuf();
  // A read error sets failbit on `buf`, not on `in`: compare what arrived with the file's size.
  const std::string bytes = buf.str();
  MG_CHECK(size >= 0 && std::streamoff(bytes.size()) == size, Error, "EC02 file '", path, "': read error after ",
           bytes.size(), " of ", size, " bytes");
  return ec02_decompress(bytes, path);
}

std::string ec02_compress(std::string_view text, uint32_t window_size, const std::string& title, int max_bits) {
  MG_CHECK(window_size >= 1 && window_size <= kMaxWindowSize, Error, "ec02_compress: window_size must be in 1..",
           kMaxWindowSize, ", got ", window_size);
  MG_CHECK(max_bits >= kInitBits && max_bits <= 16, Error, "ec02_compress: max_bits must be in 9..16, got ", max_bits);
  MG_CHECK(!text.empty(), Error, "ec02_compress: the text is empty (a file holds at least one window)");
  MG_CHECK(title.size() < kTitleBytes, Error, "ec02_compress: the title has ", title.size(), " bytes, at most ",
           kTitleBytes - 1, " fit");
  const std::size_t n_windows = (text.size() + window_size - 1) / window_size;
  std::string out = "EC02" + title;
  out.resize(4 + kTitleBytes, '\0');
  write_be32(out, window_size);
  write_be32(out, uint32_t(n_windows));
  const std::size_t table_at = out.size();
  out.resize(table_at + 4 * (n_windows + 1), '\0');
  out.push_back(char(0x1f));
  out.push_back(char(0x9d));
  out.push_back(char(0x80 | max_bits));

  const uint32_t max_entries = 1u << max_bits;
  std::vector<uint32_t> offsets;
  ChunkWriter writer(out);
  // Dictionary (prefix code, next byte) -> code: open addressing over 2^17 slots (load <= 1/2),
  // emptied per window by bumping the generation stamp.
  constexpr uint32_t kSlots = 1u << 17;
  std::vector<uint32_t> slot_key(kSlots), slot_code(kSlots), slot_gen(kSlots, 0);
  uint32_t gen = 0;
  auto slot_of = [&](uint32_t key) {
    uint32_t i = (key * 2654435761u) >> 15;  // Fibonacci hash to 17 bits
    while (slot_gen[i] == gen && slot_key[i] != key) i = (i + 1) & (kSlots - 1);
    return i;
  };
  for (std::size_t w = 0; w < n_windows; ++w) {
    offsets.push_back(uint32_t(out.size()));
    const std::string_view win = text.substr(w * window_size, window_size);
    ++gen;
    int n_bits = kInitBits;
    uint32_t max_code = (1u << n_bits) - 1;
    uint32_t free_entry = kFirst;
    // Emits a code, then widens when the dictionary outgrew the width (the decoder's mirror).
    auto emit = [&](uint32_t code) {
      writer.put(code, n_bits);
      if (free_entry > max_code && n_bits < max_bits) {
        writer.end_chunk(n_bits);
        ++n_bits;
        max_code = n_bits == max_bits ? max_entries : (1u << n_bits) - 1;
      }
    };
    uint32_t ent = uint8_t(win[0]);
    for (std::size_t i = 1; i < win.size(); ++i) {
      const uint8_t c = uint8_t(win[i]);
      const uint32_t key = ent << 8 | c;
      const uint32_t slot = slot_of(key);
      if (slot_gen[slot] == gen) {
        ent = slot_code[slot];
        continue;
      }
      emit(ent);
      if (free_entry < max_entries) {
        slot_gen[slot] = gen;
        slot_key[slot] = key;
        slot_code[slot] = free_entry++;
      }
      ent = c;
    }
    emit(ent);
    if (w + 1 < n_windows) {  // CLEAR ends the window; its chunk is padded to full length
      writer.put(kClear, n_bits);
      writer.end_chunk(n_bits);
    }
  }
  writer.finish();
  offsets.push_back(uint32_t(out.size()));
  for (std::size_t i = 0; i < offsets.size(); ++i) {
    for (int b = 0; b < 4; ++b) out[table_at + 4 * i + b] = char(offsets[i] >> (24 - 8 * b));
  }
  return out;
}

}  // namespace mg::data
