#include "mixgrad/core/regular_file.h"

#include <sys/stat.h>

#include "mixgrad/core/error.h"

namespace mg {

void refuse_non_regular_file(const char* who, const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return;  // missing or unreadable: the open says why
  MG_CHECK(S_ISREG(st.st_mode), Error, who, ": '", path, "' is not a regular file (",
           S_ISFIFO(st.st_mode) ? "a FIFO" : S_ISDIR(st.st_mode) ? "a directory" : "a device or socket",
           ")\n  hint: give the path of the file itself");
}

}  // namespace mg
