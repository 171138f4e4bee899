// libFuzzer harness of the .npy reader: the input as a file (load(path), which also checks that
// the data ends the file) and as a pipe (load(istream) with an unknown length, whose reads grow
// as the bytes arrive). A loaded array must survive a round trip through save.
#include <sstream>

#include "fuzz_common.h"

using namespace loom;

namespace {

// save then load gives the same bytes again.
void round_trip(const array& a) {
  std::stringstream first;
  save(first, a);
  const std::string bytes = first.str();
  std::stringstream second;
  save(second, load(first));
  if (second.str() != bytes) fuzz::finding("a loaded array does not survive save and load");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = fuzz::write_file("input.npy", data, size);
  try {
    round_trip(load(path));
  } catch (const std::runtime_error& e) {
    fuzz::expect_clear(e, "[load] '" + path + "': ");
  }
  fuzz::PipeBuf pipe(data, size);
  std::istream in(&pipe);
  try {
    round_trip(load(in));
  } catch (const std::runtime_error& e) {
    fuzz::expect_clear(e, "[load] '<stream>': ");
  }
  return 0;
}
