// Built against an installed Loom by the install test: prints 6 when the library works, then the
// instruction set of the copy of the library the loader picked.
#include <loom/loom.h>

#include <iostream>

int main() {
  using namespace loom;
  array x({1.0f, 2.0f, 3.0f});
  auto g = grad([](const array& a) { return sum(a * a); })(x);
  std::cout << sum(g).item<float>() * 0.5f << "\n";  // (2 + 4 + 6) / 2
  std::cout << kernel_isa() << "\n";
  return 0;
}
