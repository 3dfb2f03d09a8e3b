// IDX reader and writer (idx.h) on zlib's gz* file API, which reads plain files transparently.
#include "mixgrad/data/idx.h"

#include <sys/stat.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <optional>

#include "mixgrad/core/error.h"
#include "mixgrad/core/regular_file.h"

namespace mg::data {

namespace {

// deflate cannot compress better than 1032:1; a little slack for gzip headers and members.
constexpr uint64_t kMaxInflateRatio = 1040;

// Closes the gzFile on every path out of the reader and the writer.
struct GzFile {
  gzFile f = nullptr;
  ~GzFile() {
    if (f) gzclose(f);
  }
};

std::string hex32(uint32_t v) {
  static const char* digits = "0123456789abcdef";
  std::string s = "0x";
  for (int shift = 28; shift >= 0; shift -= 4) s += digits[(v >> shift) & 0xf];
  return s;
}

const char* idx_type_name(uint32_t type) {
  switch (type) {
    case 0x08: return "u8";
    case 0x09: return "i8";
    case 0x0B: return "i16";
    case 0x0C: return "i32";
    case 0x0D: return "f32";
    case 0x0E: return "f64";
    default: return nullptr;
  }
}

// "u8, 3 dimensions" or why `magic` is no IDX magic at all.
std::string describe_magic(uint32_t magic) {
  if (magic >> 16) return "not an IDX magic: its first two bytes must be 0";
  const uint32_t type = (magic >> 8) & 0xff, nd = magic & 0xff;
  const char* name = idx_type_name(type);
  return str_cat(name ? name : str_cat("unknown element type ", hex32(type)), ", ", nd,
                 nd == 1 ? " dimension" : " dimensions");
}

// Reads up to n bytes; returns how many were read (fewer only at the end of the data).
std::size_t read_some(gzFile f, uint8_t* dst, std::size_t n, const std::string& path) {
  std::size_t total = 0;
  while (total < n) {
    const unsigned chunk = unsigned(std::min<std::size_t>(n - total, std::size_t(1) << 30));
    const int got = gzread(f, dst + total, chunk);
    if (got < 0) {
      int code = 0;
      std::string msg = gzerror(f, &code);
      if (msg.rfind(path + ": ", 0) == 0) msg.erase(0, path.size() + 2);  // zlib prefixes the path
      MG_THROW(Error, "read_idx: ", path, ": cannot decompress: ", msg);
    }
    if (got == 0) break;
    total += std::size_t(got);
  }
  return total;
}

uint32_t load_be32(const uint8_t* p) {
  return (uint32_t(p[0]) << 24) | (uint32_t(p[1]) << 16) | (uint32_t(p[2]) << 8) | uint32_t(p[3]);
}

// The last 4 bytes of a file (a gzip member's ISIZE: its uncompressed size mod 2^32, little
// endian), or nullopt when it cannot be read. gzread ignores bytes after the last gzip member, so
// this is how trailing data shows: the file's last 4 bytes are then not the inflated size.
std::optional<uint32_t> last_le32(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) return std::nullopt;
  uint8_t b[4];
  const bool ok = std::fseek(f, -4, SEEK_END) == 0 && std::fread(b, 1, 4, f) == 4;
  std::fclose(f);
  if (!ok) return std::nullopt;
  return uint32_t(b[0]) | (uint32_t(b[1]) << 8) | (uint32_t(b[2]) << 16) | (uint32_t(b[3]) << 24);
}

}  // namespace

IdxArray read_idx(const std::string& path, int ndim) {
  MG_CHECK(ndim >= 1 && ndim <= 8, Error, "read_idx: ndim must be in [1, 8], got ", ndim);
  refuse_non_regular_file("read_idx", path);  // before the open: a FIFO would block it
  GzFile file;
  errno = 0;
  file.f = gzopen(path.c_str(), "rb");
  MG_CHECK(file.f != nullptr, Error, "read_idx: cannot open ", path, ": ",
           errno ? std::strerror(errno) : "out of memory");
  gzbuffer(file.f, 1 << 18);

  uint8_t header[4 + 4 * 8];
  std::size_t got = read_some(file.f, header, 4, path);
  MG_CHECK(got == 4, Error, "read_idx: ", path, ": the file has ", got,
           " bytes, too short for an IDX magic number (4 bytes)");
  const uint32_t magic = load_be32(header);
  const uint32_t expected = (uint32_t(kIdxTypeU8) << 8) | uint32_t(ndim);
  MG_CHECK(magic == expected, Error, "read_idx: ", path, ": expected magic ", hex32(expected), " (",
           describe_magic(expected), "), got ", hex32(magic), " (", describe_magic(magic), ")");
  got = read_some(file.f, header + 4, std::size_t(4 * ndim), path);
  MG_CHECK(got == std::size_t(4 * ndim), Error, "read_idx: ", path, ": the header ends after ", got,
           " of the ", 4 * ndim, " bytes of its ", ndim, " dimensions");

  IdxArray out;
  uint64_t count = 1;
  constexpr uint64_t kMaxBytes = uint64_t(1) << 40;
  for (int d = 0; d < ndim; ++d) {
    const uint32_t n = load_be32(header + 4 + 4 * d);
    out.dims.push_back(int64_t(n));
    MG_CHECK(n > 0, Error, "read_idx: ", path, ": dimension ", d, " is 0 (dims ", out.dims, ")");
    MG_CHECK(n <= kMaxBytes / count, Error, "read_idx: ", path, ": dims ", out.dims,
             " describe more than 2^40 bytes; the header is corrupt");
    count *= n;
  }

  // Bound the data by what the file can hold before reading any of it: a plain file holds exactly
  // its size minus the header; a gzip stream inflates at most kMaxInflateRatio times its size
  // (deflate's limit is 1032:1), so a lying header is an error here, not gigabytes of inflation.
  const uint64_t header_bytes = 4 + 4 * uint64_t(ndim);
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode)) {
    const uint64_t size = uint64_t(st.st_size);
    if (gzdirect(file.f)) {
      const uint64_t holds = size - std::min(size, header_bytes);
      MG_CHECK(count <= holds, Error, "read_idx: ", path, ": truncated: dims ", out.dims, " need ", count,
               " data bytes but the file holds ", holds);
      MG_CHECK(count == holds, Error, "read_idx: ", path, ": extra data: dims ", out.dims, " need ", count,
               " data bytes but the file holds more (", holds - count, " bytes more)");
    } else {
      const uint64_t most = size * kMaxInflateRatio;
      MG_CHECK(header_bytes + count <= most, Error, "read_idx: ", path, ": truncated: dims ", out.dims, " need ",
               count, " data bytes but a gzip file of ", size, " bytes inflates to at most ", most,
               "\n  hint: the header is corrupt or the file was cut short");
    }
  }

  // Read in chunks (memory grows only with data actually inflated, never past the header's
  // count), then up to 4096 bytes more to detect trailing data.
  constexpr std::size_t kChunk = std::size_t(1) << 24;
  std::size_t have = 0;
  while (have < count) {
    const std::size_t want = std::min<std::size_t>(count - have, kChunk);
    out.data.resize(have + want);
    const std::size_t n = read_some(file.f, out.data.data() + have, want, path);
    have += n;
    if (n < want) break;
  }
  out.data.resize(have);
  uint8_t extra[4096];
  const std::size_t trailing = have == count ? read_some(file.f, extra, sizeof extra, path) : 0;

  int code = Z_OK;
  std::string zmsg = gzerror(file.f, &code);
  if (zmsg.rfind(path + ": ", 0) == 0) zmsg.erase(0, path.size() + 2);  // zlib prefixes the path
  MG_CHECK(code == Z_OK, Error, "read_idx: ", path, ": the gzip stream is ",
           code == Z_BUF_ERROR ? "truncated" : "corrupt", " (", zmsg, ") after ", have, " of the ",
           count, " data bytes that dims ", out.dims, " need");
  MG_CHECK(have == count, Error, "read_idx: ", path, ": truncated: dims ", out.dims, " need ", count,
           " data bytes but the file holds ", have);
  MG_CHECK(trailing == 0, Error, "read_idx: ", path, ": extra data: dims ", out.dims, " need ",
           count, " data bytes but the file holds more",
           trailing < sizeof extra ? str_cat(" (", trailing, " bytes more)") : std::string());
  if (!gzdirect(file.f)) {
    const std::optional<uint32_t> isize = last_le32(path);
    MG_CHECK(isize && *isize == uint32_t(header_bytes + count), Error, "read_idx: ", path,
             ": extra data after the gzip stream (the file does not end with the stream's size field; "
             "or it holds several gzip members)\n  hint: the file was appended to or corrupted; download it again");
  }
  return out;
}

void write_idx(const std::string& path, const std::vector<int64_t>& dims,
               const std::vector<uint8_t>& data, bool gzip) {
  MG_CHECK(!dims.empty() && dims.size() <= 8, Error, "write_idx: ", path,
           ": expected 1 to 8 dimensions, got ", dims);
  uint64_t count = 1;
  std::vector<uint8_t> bytes = {0, 0, kIdxTypeU8, uint8_t(dims.size())};
  for (const int64_t d : dims) {
    MG_CHECK(d > 0 && d <= int64_t(UINT32_MAX), Error, "write_idx: ", path,
             ": every dimension must be in [1, 2^32), got ", dims);
    // Bounded as read_idx bounds a file (2^40 bytes), so the product cannot wrap: four dims of
    // 2^16 made 2^64 = 0 and "matched" empty data.
    MG_CHECK(count <= (uint64_t(1) << 40) / uint64_t(d), Error, "write_idx: ", path, ": dims ", dims,
             " describe more than 2^40 bytes");
    count *= uint64_t(d);
    for (int shift = 24; shift >= 0; shift -= 8) bytes.push_back(uint8_t(uint64_t(d) >> shift));
  }
  MG_CHECK(count == data.size(), Error, "write_idx: ", path, ": dims ", dims, " need ", count,
           " bytes but ", data.size(), " were given");
  bytes.insert(bytes.end(), data.begin(), data.end());

  GzFile file;
  errno = 0;
  file.f = gzopen(path.c_str(), gzip ? "wb" : "wbT");  // T: plain ("transparent") writing
  MG_CHECK(file.f != nullptr, Error, "write_idx: cannot create ", path, ": ",
           errno ? std::strerror(errno) : "out of memory");
  std::size_t done = 0;
  while (done < bytes.size()) {
    const unsigned chunk = unsigned(std::min<std::size_t>(bytes.size() - done, std::size_t(1) << 30));
    const int n = gzwrite(file.f, bytes.data() + done, chunk);
    if (n <= 0) {
      int code = 0;
      MG_THROW(Error, "write_idx: cannot write ", path, ": ", gzerror(file.f, &code));
    }
    done += std::size_t(n);
  }
  const int rc = gzclose(file.f);
  file.f = nullptr;
  MG_CHECK(rc == Z_OK, Error, "write_idx: cannot finish ", path, " (zlib error ", rc, ")");
}

}  // namespace mg::data
