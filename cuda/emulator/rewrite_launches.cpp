// rewrite_launches IN OUT: the build tool of MG_WITH_CUDA=EMULATE (cmake/cuda_emulator.cmake) that
// copies a CUDA source with its kernel launches rewritten for the CUDA emulator (launch_rewrite.h).
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>

#include "launch_rewrite.h"

int main(int argc, char** argv) {
  if (argc != 3) {
    std::cerr << "usage: rewrite_launches IN OUT\n";
    return 2;
  }
  std::ifstream in(argv[1], std::ios::binary);
  if (!in) {
    std::cerr << "rewrite_launches: cannot read " << argv[1] << "\n";
    return 1;
  }
  std::stringstream buf;
  buf << in.rdbuf();
  std::string error;
  const std::string out = mg_emu::rewrite_launches(buf.str(), error);
  if (!error.empty()) {
    std::cerr << argv[1] << ": rewrite_launches: " << error << "\n";
    return 1;
  }
  std::ofstream o(argv[2], std::ios::binary);
  o << out;
  if (!o) {
    std::cerr << "rewrite_launches: cannot write " << argv[2] << "\n";
    return 1;
  }
  return 0;
}
