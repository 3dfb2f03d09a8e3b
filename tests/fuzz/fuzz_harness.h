// The fuzz harnesses: one plain function per reader of untrusted files, taking the file's bytes.
// Each writes the bytes to an in-memory file, runs the reader on it and returns 0 when the reader
// succeeded or threw mg::Error; any other exception, a crash or a sanitizer report is a finding.
// The same functions are linked into the libFuzzer binaries (tests/fuzz/libfuzzer/, built by
// scripts/fuzz with clang) and into the default test suite, which replays tests/fuzz/corpus/.
//
//   int rc = mg::fuzz::fuzz_safetensors(bytes.data(), bytes.size());  // 0, or an exception escapes
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace mg::fuzz {

int fuzz_safetensors(const uint8_t* data, std::size_t size);  // io::load_safetensors
int fuzz_checkpoint(const uint8_t* data, std::size_t size);   // io::load_checkpoint
int fuzz_idx(const uint8_t* data, std::size_t size);          // data::read_idx, plain or gzip'ed
int fuzz_vocab(const uint8_t* data, std::size_t size);        // data::WordPiece::load, then encode
// io::load_hf_bert on a directory whose config.json, tokenizer.json and tokenizer_config.json are
// the input's parts, split at the lines "--" (kHfBertSeparator), beside a tensor-less
// model.safetensors; then a WordPiece over the vocabulary read.
int fuzz_hf_bert(const uint8_t* data, std::size_t size);
inline constexpr const char* kHfBertSeparator = "\n--\n";

struct Harness {
  const char* name;  // also the folder of its corpus (tests/fuzz/corpus/<name>/) and dictionary
  int (*run)(const uint8_t* data, std::size_t size);
};
// The mg::Error message of this thread's last harness call, "" when the reader succeeded.
const std::string& last_error();

// All five, in the order above.
const std::vector<Harness>& harnesses();

// The path of an in-memory file (memfd) holding exactly `bytes`; one file per thread, rewritten
// by each call, so a reader sees a regular file of that size.
const std::string& memory_file(const uint8_t* data, std::size_t size);

}  // namespace mg::fuzz
