// libFuzzer harness of the text readers (io::TextFiles, data::TextDataset). Any bytes are text, so
// the harness checks what they read: the first two input bytes pick the context and the stride,
// the third where the rest is cut into two files, and every window must hold the files' bytes.
#include "fuzz_common.h"

using namespace loom;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 3) return 0;
  const int context = 1 + data[0] % 32;
  const int64_t stride = data[1] % 8;  // 0: the context
  const std::string text(reinterpret_cast<const char*>(data) + 3, size - 3);
  const size_t cut = text.empty() ? 0 : data[2] % (text.size() + 1);
  const std::string a = fuzz::write_file("a.txt", data + 3, cut);
  const std::string b = fuzz::write_file("b.txt", data + 3 + cut, text.size() - cut);

  io::TextFiles files = io::TextFiles::open({a, b});
  if (files.size() != text.size()) fuzz::finding("TextFiles::size is not the files' total size");
  std::string back(text.size(), '\0');
  files.read(0, back.size(), reinterpret_cast<uint8_t*>(back.data()));
  if (back != text) fuzz::finding("TextFiles::read does not give the files' bytes");

  try {
    data::TextDataset ds({a, b}, context, stride);
    const int64_t step = stride == 0 ? context : stride;
    const int64_t n = ds.size();
    if (n != static_cast<int64_t>((text.size() - context - 1) / step + 1)) fuzz::finding("wrong number of windows");
    auto [x, y] = ds.get({0, n - 1});
    const auto xs = x.to_vector<int32_t>(), ys = y.to_vector<int32_t>();
    for (int r = 0; r < 2; ++r) {
      const size_t start = static_cast<size_t>((r == 0 ? 0 : n - 1) * step);
      for (int k = 0; k < context; ++k) {
        if (xs[r * context + k] != static_cast<uint8_t>(text[start + k]) ||
            ys[r * context + k] != static_cast<uint8_t>(text[start + k + 1])) {
          fuzz::finding("a window does not hold the files' bytes");
        }
      }
    }
  } catch (const std::invalid_argument& e) {
    fuzz::expect_clear(e, "[TextDataset] ");  // too few bytes for one window
    if (text.size() >= static_cast<size_t>(context) + 1) fuzz::finding(std::string("refused enough text: ") + e.what());
  }
  return 0;
}
