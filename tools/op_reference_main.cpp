// Prints the generated op reference (docs/ops.md).
#include <iostream>

#include "ops/op_reference.h"

int main() {
  std::cout << mg::op_reference_markdown();
  return 0;
}
