// Byte-level text: files memory-mapped and addressed as one concatenated stream of bytes, cut into
// windows of context + 1 bytes (inputs and next-byte targets).
#include <algorithm>
#include <climits>
#include <cstring>
#include <filesystem>
#include <stdexcept>

#include "loom/io/dataset.h"
#include "loom/io/detail.h"

namespace loom::io {

namespace fs = std::filesystem;

namespace detail {

struct TextImpl {
  std::vector<std::unique_ptr<MappedFile>> files;  // the non-empty ones, in order
  std::vector<uint64_t> starts;                    // offset of each file in the stream
  uint64_t total = 0;
  int context = 0;
  int64_t stride = 0;
  int64_t windows = 0;

  // Copies bytes [off, off + n) of the stream (which must exist) to dst.
  void copy(uint64_t off, size_t n, uint8_t* dst) const {
    size_t f = static_cast<size_t>(std::upper_bound(starts.begin(), starts.end(), off) - starts.begin()) - 1;
    while (n > 0) {
      const uint64_t in_file = off - starts[f];
      const size_t take = static_cast<size_t>(std::min<uint64_t>(n, files[f]->size() - in_file));
      std::memcpy(dst, files[f]->data() + in_file, take);
      dst += take;
      off += take;
      n -= take;
      ++f;
    }
  }
};

}  // namespace detail

TextDataset::TextDataset(const std::vector<std::string>& files, int context, int64_t stride) {
  if (files.empty()) throw std::invalid_argument("[TextDataset] needs at least one file");
  if (context < 1) {
    throw std::invalid_argument("[TextDataset] context must be at least 1, got " + std::to_string(context));
  }
  if (stride < 0) throw std::invalid_argument("[TextDataset] stride must be >= 0, got " + std::to_string(stride));
  auto impl = std::make_shared<detail::TextImpl>();
  impl->context = context;
  impl->stride = stride == 0 ? context : stride;
  for (const auto& path : files) {
    auto map = std::make_unique<detail::MappedFile>(path, "TextDataset", path);
    if (map->size() == 0) continue;
    impl->starts.push_back(impl->total);
    impl->total += map->size();
    impl->files.push_back(std::move(map));
  }
  const uint64_t window = uint64_t(context) + 1;
  if (impl->total < window) {
    throw std::invalid_argument("[TextDataset] the " + std::to_string(files.size()) + " file(s) hold " +
                                std::to_string(impl->total) +
                                " bytes, fewer than context + 1 = " + std::to_string(window) + ": no sample fits");
  }
  impl->windows = static_cast<int64_t>((impl->total - window) / static_cast<uint64_t>(impl->stride) + 1);
  impl_ = std::move(impl);
}

int64_t TextDataset::size() const { return impl_->windows; }
int TextDataset::context() const { return impl_->context; }
int64_t TextDataset::stride() const { return impl_->stride; }
int64_t TextDataset::num_bytes() const { return static_cast<int64_t>(impl_->total); }

Batch TextDataset::get(const std::vector<int64_t>& indices) const {
  const auto& t = *impl_;
  for (int64_t i : indices) {
    if (i < 0 || i >= t.windows) {
      throw std::out_of_range("[TextDataset::get] sample " + std::to_string(i) + " is out of range for " +
                              std::to_string(t.windows) + " windows");
    }
  }
  if (indices.size() > size_t(INT_MAX)) throw std::invalid_argument("[TextDataset::get] too many indices");
  const size_t n = indices.size(), T = static_cast<size_t>(t.context);
  Shape shape{static_cast<int>(n), t.context};
  detail::BufferGuard xb(allocator::malloc(n * T * sizeof(int32_t)));
  detail::BufferGuard yb(allocator::malloc(n * T * sizeof(int32_t)));
  auto* x = static_cast<int32_t*>(xb.get().ptr);
  auto* y = static_cast<int32_t*>(yb.get().ptr);
  std::vector<uint8_t> window(T + 1);
  for (size_t r = 0; r < n; ++r) {
    t.copy(static_cast<uint64_t>(indices[r]) * static_cast<uint64_t>(t.stride), T + 1, window.data());
    int32_t* xr = x + r * T;
    int32_t* yr = y + r * T;
    for (size_t k = 0; k < T; ++k) {
      xr[k] = window[k];
      yr[k] = window[k + 1];
    }
  }
  return {array(xb.release(), shape, int32), array(yb.release(), shape, int32)};
}

std::vector<std::string> fortune_files(const std::string& dir) {
  auto ends_with = [](const std::string& s, const std::string& suffix) {
    return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  std::error_code ec;
  fs::directory_iterator it(dir, ec);
  if (ec) throw std::runtime_error("[fortune_files] cannot list '" + dir + "': " + ec.message());
  std::vector<std::string> out;
  for (const auto& entry : it) {
    const std::string name = entry.path().filename().string();
    if (name.empty() || name[0] == '.' || ends_with(name, ".dat") || ends_with(name, ".u8")) continue;
    std::error_code sec;
    if (!fs::is_regular_file(entry.path(), sec)) continue;  // follows symlinks; skips directories
    out.push_back(entry.path().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace loom::io
