// The harness functions of fuzz_harness.h. The readers take paths, so each input goes through one
// memfd per thread (/proc/self/fd/N: a regular file that never touches the disk), truncated and
// rewritten for every input. Only mg::Error is caught: that is the readers' contract (docs/io.md).
#include "fuzz/fuzz_harness.h"

#include <sys/mman.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <stdexcept>
#include <thread>

#include "core/error.h"
#include "core/factory.h"
#include "data/idx.h"
#include "data/text/wordpiece.h"
#include "io/checkpoint.h"
#include "io/hf_bert.h"
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

int fuzz_hf_bert(const uint8_t* data, std::size_t size) {
  namespace fs = std::filesystem;
  // One directory per thread, rewritten for every input (the reader takes a directory).
  struct Dir {
    fs::path path;
    Dir() {
      path = fs::temp_directory_path() / ("mg_fuzz_hf_bert_" + std::to_string(::getpid()) + "_" +
                                          std::to_string(std::hash<std::thread::id>()(std::this_thread::get_id())));
      fs::create_directories(path);
      // The weights load_hf_bert compares with the seed's config.json (vocab 8, hidden 4, one
      // layer of intermediate size 8, 16 positions, 2 token types): a fuzzed config that
      // describes another model is refused there, after the tokenizer files were read.
      const TensorOptions f32{.dtype = DType::F32};
      io::save_safetensors((path / "model.safetensors").string(),
                           {{"embeddings.word_embeddings.weight", zeros({8, 4}, f32)},
                            {"embeddings.position_embeddings.weight", zeros({16, 4}, f32)},
                            {"embeddings.token_type_embeddings.weight", zeros({2, 4}, f32)},
                            {"encoder.layer.0.intermediate.dense.weight", zeros({8, 4}, f32)}});
    }
    ~Dir() {
      std::error_code ec;
      fs::remove_all(path, ec);
    }
  };
  thread_local Dir dir;
  const std::string input(reinterpret_cast<const char*>(data), size);
  const std::string sep = kHfBertSeparator;
  const char* names[] = {"config.json", "tokenizer.json", "tokenizer_config.json"};
  std::size_t at = 0;
  for (int k = 0; k < 3; ++k) {
    const fs::path file = dir.path / names[k];
    std::error_code ec;
    fs::remove(file, ec);
    if (at == std::string::npos) continue;  // fewer parts: that file is absent
    const std::size_t end = input.find(sep, at);
    std::ofstream(file, std::ios::binary) << input.substr(at, end == std::string::npos ? std::string::npos : end - at);
    at = end == std::string::npos ? std::string::npos : end + sep.size();
  }
  g_last_error.clear();
  try {
    const io::HfBert hf = io::load_hf_bert(dir.path.string());
    const data::WordPiece tok(hf.vocab, {.lowercase = hf.lowercase, .max_input_chars_per_word = hf.max_input_chars_per_word});
    (void)tok.encode("In the beginning [MASK] created");
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
      {"hf_bert", fuzz_hf_bert},
  };
  return all;
}

}  // namespace mg::fuzz
