// cuBLASLt is opened at the first GEMM, not mapped at every start (cuda/lazy/cublaslt_loader.cpp):
// runs without a GPU, in every build. The dynamic loader's listing of what this test program maps
// at start (LD_TRACE_LOADED_OBJECTS, what ldd prints) must not name cuBLAS; in the real CUDA build,
// blas_library() then opens the toolkit's library through the loader, which resolves every function.
#include <catch2/catch.hpp>

#include <cstdio>
#include <fstream>
#include <string>

#include "cuda/cuda.h"

using namespace mg;

namespace {

std::string run(const std::string& command) {
  std::string out;
  FILE* p = popen(command.c_str(), "r");
  REQUIRE(p != nullptr);
  char buf[4096];
  while (const std::size_t n = fread(buf, 1, sizeof buf, p)) out.append(buf, n);
  pclose(p);
  return out;
}

bool mapped(const std::string& name) {
  std::ifstream maps("/proc/self/maps");
  for (std::string line; std::getline(maps, line);) {
    if (line.find(name) != std::string::npos) return true;
  }
  return false;
}

}  // namespace

TEST_CASE("cuBLASLt is not mapped at start-up, and blas_library() opens it in a CUDA build", "[cuda][blas]") {
  const std::string startup = run("LD_TRACE_LOADED_OBJECTS=1 /proc/self/exe 2>&1");
  INFO(startup);
  REQUIRE(startup.find("libc.so") != std::string::npos);  // the listing worked
  CHECK(startup.find("libcublasLt") == std::string::npos);
  CHECK(startup.find("libcublas.so") == std::string::npos);

  const std::string lib = cuda::blas_library();
  INFO(lib);
  if (!cuda::built_with_cuda()) {
    CHECK(lib == "none (built without CUDA)");
  } else if (lib.rfind("cuBLASLt emulated", 0) != 0) {
    CHECK(lib.find("libcublasLt.so.") != std::string::npos);
    CHECK(lib.find("loaded on first use") != std::string::npos);
    CHECK(mapped("libcublasLt"));
    CHECK(cuda::blas_library() == lib);  // opened once
  }
}
