// libFuzzer harness of the IDX reader (io::IdxFile): the input as a raw file, or, when it starts
// with gzip's magic bytes, as a .gz that is decompressed into a cache directory (emptied after
// every input, so no input reads another's cache file). Whatever opens must read all its rows.
#include <cstring>

#include "fuzz_common.h"

using namespace loom;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = fuzz::write_file("input.idx", data, size);
  const std::string cache = (fuzz::scratch() / "cache").string();
  try {
    io::IdxFile f = io::IdxFile::open(path, cache);
    array all = f.read_all();
    if (all.shape() != f.shape() || all.dtype() != f.dtype()) fuzz::finding("read_all's shape or dtype is not the file's");
    if (f.rows() > 0) {
      // The last row alone, and converted, as a dataset reads labels.
      array last = f.read_rows({f.rows() - 1});
      const size_t row = last.nbytes();
      if (row > 0 && std::memcmp(last.raw_data(), static_cast<const char*>(all.raw_data()) + all.nbytes() - row, row) != 0) {
        fuzz::finding("read_rows and read_all disagree on the last row");
      }
      f.read_rows({0, f.rows() - 1}, float32);
    }
  } catch (const std::runtime_error& e) {
    fuzz::expect_clear(e, "[IdxFile] '" + path + "'");
  } catch (const std::invalid_argument& e) {
    fuzz::expect_clear(e, "[IdxFile::read_rows] ");  // repeated rows past Loom's shape limit
  }
  std::error_code ec;
  std::filesystem::remove_all(cache, ec);
  return 0;
}
