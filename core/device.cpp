#include "mixgrad/core/device.h"

#include "mixgrad/core/error.h"

namespace mg {

Device Device::parse(const std::string& s) {
  if (s == "cpu") return cpu();
  if (s == "cuda") return cuda(0);
  // "cuda:N" with N in decimal without leading zeros (PyTorch refuses "cuda:01" too).
  if (s.rfind("cuda:", 0) == 0 && s.size() > 5 && !(s[5] == '0' && s.size() > 6)) {
    int idx = 0;
    for (std::size_t i = 5; i < s.size(); ++i) {
      MG_CHECK(s[i] >= '0' && s[i] <= '9' && idx < 100000, DeviceError, "Device: cannot parse \"", s,
               "\"; expected \"cpu\", \"cuda\" or \"cuda:N\"");
      idx = idx * 10 + (s[i] - '0');
    }
    return cuda(idx);
  }
  MG_THROW(DeviceError, "Device: cannot parse \"", s, "\"; expected \"cpu\", \"cuda\" or \"cuda:N\"");
}

std::string Device::str() const { return is_cpu() ? "cpu" : "cuda:" + std::to_string(index); }

}  // namespace mg
