// Errors (DESIGN §7). User mistakes throw mg::Error or a subclass; the message starts with the op
// or class name, says what was expected and what was given, and may end with a "hint:" line.
// Internal bugs use MG_ASSERT, which throws mg::InternalError (library code never aborts).
//
//   MG_CHECK(a.dim() == 2, ShapeError, "mm: expected a 2-D tensor, got ", a.shape());
#pragma once
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace mg {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& msg) : std::runtime_error(msg) {}
};
class ShapeError : public Error {
  using Error::Error;
};
class DTypeError : public Error {
  using Error::Error;
};
class DeviceError : public Error {
  using Error::Error;
};
class IndexError : public Error {
  using Error::Error;
};
class NotImplementedError : public Error {
  using Error::Error;
};
class AutogradError : public Error {
  using Error::Error;
};
class InternalError : public Error {
  using Error::Error;
};
// A failed CUDA, cuBLAS(Lt) or cuDNN call: the message names the call, the status and the device.
class CudaError : public Error {
  using Error::Error;
};
// A device allocation that failed even after the allocator freed its cache; the message names the
// requested size and the allocator's statistics.
class OutOfMemoryError : public Error {
  using Error::Error;
};

namespace detail {
inline void stream_all(std::ostringstream&) {}
template <typename T, typename... Rest>
void stream_all(std::ostringstream& os, const T& v, const Rest&... rest);

// Shapes and index lists print as "[2, 3]".
inline void stream_one(std::ostringstream& os, const std::vector<int64_t>& v) {
  os << '[';
  for (std::size_t i = 0; i < v.size(); ++i) os << (i ? ", " : "") << v[i];
  os << ']';
}
template <typename T>
void stream_one(std::ostringstream& os, const T& v) {
  os << v;
}
template <typename T, typename... Rest>
void stream_all(std::ostringstream& os, const T& v, const Rest&... rest) {
  stream_one(os, v);
  stream_all(os, rest...);
}
}  // namespace detail

// Concatenates the arguments into a string, printing vectors of int64 as shapes.
template <typename... Args>
std::string str_cat(const Args&... args) {
  std::ostringstream os;
  detail::stream_all(os, args...);
  return os.str();
}

}  // namespace mg

#define MG_CHECK(cond, ErrorType, ...)                     \
  do {                                                     \
    if (!(cond)) throw ::mg::ErrorType(::mg::str_cat(__VA_ARGS__)); \
  } while (0)

#define MG_THROW(ErrorType, ...) throw ::mg::ErrorType(::mg::str_cat(__VA_ARGS__))

#define MG_ASSERT(cond, ...)                                                                  \
  do {                                                                                        \
    if (!(cond))                                                                              \
      throw ::mg::InternalError(::mg::str_cat("internal error at ", __FILE__, ":", __LINE__, \
                                              ": ", #cond, " ", ##__VA_ARGS__));              \
  } while (0)
