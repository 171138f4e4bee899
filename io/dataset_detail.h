// Internal pieces shared by the dataset readers: read-only file mappings and error helpers.
#pragma once

#include <cstdint>
#include <string>

namespace loom::io::detail {

/// A read-only, shared memory map of a whole file. An empty file maps nothing (data() is null).
/// Throws std::runtime_error "[op] '<label>': ..." when the file cannot be opened or mapped.
class MappedFile {
 public:
  MappedFile(const std::string& path, const std::string& op, const std::string& label);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  uint64_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  const uint8_t* data_ = nullptr;
  uint64_t size_ = 0;
};

std::string errno_message(int err);

}  // namespace loom::io::detail
