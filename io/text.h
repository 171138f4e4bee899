// Text files read as bytes: several files memory-mapped and addressed as one concatenated stream.
// The byte-level language-model dataset built on them (data::TextDataset) is in
// loom/data/dataset.h.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace loom::io {

namespace detail {
struct TextFilesImpl;
}  // namespace detail

/// Files memory-mapped and read as one stream of bytes: their contents one after another, in the
/// order given (an empty file adds nothing). Copies share the mappings.
class TextFiles {
 public:
  /// Maps every file of `paths`, in order. A file that cannot be opened or mapped throws
  /// std::runtime_error "[<op>] '<path>': ..."; `op` names the caller (e.g. "TextDataset").
  static TextFiles open(const std::vector<std::string>& paths, const std::string& op = "TextFiles");

  /// The total number of bytes of all files.
  uint64_t size() const;
  /// Copies bytes [offset, offset + n) of the stream to `dst` (across file boundaries); a range
  /// past size() throws std::out_of_range.
  void read(uint64_t offset, size_t n, uint8_t* dst) const;

 private:
  explicit TextFiles(std::shared_ptr<const detail::TextFilesImpl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<const detail::TextFilesImpl> impl_;
};

}  // namespace loom::io
