// safetensors: the header is built and parsed with nlohmann::ordered_json (private to this file
// and checkpoint.cpp), the data goes through stdio. Writing streams one tensor at a time into a
// temporary file that is renamed over the target only after everything was written and fsync'ed.
#include "mixgrad/io/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>
#include <numeric>
#include <optional>
#include <set>
#include <vector>

#include "mixgrad/autograd/grad_mode.h"
#include "mixgrad/core/error.h"
#include "mixgrad/io/checksum.h"
#include "mixgrad/io/json_parse.h"
#include "mixgrad/io/json_text.h"
#include "mixgrad/core/regular_file.h"

namespace mg::io {

static_assert(std::endian::native == std::endian::little,
              "safetensors data is little-endian; a big-endian host needs byte swapping here");

namespace {

using detail::json;          // the header written
using pjson = detail::parsed_json;  // the header read

// The reference implementation refuses headers above 100 MB; so do we (a corrupt length must not
// make us allocate gigabytes).
constexpr uint64_t kMaxHeaderBytes = 100'000'000;
// More dimensions than any real tensor has (the shape is printed in error messages).
constexpr std::size_t kMaxDims = 64;
constexpr const char* kMetadataKey = "__metadata__";
constexpr const char* kSupported = "F64, F32, F16, BF16, I64, I32, U8, BOOL";

std::optional<DType> dtype_from_safetensors(const std::string& s) {
  static_assert(kNumDTypes == 8, "map the new dtype to its safetensors name");
  if (s == "F64") return DType::F64;
  if (s == "F32") return DType::F32;
  if (s == "F16") return DType::F16;
  if (s == "BF16") return DType::BF16;
  if (s == "I64") return DType::I64;
  if (s == "I32") return DType::I32;
  if (s == "U8") return DType::U8;
  if (s == "BOOL") return DType::Bool;
  return std::nullopt;
}

std::string errno_text() { return std::strerror(errno); }

using detail::quoted;
using detail::valid_utf8;
using detail::excerpt;
using detail::quoted_excerpt;

// ---- atomic writing ----

// Where a save lands: `path` itself, or the file a symlink at `path` names (what fopen would write
// through), so the link stays a link.
std::string save_target(const std::string& path) {
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0 || !S_ISLNK(st.st_mode)) return path;
  char* resolved = ::realpath(path.c_str(), nullptr);  // nullptr: a dangling link is replaced
  if (!resolved) return path;
  std::string target(resolved);
  std::free(resolved);
  return target;
}

std::string directory_of(const std::string& path) {
  const std::size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
}

// A temporary file in the target's directory that becomes the target on commit() and is removed
// otherwise. Its name is short (".mg.<pid>.<n>.tmp"), so any name the target may have fits. An
// existing target's permission bits carry over from the start (a private checkpoint is never
// readable by others, not even while it is written); a new file gets 0666 & ~umask as with fopen.
// A dangling symlink at `path` is replaced by the file (realpath cannot name its target).
class AtomicFile {
 public:
  AtomicFile(const char* who, const std::string& path) : who_(who), path_(path), target_(save_target(path)) {
    static std::atomic<uint64_t> counter{0};
    struct stat existing;
    // A directory cannot be replaced by a file: refused before anything is written.
    MG_CHECK(!(::stat(target_.c_str(), &existing) == 0 && S_ISDIR(existing.st_mode)), Error, who_, ": ",
             quoted(path_), " is a directory\n  hint: give a file path, e.g. ", quoted(path_ + "/model.safetensors"));
    const bool exists = ::stat(target_.c_str(), &existing) == 0 && S_ISREG(existing.st_mode);
    for (int attempt = 0; attempt < 100; ++attempt) {
      tmp_ = str_cat(directory_of(target_), "/.mg.", ::getpid(), ".", counter.fetch_add(1), ".tmp");
      const mode_t mode = exists ? (existing.st_mode & 0777) : 0666;
      const int fd = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
      if (fd >= 0) {
        if (exists) (void)::fchmod(fd, mode);  // the bits the umask took away; best effort, as the owner
        file_ = ::fdopen(fd, "wb");
        if (!file_) {
          const std::string why = errno_text();
          ::close(fd);
          ::unlink(tmp_.c_str());
          MG_THROW(Error, who_, ": cannot open the temporary file ", quoted(tmp_), ": ", why);
        }
        return;
      }
      if (errno != EEXIST) break;
    }
    MG_THROW(Error, who_, ": cannot create a temporary file next to ", quoted(path_),
             target_ != path_ ? str_cat(" (a symlink to ", quoted(target_), ")") : std::string(), " (", quoted(tmp_),
             "): ", errno_text(), "; ", quoted(path_), " was not changed",
             "\n  hint: the directory ", quoted(directory_of(target_)), " must exist and be writable");
  }
  ~AtomicFile() {
    if (file_) std::fclose(file_);
    if (!committed_) ::unlink(tmp_.c_str());
  }
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  const std::string& tmp_path() const { return tmp_; }

  void write(const void* data, std::size_t n) {
    if (n == 0) return;
    if (std::fwrite(data, 1, n, file_) != n) fail("writing");
  }

  // Replaces n bytes already written at `offset` (a value only known once the data is written).
  void overwrite(uint64_t offset, const void* data, std::size_t n) {
    if (std::fseek(file_, long(offset), SEEK_SET) != 0) fail("seeking in");
    write(data, n);
  }

  // fflush, fsync, fclose, rename over the target, then fsync the directory so the rename itself
  // survives a power cut.
  void commit() {
    if (std::fflush(file_) != 0) fail("flushing");
    if (::fsync(::fileno(file_)) != 0) fail("syncing");
    const int rc = std::fclose(file_);
    file_ = nullptr;
    if (rc != 0) fail("closing");
    if (std::rename(tmp_.c_str(), target_.c_str()) != 0) {
      MG_THROW(Error, who_, ": renaming the temporary file ", quoted(tmp_), " to ", quoted(target_), " failed: ",
               errno_text(), "; ", quoted(path_), " was not changed");
    }
    committed_ = true;
    sync_directory();
  }

 private:
  [[noreturn]] void fail(const char* what) {
    MG_THROW(Error, who_, ": ", what, " ", quoted(tmp_), " failed: ", errno_text(), "; ", quoted(path_),
             " was not changed");
  }
  void sync_directory() const {
    const int fd = ::open(directory_of(target_).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
      (void)::fsync(fd);  // best effort: the data is already safe, only the rename's durability is at stake
      ::close(fd);
    }
  }

  const char* who_;
  std::string path_;    // as the caller wrote it (for messages)
  std::string target_;  // what is replaced: path_, or the file its symlink names
  std::string tmp_;
  std::FILE* file_ = nullptr;
  bool committed_ = false;
};

// ---- reading ----

struct FileCloser {
  void operator()(std::FILE* f) const { std::fclose(f); }
};

// One tensor entry of a parsed header.
struct Entry {
  std::string name;
  DType dtype;
  Shape shape;
  uint64_t begin = 0, end = 0;
};

std::string offsets_str(const Entry& e) { return str_cat("[", e.begin, ", ", e.end, "]"); }

// Parses the header (io/json_parse.h: nesting limit, duplicate keys, every JSON exception an
// mg::Error) and requires an object.
pjson parse_header(const char* who, const std::string& path, const std::string& text, std::vector<std::string>& order) {
  pjson header = detail::parse_json(who, path, "the header", text, &order);
  MG_CHECK(header.is_object(), Error, who, ": ", quoted(path), ": the header is a JSON ", header.type_name(),
           ", expected an object");
  return header;
}

// A non-negative JSON integer that fits in int64, or nullopt.
std::optional<uint64_t> as_size(const pjson& v) {
  if (!v.is_number_unsigned()) return std::nullopt;
  const uint64_t u = v.get<uint64_t>();
  if (u > uint64_t(INT64_MAX)) return std::nullopt;
  return u;
}

Entry parse_entry(const char* who, const std::string& path, const std::string& name, const pjson& v) {
  auto fail_prefix = [&] { return str_cat(who, ": ", quoted(path), ": tensor ", quoted_excerpt(name), ": "); };
  MG_CHECK(v.is_object(), Error, fail_prefix(), "its header entry is a JSON ", v.type_name(),
           ", expected {\"dtype\", \"shape\", \"data_offsets\"}");
  for (const auto& [k, unused] : v.items()) {
    MG_CHECK(k == "dtype" || k == "shape" || k == "data_offsets", Error, fail_prefix(), "unexpected field ",
             quoted_excerpt(k), " (a tensor entry has exactly dtype, shape and data_offsets)");
  }
  Entry e;
  e.name = name;
  // dtype
  MG_CHECK(v.contains("dtype"), Error, fail_prefix(), "missing field \"dtype\"");
  MG_CHECK(v["dtype"].is_string(), Error, fail_prefix(), "\"dtype\" is a JSON ", v["dtype"].type_name(),
           ", expected a string such as \"F32\"");
  const std::string dt = v["dtype"].get<std::string>();
  const std::optional<DType> d = dtype_from_safetensors(dt);
  MG_CHECK(d.has_value(), Error, fail_prefix(), "unsupported dtype ", quoted_excerpt(dt), "; mixgrad reads ", kSupported);
  e.dtype = *d;
  // shape
  MG_CHECK(v.contains("shape"), Error, fail_prefix(), "missing field \"shape\"");
  MG_CHECK(v["shape"].is_array(), Error, fail_prefix(), "\"shape\" is a JSON ", v["shape"].type_name(),
           ", expected an array of non-negative integers");
  MG_CHECK(v["shape"].size() <= kMaxDims, Error, fail_prefix(), "shape ", excerpt(v["shape"]), " has ",
           v["shape"].size(), " dimensions; mixgrad reads at most ", kMaxDims);
  uint64_t numel = 1;
  bool overflow = false, has_zero = false;
  for (const pjson& dim : v["shape"]) {
    const std::optional<uint64_t> s = as_size(dim);
    MG_CHECK(s.has_value(), Error, fail_prefix(), "shape ", excerpt(v["shape"]),
             " has an entry that is not a non-negative 64-bit integer: ", excerpt(dim));
    e.shape.push_back(int64_t(*s));
    if (*s == 0) has_zero = true;
    if (!overflow && *s != 0 && numel > uint64_t(INT64_MAX) / *s) overflow = true;
    if (!overflow && *s != 0) numel *= *s;
  }
  // The product of the non-zero dimensions must fit too (strides are computed from it), even when
  // a zero dimension makes the tensor empty.
  if (has_zero) numel = 0;
  // data_offsets
  MG_CHECK(v.contains("data_offsets"), Error, fail_prefix(), "missing field \"data_offsets\"");
  const pjson& off = v["data_offsets"];
  MG_CHECK(off.is_array() && off.size() == 2 && as_size(off[0]) && as_size(off[1]), Error, fail_prefix(),
           "\"data_offsets\" is ", excerpt(off), ", expected [begin, end] with non-negative integers");
  e.begin = *as_size(off[0]);
  e.end = *as_size(off[1]);
  MG_CHECK(e.begin <= e.end, Error, fail_prefix(), "data_offsets ", offsets_str(e), " end before they begin");
  const uint64_t es = dtype_size(e.dtype);
  MG_CHECK(!overflow && numel <= uint64_t(INT64_MAX) / es, Error, fail_prefix(), "shape ", e.shape,
           " has more elements than fit in 64 bits");
  MG_CHECK(numel * es == e.end - e.begin, Error, fail_prefix(), "shape ", e.shape, " of ", dt, " needs ",
           numel * es, " bytes but data_offsets ", offsets_str(e), " span ", e.end - e.begin,
           "\n  hint: the header lies about the tensor's shape, dtype or offsets");
  return e;
}

// The entries must tile the data buffer [0, buffer_bytes) exactly: in range, no overlap, no gap,
// no trailing bytes.
void check_layout(const char* who, const std::string& path, const std::vector<Entry>& entries,
                  uint64_t buffer_bytes) {
  std::vector<const Entry*> order;
  for (const Entry& e : entries) order.push_back(&e);
  std::stable_sort(order.begin(), order.end(), [](const Entry* a, const Entry* b) {
    return a->begin != b->begin ? a->begin < b->begin : a->end < b->end;
  });
  for (const Entry* e : order) {
    MG_CHECK(e->end <= buffer_bytes, Error, who, ": ", quoted(path), ": tensor ", quoted_excerpt(e->name),
             ": data_offsets ", offsets_str(*e), " reach beyond the data buffer, which has ", buffer_bytes,
             " bytes\n  hint: the file is truncated or its header lies about the offsets");
  }
  uint64_t covered = 0;
  const Entry* prev = nullptr;
  for (const Entry* e : order) {
    MG_CHECK(e->begin >= covered, Error, who, ": ", quoted(path), ": tensor ", quoted_excerpt(e->name),
             ": data_offsets ", offsets_str(*e), " overlap those of tensor ", quoted_excerpt(prev->name), " ",
             offsets_str(*prev));
    MG_CHECK(e->begin == covered, Error, who, ": ", quoted(path), ": bytes [", covered, ", ", e->begin,
             ") of the data buffer belong to no tensor (a gap before tensor ", quoted_excerpt(e->name), " ",
             offsets_str(*e), ")");
    covered = e->end;
    prev = e;
  }
  MG_CHECK(covered == buffer_bytes, Error, who, ": ", quoted(path), ": ", buffer_bytes - covered,
           " bytes of trailing data after the last tensor (the data buffer has ", buffer_bytes,
           " bytes, the tensors cover ", covered, ")");
}

}  // namespace

const char* safetensors_dtype_name(DType t) {
  switch (t) {
    case DType::F64: return "F64";
    case DType::F32: return "F32";
    case DType::F16: return "F16";
    case DType::BF16: return "BF16";
    case DType::I64: return "I64";
    case DType::I32: return "I32";
    case DType::U8: return "U8";
    case DType::Bool: return "BOOL";
  }
  throw InternalError("safetensors_dtype_name: unknown dtype");
}

bool SafetensorsFile::contains(const std::string& name) const {
  return std::any_of(tensors.begin(), tensors.end(), [&](const auto& p) { return p.first == name; });
}

const Tensor& SafetensorsFile::at(const std::string& name) const {
  for (const auto& [n, t] : tensors) {
    if (n == name) return t;
  }
  std::string names;
  for (std::size_t i = 0; i < tensors.size() && i < 8; ++i) names += (i ? ", " : "") + quoted_excerpt(tensors[i].first);
  if (tensors.size() > 8) names += str_cat(" and ", tensors.size() - 8, " more");
  MG_THROW(Error, "SafetensorsFile: ", quoted(path), " has no tensor ", quoted_excerpt(name), "; it has ",
           tensors.empty() ? std::string("none") : names);
}

namespace detail {

void save_safetensors_as(const char* who, const std::string& path, const nn::NamedTensors& tensors,
                         const std::map<std::string, std::string>& metadata, const std::string& crc32_key) {
  // Everything that can be checked is checked before the temporary file exists.
  std::set<std::string> seen;
  for (const auto& [name, t] : tensors) {
    MG_CHECK(!name.empty(), Error, who, ": ", quoted(path), ": a tensor has an empty name");
    MG_CHECK(valid_utf8(name), Error, who, ": ", quoted(path), ": tensor name ", quoted(name),
             " is not valid UTF-8");
    MG_CHECK(name != kMetadataKey, Error, who, ": ", quoted(path), ": \"__metadata__\" is reserved and cannot name a tensor");
    MG_CHECK(seen.insert(name).second, Error, who, ": ", quoted(path), ": tensor name ", quoted(name),
             " appears twice");
    MG_CHECK(t.defined(), Error, who, ": ", quoted(path), ": tensor ", quoted(name), " is undefined");
  }
  for (const auto& [k, v] : metadata) {
    MG_CHECK(valid_utf8(k) && valid_utf8(v), Error, who, ": ", quoted(path), ": metadata entry ", quoted(k),
             " is not valid UTF-8 (safetensors metadata maps UTF-8 strings to UTF-8 strings)");
  }

  // Buffer layout: by element size, largest first, stable, so each tensor is aligned to its
  // element size relative to the (8-byte aligned) buffer start.
  std::vector<std::size_t> layout(tensors.size());
  std::iota(layout.begin(), layout.end(), 0);
  std::stable_sort(layout.begin(), layout.end(), [&](std::size_t a, std::size_t b) {
    return tensors[a].second.element_size() > tensors[b].second.element_size();
  });
  std::vector<uint64_t> begin(tensors.size());
  uint64_t offset = 0;
  for (std::size_t i : layout) {
    begin[i] = offset;
    offset += uint64_t(tensors[i].second.numel()) * tensors[i].second.element_size();
  }

  // The checksums are written as zeros of their final length and filled in after the data.
  std::map<std::string, std::string> meta = metadata;
  if (!crc32_key.empty()) {
    MG_ASSERT(!meta.contains(crc32_key), "the checksum key is also a metadata key");
    meta[crc32_key] = std::string(8 * tensors.size(), '0');
  }
  json header = json::object();
  if (!meta.empty()) {
    json m = json::object();
    for (const auto& [k, v] : meta) m[k] = v;
    header[kMetadataKey] = std::move(m);
  }
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i].second;
    const uint64_t bytes = uint64_t(t.numel()) * t.element_size();
    header[tensors[i].first] = {{"dtype", safetensors_dtype_name(t.dtype())},
                                {"shape", t.shape()},
                                {"data_offsets", json::array({begin[i], begin[i] + bytes})}};
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // pad to 8 bytes, as the reference writer does
  const uint64_t n = text.size();
  // Refused before the file is created: the reader (and the reference one) refuse such a header,
  // so the file written would never load (a checkpoint's contents holding a 150 MB string).
  MG_CHECK(n <= kMaxHeaderBytes, Error, who, ": ", quoted(path), ": the header would take ", n,
           " bytes, more than the ", kMaxHeaderBytes, " a reader accepts\n  hint: store large data as tensors, not "
           "in the metadata or a checkpoint's state");
  // Where the checksums' digits start in the file. "key":"000..." occurs once: any other quote
  // inside a JSON string is escaped, and the metadata object comes first.
  uint64_t crc_offset = 0;
  if (!crc32_key.empty()) {
    const std::string key = json(crc32_key).dump() + ":\"";
    const std::size_t at = text.find(key + meta[crc32_key] + "\"");
    MG_ASSERT(at != std::string::npos, "the checksum placeholder is not in the header");
    crc_offset = 8 + at + key.size();
  }
  std::vector<uint32_t> crcs(tensors.size(), 0);

  AtomicFile file(who, path);
  file.write(&n, 8);
  file.write(text.data(), text.size());
  NoGradGuard no_grad;
  for (std::size_t i : layout) {
    const auto& [name, t] = tensors[i];
    Tensor c = t;
    try {
      if (!c.device().is_cpu()) c = c.to(Device::cpu());
      if (!c.is_contiguous()) c = c.contiguous();
    } catch (const IndexError&) {
      throw;  // a bad index or target found earlier on the device, raised at this copy's wait
    } catch (const Error& e) {
      MG_THROW(Error, who, ": ", quoted(path), ": tensor ", quoted(name), " (", describe(t),
               ") could not be copied to the CPU: ", e.what(), "\n  ", quoted(path), " was not changed");
    }
    const std::size_t bytes = std::size_t(c.numel()) * c.element_size();
    if (!crc32_key.empty()) crcs[i] = crc32(c.data_ptr(), bytes);
    file.write(c.data_ptr(), bytes);
  }
  if (!crc32_key.empty()) {
    std::string hex;
    for (uint32_t crc : crcs) hex += crc32_hex(crc);
    file.overwrite(crc_offset, hex.data(), hex.size());
  }
  file.commit();
}

namespace {

SafetensorsFile load_unchecked(const char* who, const std::string& path, const MetadataCheck& check_metadata) {
  refuse_non_regular_file(who, path);  // before the open: a FIFO would block it (core/regular_file.h)
  std::unique_ptr<std::FILE, FileCloser> f(std::fopen(path.c_str(), "rb"));
  MG_CHECK(f != nullptr, Error, who, ": cannot open ", quoted(path), ": ", errno_text());
  struct stat st {};
  MG_CHECK(::fstat(::fileno(f.get()), &st) == 0, Error, who, ": cannot stat ", quoted(path), ": ", errno_text());
  MG_CHECK(S_ISREG(st.st_mode), Error, who, ": ", quoted(path), " is not a regular file");
  const uint64_t size = uint64_t(st.st_size);
  MG_CHECK(size >= 8, Error, who, ": ", quoted(path), ": the file has ", size,
           " bytes, too few for a safetensors file (it starts with an 8-byte header length)");

  auto read_exact = [&](void* dst, uint64_t n, const char* what) {
    if (n == 0) return;
    if (std::fread(dst, 1, n, f.get()) != n) {
      MG_THROW(Error, who, ": ", quoted(path), ": reading ", what, " failed: ",
               std::ferror(f.get()) ? errno_text() : std::string("unexpected end of file (was it changed while reading?)"));
    }
  };
  uint64_t n = 0;
  read_exact(&n, 8, "the header length");
  MG_CHECK(n <= size - 8, Error, who, ": ", quoted(path), ": the header length ", n,
           " (bytes 0-7) exceeds the ", size - 8, " bytes that follow it",
           "\n  hint: the file is truncated or not a safetensors file");
  MG_CHECK(n <= kMaxHeaderBytes, Error, who, ": ", quoted(path), ": the header length ", n,
           " exceeds the limit of ", kMaxHeaderBytes, " bytes");
  std::string text(n, '\0');
  read_exact(text.data(), n, "the header");
  MG_CHECK(n > 0 && text[0] == '{', Error, who, ": ", quoted(path),
           ": the header does not start with '{'; this is not a safetensors file");

  std::vector<std::string> order_in_file;  // the tensors keep the header's order
  const pjson header = parse_header(who, path, text, order_in_file);
  SafetensorsFile out;
  out.path = path;
  // The metadata first, and the caller's look at it (a checkpoint's format version) before any
  // tensor entry is parsed: a newer format's new dtype or field must not be reported instead.
  if (header.contains(kMetadataKey)) {
    const pjson& value = header.at(kMetadataKey);
    MG_CHECK(value.is_object(), Error, who, ": ", quoted(path), ": \"__metadata__\" is a JSON ",
             value.type_name(), ", expected an object of strings");
    for (const auto& [mk, mv] : value.items()) {
      MG_CHECK(mv.is_string(), Error, who, ": ", quoted(path), ": metadata entry ", quoted_excerpt(mk), " is a JSON ",
               mv.type_name(), "; safetensors metadata values are strings");
      out.metadata[mk] = mv.get<std::string>();
    }
  }
  if (check_metadata) check_metadata(out.metadata);
  std::vector<Entry> entries;
  for (const std::string& key : order_in_file) {
    if (key != kMetadataKey) entries.push_back(parse_entry(who, path, key, header.at(key)));
  }
  const uint64_t buffer_bytes = size - 8 - n;
  check_layout(who, path, entries, buffer_bytes);

  // Data: read in file order (the entries tile the buffer), keep the header's order.
  std::vector<Tensor> data(entries.size());
  std::vector<std::size_t> order(entries.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return entries[a].begin != entries[b].begin ? entries[a].begin < entries[b].begin
                                                : entries[a].end < entries[b].end;
  });
  for (std::size_t i : order) {
    const Entry& e = entries[i];
    Tensor t = empty(e.shape, {.dtype = e.dtype});
    const std::string what = str_cat("the data of tensor ", quoted_excerpt(e.name));
    read_exact(t.data_ptr(), e.end - e.begin, what.c_str());
    if (e.dtype == DType::Bool) {
      // Only 0 and 1 are bools; any other byte would be undefined behaviour once read as bool.
      const auto* bytes = static_cast<const uint8_t*>(t.data_ptr());
      for (int64_t k = 0; k < t.numel(); ++k) {
        MG_CHECK(bytes[k] <= 1, Error, who, ": ", quoted(path), ": tensor ", quoted_excerpt(e.name), ": BOOL element ", k,
                 " has the byte value ", int(bytes[k]), ", expected 0 or 1");
      }
    }
    data[i] = std::move(t);
  }
  for (std::size_t i = 0; i < entries.size(); ++i) out.tensors.emplace_back(entries[i].name, std::move(data[i]));
  return out;
}

}  // namespace

// Every exception of the JSON library is an mg::Error too, should one escape the checks above.
SafetensorsFile load_safetensors_as(const char* who, const std::string& path, const MetadataCheck& check_metadata) {
  try {
    return load_unchecked(who, path, check_metadata);
  } catch (const json::exception& e) {
    MG_THROW(Error, who, ": ", quoted(path), ": the header cannot be read: ", detail::bounded(e.what()));
  }
}

}  // namespace detail

void save_safetensors(const std::string& path, const nn::NamedTensors& tensors,
                      const std::map<std::string, std::string>& metadata) {
  detail::save_safetensors_as("save_safetensors", path, tensors, metadata);
}

SafetensorsFile load_safetensors(const std::string& path) {
  return detail::load_safetensors_as("load_safetensors", path);
}

}  // namespace mg::io
