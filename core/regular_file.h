// The readers' first check on a path they are given (checkpoints, safetensors, IDX, vocabularies,
// the EC02 corpus): a path that exists but is not a regular file is refused before it is opened.
// Opening a FIFO for reading blocks until a writer appears, and a device (/dev/zero) never ends;
// checking after the open, as fstat does, is too late for the first.
#pragma once
#include <string>

namespace mg {

// Throws mg::Error "<who>: '<path>' is not a regular file (a FIFO, a directory or a device)" when
// `path` exists and is something else. A missing path passes: the caller's open reports it.
void refuse_non_regular_file(const char* who, const std::string& path);

}  // namespace mg
