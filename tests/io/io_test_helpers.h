// Helpers for the io tests: a per-test temporary directory and byte-level file building.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <streambuf>
#include <string>

#include "../test_utils.h"
#include "loom/io/io.h"

namespace loom::iotest {

/// Gives each test an empty directory of its own, removed afterwards.
class TempDirTest : public ::testing::Test {
 protected:
  std::filesystem::path dir;

  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    // A RAM-backed directory when there is one: every save ends with fsync, which costs real time
    // on a disk shared with other jobs.
    std::filesystem::path base = std::filesystem::temp_directory_path();
    if (::access("/dev/shm", W_OK) == 0) base = "/dev/shm";
    dir = base / ("loom_io_" + std::to_string(::getpid()) + "_" + info->test_suite_name() + "_" + info->name());
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
  }
  void TearDown() override {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
  std::string path(const std::string& name) const { return (dir / name).string(); }

  /// Files in the directory, sorted (to check that no temporary is left behind).
  std::vector<std::string> listing() const {
    std::vector<std::string> names;
    for (const auto& e : std::filesystem::directory_iterator(dir)) names.push_back(e.path().filename().string());
    std::sort(names.begin(), names.end());
    return names;
  }
};

inline void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(f.good()) << path;
}

inline std::string read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

/// Bytes from a list of values 0..255.
inline std::string bytes(std::initializer_list<int> v) {
  std::string s;
  for (int b : v) s += static_cast<char>(b);
  return s;
}

inline std::string le(uint64_t v, int n) {
  std::string s;
  for (int i = 0; i < n; ++i) s += static_cast<char>((v >> (8 * i)) & 0xff);
  return s;
}

/// A safetensors file's bytes without Loom's "loom.crc32.*" metadata entries, as a writer that
/// adds no checksums makes it: the entries are cut out of the JSON and the header padded with as
/// many spaces at its end, so its length and the data offsets stay as they were.
inline std::string strip_checksums(const std::string& file) {
  uint64_t n = 0;
  for (int b = 7; b >= 0; --b) n = (n << 8) | static_cast<unsigned char>(file[b]);
  std::string header = file.substr(8, n);
  const std::regex with_comma("\"loom\\.crc32\\.[^\"]*\":\"[0-9a-fA-F]{8}\",");
  const std::regex last(",?\"loom\\.crc32\\.[^\"]*\":\"[0-9a-fA-F]{8}\"");
  header = std::regex_replace(std::regex_replace(header, with_comma, ""), last, "");
  header.append(n - header.size(), ' ');
  return file.substr(0, 8) + header + file.substr(8 + n);
}

/// A stream buffer over a string that cannot seek (like a pipe): sizes are unknown in advance.
class PipeBuf : public std::streambuf {
 public:
  explicit PipeBuf(std::string data) : data_(std::move(data)) {
    setg(data_.data(), data_.data(), data_.data() + data_.size());
  }

 private:
  std::string data_;
};

}  // namespace loom::iotest
