#include "mixgrad/ops/cpu/onednn_runtime.h"

#include <oneapi/dnnl/dnnl_debug.h>

#include "mixgrad/core/error.h"

namespace mg::cpu::onednn {

const dnnl::engine& engine() {
  static const dnnl::engine e(dnnl::engine::kind::cpu, 0);
  return e;
}

dnnl::stream& stream() {
  thread_local dnnl::stream s(engine());
  return s;
}

void rethrow(const dnnl::error& e, const char* what) {
  MG_THROW(InternalError, "oneDNN ", what, " failed: ", e.what(), " (", dnnl_status2str(e.status), ")");
}

dnnl::primitive_attr user_scratchpad() {
  dnnl::primitive_attr a;
  a.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return a;
}

}  // namespace mg::cpu::onednn
