// libFuzzer harness of the GGUF reader (load_gguf, which reads a file). What loads must survive a
// round trip through save_gguf: the arrays and metadata save_gguf can write (not the uint32
// weights of quantized tensors, empty metadata arrays or an alignment beyond save_gguf's limit)
// are saved, loaded and saved again, and both saves must give the same bytes.
#include "fuzz_common.h"

using namespace loom;

namespace {

std::string bytes_of(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

void round_trip(const GGUFLoad& loaded) {
  std::unordered_map<std::string, array> arrays;
  for (const auto& [name, a] : loaded.first) {
    if (a.dtype() != uint32) arrays.emplace(name, a);  // a quantized tensor's packed weights
  }
  std::unordered_map<std::string, GGUFMetaData> meta;
  for (const auto& [key, v] : loaded.second) {
    const array* a = std::get_if<array>(&v);
    if (a && a->ndim() == 1 && a->size() == 0) continue;
    if (key == "general.alignment" && a && a->dtype() == uint32 && a->ndim() == 0) {
      const uint32_t al = array(*a).item<uint32_t>();
      if (al == 0 || al > (1u << 20)) continue;
    }
    meta.emplace(key, v);
  }
  const std::string first = (fuzz::scratch() / "first.gguf").string();
  const std::string second = (fuzz::scratch() / "second.gguf").string();
  save_gguf(first, arrays, meta);
  auto again = load_gguf(first);
  save_gguf(second, again.first, again.second);
  if (bytes_of(first) != bytes_of(second)) fuzz::finding("a loaded GGUF file does not survive save_gguf and load_gguf");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = fuzz::write_file("input.gguf", data, size);
  GGUFLoad loaded;
  try {
    loaded = load_gguf(path);
  } catch (const std::runtime_error& e) {
    fuzz::expect_clear(e, "[load_gguf] '" + path + "': ");
    return 0;
  }
  round_trip(loaded);
  return 0;
}
