// The harness functions of fuzz_harness.h. The readers take paths, so each input goes through one
// memfd per thread (/proc/self/fd/N: a regular file that never touches the disk), truncated and
// rewritten for every input. Only mg::Error is caught: that is the readers' contract (docs/io.md).
#include "fuzz/fuzz_harness.h"

#include <sys/mman.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <stdexcept>

#include "core/error.h"
#include "data/idx.h"
#include "data/text/wordpiece.h"
#include "io/checkpoint.h"
#include "io/safetensors.h"

namespace mg::fuzz {

namespace {
thread_local std::string g_last_error;
}  // namespace

const std::string& last_error() { return g_last_error; }

const std::string& memory_file(const uint8_t* data, std::size_t size) {
  struct MemFd {
    int fd = -1;
    std::string path;
    MemFd() {
      fd = ::memfd_create("mg_fuzz_input", MFD_CLOEXEC);
      if (fd < 0) throw std::runtime_error("memory_file: memfd_create failed");
      path = "/proc/self/fd/" + std::to_string(fd);
    }
    ~MemFd() { ::close(fd); }
  };
  thread_local MemFd file;
  if (::ftruncate(file.fd, 0) != 0) throw std::runtime_error("memory_file: ftruncate failed");
  std::size_t done = 0;
  while (done < size) {
    const ssize_t n = ::pwrite(file.fd, data + done, size - done, off_t(done));
    if (n <= 0) throw std::runtime_error("memory_file: pwrite failed");
    done += std::size_t(n);
  }
  return file.path;
}

int fuzz_safetensors(const uint8_t* data, std::size_t size) {
  const std::string& path = memory_file(data, size);
  g_last_error.clear();
  try {
    const io::SafetensorsFile f = io::load_safetensors(path);
    for (const auto& [name, t] : f.tensors) (void)f.at(name).numel();
  } catch (const Error& e) {
    g_last_error = e.what();
  }
  return 0;
}

int fuzz_checkpoint(const uint8_t* data, std::size_t size) {
  const std::string& path = memory_file(data, size);
  g_last_error.clear();
  try {
    const io::Checkpoint ck = io::load_checkpoint(path);
    for (const std::string& name : ck.state_names()) (void)ck.state(name).ints.size();
  } catch (const Error& e) {
    g_last_error = e.what();
  }
  return 0;
}

int fuzz_idx(const uint8_t* data, std::size_t size) {
  const std::string& path = memory_file(data, size);
  g_last_error.clear();
  // The reader is told how many dimensions to expect; take the count the magic claims (its 4th
  // byte, inflated first when the input is gzip'ed) so that valid headers of every rank are
  // reachable.
  uint8_t magic[4] = {0, 0, 0, 0};
  if (gzFile f = gzopen(path.c_str(), "rb")) {
    if (gzread(f, magic, 4) != 4) magic[3] = 0;
    gzclose(f);
  }
  const int ndim = magic[3] >= 1 && magic[3] <= 8 ? int(magic[3]) : 1;
  try {
    const data::IdxArray a = data::read_idx(path, ndim);
    (void)a.data.size();
  } catch (const Error& e) {
    g_last_error = e.what();
  }
  return 0;
}

int fuzz_vocab(const uint8_t* data, std::size_t size) {
  const std::string& path = memory_file(data, size);
  g_last_error.clear();
  try {
    const data::WordPiece tok = data::WordPiece::load(path);
    // Encode and decode the input itself (its first bytes): tokens of the vocabulary meet text.
    const std::string text(reinterpret_cast<const char*>(data), std::min<std::size_t>(size, 512));
    const std::vector<int32_t> ids = tok.encode(text);
    (void)tok.decode(ids, false);
  } catch (const Error& e) {
    g_last_error = e.what();
  }
  return 0;
}

const std::vector<Harness>& harnesses() {
  static const std::vector<Harness> all = {
      {"safetensors", fuzz_safetensors},
      {"checkpoint", fuzz_checkpoint},
      {"idx", fuzz_idx},
      {"vocab", fuzz_vocab},
  };
  return all;
}

}  // namespace mg::fuzz
