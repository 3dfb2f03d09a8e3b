#include "mixgrad/distributed/state_dict_broadcast.h"

#include <cstring>
#include <exception>
#include <map>
#include <string>
#include <vector>

#include "mixgrad/core/error.h"
#include "mixgrad/autograd/grad_mode.h"
#include "mixgrad/core/factory.h"
#include "mixgrad/distributed/error.h"
#include "mixgrad/ops/ops.h"

namespace mg::distributed {

namespace {

constexpr const char* kWho = "broadcast_state_dict";

// The header: little-endian fixed-width integers and length-prefixed byte strings.
class Writer {
 public:
  void u64(uint64_t v) { bytes_.append(reinterpret_cast<const char*>(&v), sizeof v); }
  void str(const std::string& s) {
    u64(s.size());
    bytes_ += s;
  }
  const std::string& bytes() const { return bytes_; }

 private:
  std::string bytes_;
};

class Reader {
 public:
  explicit Reader(std::string bytes) : bytes_(std::move(bytes)) {}
  uint64_t u64() {
    need(sizeof(uint64_t));
    uint64_t v;
    std::memcpy(&v, bytes_.data() + pos_, sizeof v);
    pos_ += sizeof v;
    return v;
  }
  std::string str() {
    const uint64_t n = u64();
    need(n);
    std::string s = bytes_.substr(pos_, n);
    pos_ += n;
    return s;
  }
  bool done() const { return pos_ == bytes_.size(); }

 private:
  // Root and receivers run the same code, so a short header means a broken group, not bad input.
  void need(uint64_t n) const {
    MG_CHECK(n <= bytes_.size() - pos_, distributed::DistributedError, kWho, ": the header ends early (", bytes_.size(),
             " bytes); the ranks disagree on the call");
  }
  std::string bytes_;
  std::size_t pos_ = 0;
};

struct TensorMeta {
  std::string name;
  DType dtype;
  Shape shape;
};

std::string encode(const StateDict& s) {
  Writer w;
  w.u64(s.ints.size());
  for (const auto& [k, v] : s.ints) {
    w.str(k);
    w.u64(uint64_t(v));
  }
  w.u64(s.floats.size());
  for (const auto& [k, v] : s.floats) {
    w.str(k);
    uint64_t bits;
    std::memcpy(&bits, &v, sizeof bits);  // exact, NaN payloads and signed zeros included
    w.u64(bits);
  }
  w.u64(s.strings.size());
  for (const auto& [k, v] : s.strings) {
    w.str(k);
    w.str(v);
  }
  w.u64(s.tensors.size());
  for (const auto& [name, t] : s.tensors) {
    MG_CHECK(t.defined(), Error, kWho, ": tensor '", name, "' is undefined");
    w.str(name);
    w.u64(uint64_t(t.dtype()));
    w.u64(t.shape().size());
    for (int64_t d : t.shape()) w.u64(uint64_t(d));
  }
  return w.bytes();
}

StateDict decode(std::string bytes, std::vector<TensorMeta>* metas) {
  Reader r(std::move(bytes));
  StateDict s;
  for (uint64_t n = r.u64(), i = 0; i < n; ++i) {
    std::string k = r.str();
    s.ints[k] = int64_t(r.u64());
  }
  for (uint64_t n = r.u64(), i = 0; i < n; ++i) {
    std::string k = r.str();
    const uint64_t bits = r.u64();
    double v;
    std::memcpy(&v, &bits, sizeof v);
    s.floats[k] = v;
  }
  for (uint64_t n = r.u64(), i = 0; i < n; ++i) {
    std::string k = r.str();
    s.strings[k] = r.str();
  }
  for (uint64_t n = r.u64(), i = 0; i < n; ++i) {
    TensorMeta m;
    m.name = r.str();
    m.dtype = DType(r.u64());
    m.shape.resize(r.u64());
    for (int64_t& d : m.shape) d = int64_t(r.u64());
    metas->push_back(std::move(m));
  }
  MG_CHECK(r.done(), distributed::DistributedError, kWho, ": the header has trailing bytes; the ranks disagree on the call");
  return s;
}

}  // namespace

StateDict broadcast_state_dict(ProcessGroup& group, const StateDict& state, int root, Device device) {
  MG_CHECK(root >= 0 && root < group.world_size(), Error, kWho, ": root ", root, " is not a rank of a group of ",
           group.world_size());
  const bool is_root = group.rank() == root;
  NoGradGuard no_grad;

  // 1. The header's length (-1: the root cannot send its state, and every rank throws), then the header.
  std::string mine;
  std::exception_ptr refused;
  if (is_root) {
    try {
      mine = encode(state);
    } catch (...) {
      refused = std::current_exception();
    }
  }
  Tensor length = from_vector<int64_t>({refused ? int64_t(-1) : int64_t(mine.size())}, {1}).to(device);
  group.broadcast(length, root);
  const int64_t n = length.to(Device::cpu()).data<int64_t>()[0];
  if (refused) std::rethrow_exception(refused);
  MG_CHECK(n >= 0, distributed::DistributedError, kWho, ": rank ", root,
           " could not send its state (its error says why); nothing was sent");
  Tensor header = empty({n}, {.dtype = DType::U8});
  if (is_root) std::memcpy(header.data_ptr(), mine.data(), mine.size());
  header = header.to(device);
  group.broadcast(header, root);
  header = header.to(Device::cpu());
  std::vector<TensorMeta> metas;
  StateDict out = decode(std::string(static_cast<const char*>(header.data_ptr()), std::size_t(n)), &metas);

  // 2. The tensors: one flat tensor per dtype (in DType order, the same on every rank).
  std::map<DType, std::vector<std::size_t>> by_dtype;
  for (std::size_t i = 0; i < metas.size(); ++i) {
    if (shape_numel(metas[i].shape) > 0) by_dtype[metas[i].dtype].push_back(i);
  }
  std::vector<Tensor> received(metas.size());
  for (const auto& [dtype, indices] : by_dtype) {
    int64_t total = 0;
    for (std::size_t i : indices) total += shape_numel(metas[i].shape);
    Tensor flat;
    if (is_root) {
      Tensors parts;
      for (std::size_t i : indices) parts.push_back(reshape(state.tensors[i].second.to(device), {-1}));
      flat = parts.size() == 1 ? parts[0].clone() : cat(parts, 0);
    } else {
      flat = empty({total}, {.dtype = dtype, .device = device});
    }
    group.broadcast(flat, root);
    int64_t offset = 0;
    for (std::size_t i : indices) {
      const int64_t k = shape_numel(metas[i].shape);
      received[i] = reshape(flat.narrow(0, offset, k), metas[i].shape).clone();
      offset += k;
    }
  }
  for (std::size_t i = 0; i < metas.size(); ++i) {
    Tensor t = received[i].defined() ? received[i] : empty(metas[i].shape, {.dtype = metas[i].dtype, .device = device});
    out.tensors.emplace_back(metas[i].name, std::move(t));
  }
  return out;
}

}  // namespace mg::distributed
