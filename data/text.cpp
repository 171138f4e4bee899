// Byte-level text: the files' bytes (io::TextFiles) cut into windows of context + 1 bytes (inputs
// and next-byte targets), and the fortune(6) file list.
#include <algorithm>
#include <climits>
#include <filesystem>
#include <stdexcept>

#include "loom/data/dataset.h"

namespace loom::data {

namespace fs = std::filesystem;

namespace {

// The arguments checked before any file is opened.
io::TextFiles open_checked(const std::vector<std::string>& files, int context, int64_t stride) {
  if (files.empty()) throw std::invalid_argument("[TextDataset] needs at least one file");
  if (context < 1) {
    throw std::invalid_argument("[TextDataset] context must be at least 1, got " + std::to_string(context));
  }
  if (stride < 0) throw std::invalid_argument("[TextDataset] stride must be >= 0, got " + std::to_string(stride));
  return io::TextFiles::open(files, "TextDataset");
}

}  // namespace

TextDataset::TextDataset(const std::vector<std::string>& files, int context, int64_t stride)
    : text_(open_checked(files, context, stride)), context_(context), stride_(stride == 0 ? context : stride) {
  const uint64_t total = text_.size();
  const uint64_t window = uint64_t(context) + 1;
  if (total < window) {
    throw std::invalid_argument("[TextDataset] the " + std::to_string(files.size()) + " file(s) hold " +
                                std::to_string(total) +
                                " bytes, fewer than context + 1 = " + std::to_string(window) + ": no sample fits");
  }
  windows_ = static_cast<int64_t>((total - window) / static_cast<uint64_t>(stride_) + 1);
}

Batch TextDataset::get(const std::vector<int64_t>& indices) const {
  for (int64_t i : indices) {
    if (i < 0 || i >= windows_) {
      throw std::out_of_range("[TextDataset::get] sample " + std::to_string(i) + " is out of range for " +
                              std::to_string(windows_) + " windows");
    }
  }
  if (indices.size() > size_t(INT_MAX)) throw std::invalid_argument("[TextDataset::get] too many indices");
  const size_t n = indices.size(), T = static_cast<size_t>(context_);
  Shape shape{static_cast<int>(n), context_};
  array xa(allocator::malloc(n * T * sizeof(int32_t)), shape, int32);
  array ya(allocator::malloc(n * T * sizeof(int32_t)), shape, int32);
  auto* x = static_cast<int32_t*>(xa.raw_data());
  auto* y = static_cast<int32_t*>(ya.raw_data());
  std::vector<uint8_t> window(T + 1);
  for (size_t r = 0; r < n; ++r) {
    text_.read(static_cast<uint64_t>(indices[r]) * static_cast<uint64_t>(stride_), T + 1, window.data());
    int32_t* xr = x + r * T;
    int32_t* yr = y + r * T;
    for (size_t k = 0; k < T; ++k) {
      xr[k] = window[k];
      yr[k] = window[k + 1];
    }
  }
  return {xa, ya};
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

}  // namespace loom::data
