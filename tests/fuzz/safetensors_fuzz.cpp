// libFuzzer harness of the safetensors reader: the input as a file (load_safetensors(path)) and as
// a pipe (unknown length). What loads must survive a round trip through save_safetensors.
#include <sstream>

#include "fuzz_common.h"

using namespace loom;

namespace {

void round_trip(const SafetensorsLoad& loaded) {
  std::stringstream first;
  save_safetensors(first, loaded.first, loaded.second);
  const std::string bytes = first.str();
  auto again = load_safetensors(first);
  if (again.second != loaded.second) fuzz::finding("the metadata does not survive save and load");
  std::stringstream second;
  save_safetensors(second, again.first, again.second);
  if (second.str() != bytes) fuzz::finding("loaded tensors do not survive save and load");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = fuzz::write_file("input.safetensors", data, size);
  try {
    round_trip(load_safetensors(path));
  } catch (const std::runtime_error& e) {
    fuzz::expect_clear(e, "[load_safetensors] '" + path + "': ");
  }
  fuzz::PipeBuf pipe(data, size);
  std::istream in(&pipe);
  try {
    round_trip(load_safetensors(in));
  } catch (const std::runtime_error& e) {
    fuzz::expect_clear(e, "[load_safetensors] '<stream>': ");
  }
  return 0;
}
