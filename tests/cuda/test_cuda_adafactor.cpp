// Adafactor's fused CUDA step (cuda/kernels/adafactor.cu) against the fused CPU step on shapes the
// small cases of tests/optim/path_compare.h do not reach: matrices whose row, column and whole-tensor
// sums split over several blocks, a batch of matrices, a channels-last conv weight (stepped on
// contiguous copies), f64, and an O2 f32 master with its bf16 model copy; a step under a device flag
// reads nothing on the host, and a flagged step changes nothing.
#include <catch2/catch.hpp>

#include <memory>
#include <string>
#include <vector>

#include "core/factory.h"
#include "core/generator.h"
#include "cuda/cuda.h"
#include "cuda_test_util.h"
#include "optim/adafactor.h"
#include "optim/path_compare.h"
#include "test_util.h"

using namespace mg;
using test::gpu;

namespace {

struct Run {
  Tensors params;
  std::unique_ptr<optim::Adafactor> opt;
};

// Parameters of `dtype` on `device`, seeded: a [3, 40, 1500] batch of matrices, a [600, 700]
// matrix, a channels-last [16, 8, 3, 3] conv weight (its last two dimensions strided), a [5000]
// vector and a 0-d one.
Run make_run(DType dtype, Device device, bool masters) {
  Generator gen(31);
  Run r;
  for (const Shape& s : std::vector<Shape>{{3, 40, 1500}, {600, 700}, {16, 8, 3, 3}, {5000}, {}}) {
    Tensor p = to(to(randn(s, {.dtype = DType::F64}, &gen), dtype), device);
    if (s.size() == 4) p = p.contiguous(MemoryFormat::ChannelsLast);
    r.params.push_back(p.detach().requires_grad_());
  }
  r.opt = std::make_unique<optim::Adafactor>(
      r.params, optim::AdafactorOptions{.lr = 0.05, .d = 1.2, .weight_decay = 0.05, .maximize = true});
  if (masters) r.opt->use_master_weights();
  return r;
}

// Step s's gradients (the same values on both devices), then one step under a flag of value `flag`.
void step(Run& r, int s, double flag) {
  Generator gen(uint64_t(100 + s));
  for (Tensor& p : r.params) {
    const Tensor g = to(to(randn(p.shape(), {.dtype = DType::F64}, &gen) * (1.0 + s), p.dtype()), p.device());
    p.set_grad(p.is_contiguous() ? g : g.contiguous(MemoryFormat::ChannelsLast));
  }
  r.opt->step_unless_found_inf(full({1}, flag, {.dtype = DType::F32, .device = r.params[0].device()}));
}

std::vector<Tensor> snapshot(const Run& r) {
  std::vector<Tensor> out;
  for (const Tensor& p : r.params) out.push_back(clone(p.detach().to(Device::cpu())));
  for (const Tensor& p : r.opt->parameters()) {
    if (const optim::ParamState* st = r.opt->state(p)) {
      for (const auto& [name, b] : st->buffers) out.push_back(clone(b.to(Device::cpu())));
    }
    out.push_back(clone(p.detach().to(Device::cpu())));  // the master, or the parameter again
  }
  return out;
}

}  // namespace

TEST_CASE("CUDA Adafactor: split sums, batched, channels-last and 0-d parameters step as the fused CPU step, with "
          "no host read and nothing changed by a flagged step",
          "[cuda][gpu][optim][adafactor]") {
  for (const auto& [dtype, masters] : std::vector<std::pair<DType, bool>>{
           {DType::F32, false}, {DType::F64, false}, {DType::BF16, true}, {DType::F16, false}}) {
    INFO(dtype_name(dtype) << (masters ? " with f32 masters" : ""));
    Run cpu = make_run(dtype, Device::cpu(), masters), dev = make_run(dtype, gpu(), masters);
    for (int s = 0; s < 4; ++s) {
      const double flag = s == 2 ? 1.0 : 0.0;  // the third step overflowed
      step(cpu, s, flag);
      const std::vector<Tensor> before = snapshot(dev);
      const uint64_t syncs = cuda::sync_count();
      step(dev, s, flag);
      CHECK(cuda::sync_count() == syncs);  // the flag, t and the options are read on the device
      const std::vector<Tensor> got = snapshot(dev), want = snapshot(cpu);
      REQUIRE(got.size() == want.size());
      for (std::size_t k = 0; k < want.size(); ++k) {
        INFO("step " << s + 1 << ", tensor " << k);
        if (flag != 0.0) CHECK(test::bits_equal(got[k], before[k]));
        // An f16/bf16 value (the model copy) may round an f32 ulp's difference to its neighbour.
        CHECK(test::path_rel_error(got[k], want[k]) <= test::path_rtol(want[k].dtype()));
      }
      CHECK(dev.opt->last_step_skipped() == (flag != 0.0));
    }
    CHECK(dev.opt->state(dev.opt->parameters()[0])->step == 3);
    if (masters) {  // the model copies the kernel (or the channels-last copy-back) wrote: round(master)
      const Tensors ms = dev.opt->parameters();
      for (std::size_t k = 0; k < ms.size(); ++k) {
        CHECK(test::bits_equal(dev.params[k].detach().to(Device::cpu()), to(ms[k].detach(), dtype).to(Device::cpu())));
      }
    }
  }
  test::require_no_pending_cuda_error();
}
