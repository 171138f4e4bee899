// Text files memory-mapped and addressed as one concatenated stream of bytes.
#include "loom/io/text.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>

#include "loom/io/detail.h"

namespace loom::io {

namespace detail {

struct TextFilesImpl {
  std::vector<std::unique_ptr<MappedFile>> files;  // the non-empty ones, in order
  std::vector<uint64_t> starts;                    // offset of each file in the stream
  uint64_t total = 0;
};

}  // namespace detail

TextFiles TextFiles::open(const std::vector<std::string>& paths, const std::string& op) {
  auto impl = std::make_shared<detail::TextFilesImpl>();
  for (const auto& path : paths) {
    auto map = std::make_unique<detail::MappedFile>(path, op, path);
    if (map->size() == 0) continue;
    impl->starts.push_back(impl->total);
    impl->total += map->size();
    impl->files.push_back(std::move(map));
  }
  return TextFiles(std::move(impl));
}

uint64_t TextFiles::size() const { return impl_->total; }

void TextFiles::read(uint64_t off, size_t n, uint8_t* dst) const {
  const auto& t = *impl_;
  if (off > t.total || n > t.total - off) {
    throw std::out_of_range("[TextFiles::read] bytes [" + std::to_string(off) + ", " + std::to_string(off + n) +
                            ") are outside the " + std::to_string(t.total) + " bytes of the files");
  }
  if (n == 0) return;
  size_t f = static_cast<size_t>(std::upper_bound(t.starts.begin(), t.starts.end(), off) - t.starts.begin()) - 1;
  while (n > 0) {
    const uint64_t in_file = off - t.starts[f];
    const size_t take = static_cast<size_t>(std::min<uint64_t>(n, t.files[f]->size() - in_file));
    std::memcpy(dst, t.files[f]->data() + in_file, take);
    dst += take;
    off += take;
    n -= take;
    ++f;
  }
}

}  // namespace loom::io
