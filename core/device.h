// Devices: "cpu" and "cuda:N". A Device is a small value type compared by kind and index.
//
//   mg::Device d = mg::Device::parse("cuda:1");  // d.type == DeviceType::CUDA, d.index == 1
#pragma once
#include <cstdint>
#include <ostream>
#include <string>

namespace mg {

enum class DeviceType : uint8_t { CPU, CUDA };

struct Device {
  DeviceType type = DeviceType::CPU;
  int index = 0;

  static Device cpu() { return {DeviceType::CPU, 0}; }
  static Device cuda(int i = 0) { return {DeviceType::CUDA, i}; }
  // Parses "cpu", "cuda", "cuda:N"; throws mg::DeviceError otherwise.
  static Device parse(const std::string& s);
  bool is_cpu() const { return type == DeviceType::CPU; }
  bool is_cuda() const { return type == DeviceType::CUDA; }
  bool operator==(const Device& o) const { return type == o.type && index == o.index; }
  bool operator!=(const Device& o) const { return !(*this == o); }
  // "cpu" or "cuda:0".
  std::string str() const;
};

inline std::ostream& operator<<(std::ostream& os, const Device& d) { return os << d.str(); }

}  // namespace mg
