// Shared by the libFuzzer harnesses (tests/fuzz/README.md): a temporary directory per process for
// the readers that take paths, the one model the checkpoint seeds and harness share, and the rule
// that every error a reader gives must be one its API documents, naming the function and file.
#pragma once

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <streambuf>
#include <string>

#include "loom/loom.h"

namespace loom::fuzz {

/// This process's scratch directory (in RAM when /dev/shm is writable), removed at exit.
inline const std::filesystem::path& scratch() {
  static const std::filesystem::path dir = [] {
    std::filesystem::path base = std::filesystem::temp_directory_path();
    if (::access("/dev/shm", W_OK) == 0) base = "/dev/shm";
    std::filesystem::path d = base / ("loom_fuzz_" + std::to_string(::getpid()));
    std::filesystem::remove_all(d);
    std::filesystem::create_directories(d);
    std::atexit([] {
      std::error_code ec;
      std::filesystem::remove_all(scratch(), ec);
    });
    return d;
  }();
  return dir;
}

/// Writes the bytes to scratch()/name and returns the path.
inline std::string write_file(const std::string& name, const uint8_t* data, size_t size) {
  const std::string path = (scratch() / name).string();
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  f.close();
  if (!f) {
    std::fprintf(stderr, "fuzz harness: cannot write %s\n", path.c_str());
    std::abort();
  }
  return path;
}

/// A finding that is no crash: print it and abort, so libFuzzer keeps the input.
[[noreturn]] inline void finding(const std::string& what) {
  std::fprintf(stderr, "FINDING: %s\n", what.c_str());
  std::fflush(stderr);
  std::abort();
}

/// A documented error must start with `prefix` ("[load] '<path>'": the function and the file).
inline void expect_clear(const std::exception& e, const std::string& prefix) {
  const std::string what = e.what();
  if (what.compare(0, prefix.size(), prefix) != 0) finding("an error that does not start with \"" + prefix + "\": " + what);
}

/// A stream buffer over bytes that cannot seek, like a pipe: the readers' unknown-length paths.
class PipeBuf : public std::streambuf {
 public:
  PipeBuf(const uint8_t* data, size_t size) : data_(reinterpret_cast<const char*>(data), size) {
    setg(data_.data(), data_.data(), data_.data() + data_.size());
  }

 private:
  std::string data_;
};

/// The model of the checkpoint seeds and harness.
struct Model : nn::Module {
  nn::Linear l1{3, 4}, l2{4, 2};
  Model() {
    register_module("l1", l1);
    register_module("l2", l2);
  }
  array operator()(const array& x) { return l2(nn::relu(l1(x))); }
};

}  // namespace loom::fuzz
