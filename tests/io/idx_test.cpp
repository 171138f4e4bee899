// The IDX file reader (io::IdxFile): raw and gzipped files, the decompression cache, and damaged files.
#include "loom/io/idx.h"

#include <sys/stat.h>

#include <cmath>
#include <cstdlib>
#include <limits>
#include <set>

#include "dataset_test_helpers.h"
#include "io_test_helpers.h"

using namespace loom;
using loom::datatest::be;
using loom::datatest::gzip_stored;
using loom::datatest::idx_header;
using loom::iotest::bytes;
using loom::iotest::read_bytes;
using loom::iotest::write_bytes;
using loom::testing::expect_array;

namespace {

// [[1, 2, 3], [250, 251, 252]] as a uint8 IDX file.
const std::string kIdx2x3 = idx_header(0x08, {2, 3}) + bytes({1, 2, 3, 250, 251, 252});

// kIdx2x3 compressed by Python's gzip.compress(data, mtime=0): real deflate (fixed Huffman codes).
const std::string kIdx2x3Deflated =
    bytes({0x1f, 0x8b, 0x08, 0x00, 0x00, 0x00, 0x00, 0x00, 0x02, 0x03, 0x63, 0x60, 0xe0, 0x60, 0x62, 0x60, 0x60, 0x00,
           0x61, 0x66, 0x46, 0x26, 0xe6, 0x5f, 0xbf, 0xff, 0x00, 0x00, 0xa3, 0x1d, 0x33, 0x8d, 0x12, 0x00, 0x00, 0x00});


class IdxFiles : public loom::iotest::TempDirTest {
 protected:
  std::string cache() const { return path("cache"); }

  // Writes `content`, opens it and expects a runtime_error naming the file and `needle`.
  void expect_bad(const std::string& name, const std::string& content, const std::string& needle) {
    const std::string p = path(name);
    write_bytes(p, content);
    try {
      io::IdxFile::open(p, cache());
      ADD_FAILURE() << "expected an error containing \"" << needle << "\"";
    } catch (const std::runtime_error& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find(needle), std::string::npos) << what;
      EXPECT_NE(what.find("[IdxFile] '" + p + "'"), std::string::npos) << what;
    }
  }

  // Files of the cache directory with `suffix`.
  std::vector<std::string> cached(const std::string& suffix) const {
    std::vector<std::string> out;
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(cache(), ec)) {
      const std::string n = e.path().filename().string();
      if (n.size() >= suffix.size() && n.compare(n.size() - suffix.size(), suffix.size(), suffix) == 0) {
        out.push_back(n);
      }
    }
    return out;
  }
};

// ---- IDX ----

TEST_F(IdxFiles, IdxUint8RawFile) {
  write_bytes(path("a.idx"), kIdx2x3);
  auto f = io::IdxFile::open(path("a.idx"), cache());
  EXPECT_EQ(f.shape(), (Shape{2, 3}));
  EXPECT_EQ(f.dtype(), uint8);
  EXPECT_EQ(f.rows(), 2);
  EXPECT_EQ(f.path(), path("a.idx"));
  EXPECT_EQ(f.mapped_path(), path("a.idx"));  // raw files are mapped in place, nothing cached
  EXPECT_FALSE(std::filesystem::exists(cache()));
  array all = f.read_all();
  EXPECT_EQ(all.dtype(), uint8);
  expect_array(all, {2, 3}, {1, 2, 3, 250, 251, 252});
  expect_array(f.read_rows({1, 0, 1}), {3, 3}, {250, 251, 252, 1, 2, 3, 250, 251, 252});
  expect_array(f.read_range(1, 2), {1, 3}, {250, 251, 252});
  expect_array(f.read_rows(std::vector<int64_t>{}), {0, 3}, {});
  expect_array(f.read_range(2, 2), {0, 3}, {});
}

TEST_F(IdxFiles, IdxEveryTypeCode) {
  struct Case {
    int code;
    std::string data;
    Dtype dtype;
    std::vector<double> want;
  };
  const std::vector<Case> cases = {
      {0x08, bytes({0, 1, 128, 255}), uint8, {0, 1, 128, 255}},
      {0x09, bytes({0x80, 0xff, 0x00, 0x7f}), int32, {-128, -1, 0, 127}},
      {0x0B, be(0x8000, 2) + be(0xfffe, 2) + be(0x0102, 2) + be(0x7fff, 2), int32, {-32768, -2, 258, 32767}},
      {0x0C,
       be(0x80000000u, 4) + be(0xffffffffu, 4) + be(0x01020304, 4) + be(0x7fffffff, 4),
       int32,
       {-2147483648.0, -1, 16909060, 2147483647}},
      {0x0D,
       be(0x3fc00000, 4) + be(0xc0100000u, 4) + be(0, 4) + be(0x7f800000, 4),
       float32,
       {1.5, -2.25, 0, std::numeric_limits<double>::infinity()}},
      {0x0E,
       be(0x3ff8000000000000ull, 8) + be(0xc002000000000000ull, 8) + be(0x3fb999999999999aull, 8) +
           be(0x8000000000000000ull, 8),
       float64,
       {1.5, -2.25, 0.1, -0.0}},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.code);
    const std::string content = idx_header(c.code, {2, 2}) + c.data;
    for (bool gz : {false, true}) {
      const std::string p = path("t" + std::to_string(c.code) + (gz ? ".gz" : ""));
      write_bytes(p, gz ? gzip_stored(content) : content);
      auto f = io::IdxFile::open(p, cache());
      EXPECT_EQ(f.dtype(), c.dtype);
      EXPECT_EQ(f.shape(), (Shape{2, 2}));
      expect_array(f.read_all(), {2, 2}, c.want, 0.0);
      expect_array(f.read_rows({1}), {1, 2}, {c.want[2], c.want[3]}, 0.0);
      array wide = f.read_rows({1, 0}, float64);  // converted on read
      EXPECT_EQ(wide.dtype(), float64);
      expect_array(wide, {2, 2}, {c.want[2], c.want[3], c.want[0], c.want[1]}, 0.0);
    }
  }
  // Narrowing conversions follow cast_value: floats truncate toward zero and saturate.
  write_bytes(path("f32"),
              idx_header(0x0D, {4}) + be(0x3fc00000, 4) + be(0xc0100000u, 4) + be(0, 4) + be(0x7f800000, 4));
  auto f32 = io::IdxFile::open(path("f32"), cache());
  expect_array(f32.read_rows({0, 1, 2, 3}, int32), {4}, {1, -2, 0, 2147483647.0}, 0.0);
  expect_array(f32.read_rows({1, 0}, bool_), {2}, {1, 1});
  write_bytes(path("u8"), idx_header(0x08, {3}) + bytes({0, 7, 255}));
  array u = io::IdxFile::open(path("u8"), cache()).read_rows({2, 1, 0}, int64);
  EXPECT_EQ(u.dtype(), int64);
  expect_array(u, {3}, {255, 7, 0});
  // float64 0.1 and -0.0 exactly.
  write_bytes(path("f64"), idx_header(0x0E, {2}) + be(0x3fb999999999999aull, 8) + be(0x8000000000000000ull, 8));
  auto v = io::IdxFile::open(path("f64"), cache()).read_all().to_vector<double>();
  EXPECT_EQ(v[0], 0.1);
  EXPECT_TRUE(std::signbit(v[1]));
}

TEST_F(IdxFiles, IdxOneAndFourDimensions) {
  write_bytes(path("labels"), idx_header(0x08, {5}) + bytes({9, 2, 1, 1, 6}));
  auto l = io::IdxFile::open(path("labels"), cache());
  EXPECT_EQ(l.shape(), (Shape{5}));
  expect_array(l.read_rows({4, 0}), {2}, {6, 9});

  std::string data;
  for (int i = 0; i < 24; ++i) data += static_cast<char>(i);
  write_bytes(path("4d"), idx_header(0x08, {2, 3, 2, 2}) + data);
  auto f = io::IdxFile::open(path("4d"), cache());
  std::vector<double> row1;
  for (int i = 12; i < 24; ++i) row1.push_back(i);
  expect_array(f.read_rows({1}), {1, 3, 2, 2}, row1);

  write_bytes(path("empty"), idx_header(0x0C, {0, 7}));
  auto e = io::IdxFile::open(path("empty"), cache());
  EXPECT_EQ(e.rows(), 0);
  expect_array(e.read_all(), {0, 7}, {});
}

TEST_F(IdxFiles, GzipIsDecompressedOnceToTheCache) {
  write_bytes(path("a.gz"), kIdx2x3Deflated);  // real deflate data
  auto f = io::IdxFile::open(path("a.gz"), cache());
  expect_array(f.read_all(), {2, 3}, {1, 2, 3, 250, 251, 252});
  EXPECT_EQ(f.path(), path("a.gz"));
  ASSERT_EQ(cached(".idx").size(), 1u);
  const std::string c = cached(".idx")[0];
  EXPECT_EQ(c.rfind("a-", 0), 0u) << c;  // named after the source, minus ".gz"
  EXPECT_EQ(f.mapped_path(), cache() + "/" + c);
  EXPECT_EQ(read_bytes(f.mapped_path()), kIdx2x3);
  EXPECT_TRUE(cached(".tmp").empty());

  // Opening again maps the same cache file without decompressing again.
  struct stat before, after;
  ASSERT_EQ(::stat(f.mapped_path().c_str(), &before), 0);
  auto g = io::IdxFile::open(path("a.gz"), cache());
  ASSERT_EQ(::stat(g.mapped_path().c_str(), &after), 0);
  EXPECT_EQ(g.mapped_path(), f.mapped_path());
  EXPECT_EQ(before.st_ino, after.st_ino);
  expect_array(g.read_rows({1}), {1, 3}, {250, 251, 252});

  // A damaged cache file (e.g. cut short by a crash) is replaced. (It is swapped in by a rename, as
  // the library itself does: rewriting a mapped file in place would change what `f` reads.)
  write_bytes(path("damaged"), kIdx2x3.substr(0, 10));
  std::filesystem::rename(path("damaged"), f.mapped_path());
  auto h = io::IdxFile::open(path("a.gz"), cache());
  expect_array(h.read_all(), {2, 3}, {1, 2, 3, 250, 251, 252});
  expect_array(f.read_all(), {2, 3}, {1, 2, 3, 250, 251, 252});  // old mappings stay valid

  // A changed source (new size and mtime) gets a cache file of its own.
  write_bytes(path("a.gz"), gzip_stored(idx_header(0x08, {1, 3}) + bytes({7, 8, 9})));
  auto k = io::IdxFile::open(path("a.gz"), cache());
  expect_array(k.read_all(), {1, 3}, {7, 8, 9});
  EXPECT_NE(k.mapped_path(), f.mapped_path());
}

TEST_F(IdxFiles, GzipOfManyBlocks) {
  // uint8 [300, 256] = 76800 data bytes: two stored deflate blocks.
  std::string data;
  for (int r = 0; r < 300; ++r) {
    for (int c = 0; c < 256; ++c) data += static_cast<char>((r * 7 + c) & 255);
  }
  write_bytes(path("big.gz"), gzip_stored(idx_header(0x08, {300, 256}) + data));
  auto f = io::IdxFile::open(path("big.gz"), cache());
  EXPECT_EQ(f.shape(), (Shape{300, 256}));
  array rows = f.read_rows({299, 3});
  auto v = rows.to_vector<int>();
  EXPECT_EQ(v[0], (299 * 7) & 255);
  EXPECT_EQ(v[255], (299 * 7 + 255) & 255);
  EXPECT_EQ(v[256], 21);
  EXPECT_EQ(v[511], (21 + 255) & 255);
}

TEST_F(IdxFiles, GzipHelperIsAValidStream) {
  EXPECT_EQ(loom::datatest::crc32("123456789"), 0xcbf43926u);  // the CRC-32 check value
  // The same file from the hand-built stored stream and from Python's deflate.
  write_bytes(path("s.gz"), gzip_stored(kIdx2x3));
  expect_array(io::IdxFile::open(path("s.gz"), cache()).read_all(), {2, 3}, {1, 2, 3, 250, 251, 252});
}

TEST_F(IdxFiles, DefaultCacheDirFollowsTheEnvironment) {
  auto saved = [](const char* n) -> std::optional<std::string> {
    const char* v = std::getenv(n);
    return v ? std::optional<std::string>(v) : std::nullopt;
  };
  auto restore = [](const char* n, const std::optional<std::string>& v) {
    if (v) {
      ::setenv(n, v->c_str(), 1);
    } else {
      ::unsetenv(n);
    }
  };
  const auto loom_dir = saved("LOOM_CACHE_DIR"), xdg = saved("XDG_CACHE_HOME"), home = saved("HOME");
  ::setenv("LOOM_CACHE_DIR", cache().c_str(), 1);
  EXPECT_EQ(io::default_cache_dir(), cache());
  // An empty cache_dir argument means the default.
  write_bytes(path("e.gz"), gzip_stored(kIdx2x3));
  EXPECT_EQ(io::IdxFile::open(path("e.gz")).mapped_path().rfind(cache() + "/", 0), 0u);
  ::unsetenv("LOOM_CACHE_DIR");
  ::setenv("XDG_CACHE_HOME", "/x/cache", 1);
  EXPECT_EQ(io::default_cache_dir(), "/x/cache/loom");
  ::unsetenv("XDG_CACHE_HOME");
  ::setenv("HOME", "/home/u", 1);
  EXPECT_EQ(io::default_cache_dir(), "/home/u/.cache/loom");
  restore("LOOM_CACHE_DIR", loom_dir);
  restore("XDG_CACHE_HOME", xdg);
  restore("HOME", home);
}

TEST_F(IdxFiles, IdxBadFiles) {
  expect_bad("empty", "", "truncated file: the 4-byte magic number needs 4 bytes but the file has 0");
  expect_bad("short", bytes({0, 0, 8}), "but the file has 3");
  expect_bad("magic", bytes({1, 0, 8, 1, 0, 0, 0, 0}), "bad magic number 0x01000801");
  expect_bad("npy", "\x93NUMPY\x01\x00", "bad magic number 0x934e554d");
  expect_bad("code", idx_header(0x0A, {1}) + bytes({0}), "unknown data type code 0x0a");
  expect_bad("ndim0", bytes({0, 0, 8, 0}), "0 dimensions");
  expect_bad("header", bytes({0, 0, 8, 3}) + be(2, 4), "the header of 3 dimensions needs 16 bytes but the file has 8");
  expect_bad("cut", idx_header(0x08, {2, 3}) + bytes({1, 2, 3, 4, 5}),
             "size mismatch: shape (2,3) of uint8 needs 6 data bytes after the 12-byte header (18 in all) but the "
             "file has 17 (truncated)");
  expect_bad("long", idx_header(0x08, {2, 3}) + bytes({1, 2, 3, 4, 5, 6, 7}), "(1 bytes too many)");
  expect_bad("i32", idx_header(0x0C, {3}) + be(1, 4) + be(2, 4), "needs 12 data bytes");
  expect_bad("huge", idx_header(0x08, {0x80000000u}), "dimension 0 is 2147483648, above Loom's limit of 2147483647");
  expect_bad("overflow", idx_header(0x0E, {0x7fffffff, 0x7fffffff, 0x7fffffff}), "is too large");

  EXPECT_THROW_MSG(io::IdxFile::open(path("missing"), cache()), std::runtime_error,
                   "[IdxFile] '" + path("missing") + "': cannot open: No such file or directory");
  std::filesystem::create_directories(path("adir"));
  EXPECT_THROW_MSG(io::IdxFile::open(path("adir"), cache()), std::runtime_error, "it is a directory");
}

TEST_F(IdxFiles, GzipBadFiles) {
  const std::string gz = gzip_stored(kIdx2x3);
  expect_bad("cut.gz", gz.substr(0, gz.size() - 10), "truncated gzip stream");
  expect_bad("head.gz", gz.substr(0, 12), "truncated gzip stream");
  std::string crc = gz;
  crc[crc.size() - 6] ^= 1;  // flip a bit of the CRC-32
  expect_bad("crc.gz", crc, "cannot decompress");
  // Valid gzip around invalid IDX content: the same IDX errors, naming the .gz file.
  expect_bad("magic.gz", gzip_stored(bytes({7, 7, 7, 7, 7})), "bad magic number 0x07070707");
  expect_bad("trunc.gz", gzip_stored(idx_header(0x08, {2, 3}) + bytes({1})), "(truncated)");
  expect_bad("short.gz", gzip_stored(bytes({0, 0})), "truncated file: the 4-byte magic");
  expect_bad("long.gz", gzip_stored(kIdx2x3 + "extra"), "the decompressed data is longer");
  // Nothing half-written was left in the cache.
  EXPECT_TRUE(cached(".idx").empty());
  for (const auto& e : std::filesystem::directory_iterator(cache())) {
    EXPECT_EQ(e.path().extension(), ".lock") << e.path();
  }
  // An unusable cache directory is named in the error.
  write_bytes(path("blocker"), "x");
  write_bytes(path("ok.gz"), gz);
  EXPECT_THROW_MSG(io::IdxFile::open(path("ok.gz"), path("blocker") + "/sub"), std::runtime_error,
                   "cannot create the cache directory '" + path("blocker") + "/sub'");
}

TEST_F(IdxFiles, EveryTruncationAndBitFlipIsAnErrorOrAWholeFile) {
  const std::string raw = idx_header(0x0B, {3, 2}) + std::string(12, '\x01');
  const std::string gz = gzip_stored(raw);
  int opened = 0;
  auto attempt = [&](const std::string& name, const std::string& content) {
    write_bytes(path(name), content);
    try {
      auto f = io::IdxFile::open(path(name), cache());
      f.read_all();
      ++opened;
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find("[IdxFile] '" + path(name) + "'"), std::string::npos) << e.what();
    }
  };
  for (size_t n = 0; n < raw.size(); ++n) attempt("r" + std::to_string(n), raw.substr(0, n));
  for (size_t n = 0; n < gz.size(); ++n) attempt("g" + std::to_string(n), gz.substr(0, n));
  EXPECT_EQ(opened, 0);  // no prefix is a whole file
  uint64_t state = 12345;
  for (int i = 0; i < 300; ++i) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    std::string bad = (i % 2 ? gz : raw);
    bad[(state >> 33) % bad.size()] ^= static_cast<char>(1 << ((state >> 20) % 8));
    attempt("f" + std::to_string(i), bad);
  }
  EXPECT_GT(opened, 0);  // flips in the data bytes of a raw file are still whole files
}

TEST_F(IdxFiles, RowsOfNothingReadAsEmpty) {
  // Found by fuzz_idx: a shape with a 0 after the rows gives rows of no bytes, and reading them
  // passed a null buffer to memcpy (undefined, reported by UBSan in the sanitizer build).
  write_bytes(path("z"), idx_header(0x08, {7168, 0, 28}));
  auto f = io::IdxFile::open(path("z"), cache());
  EXPECT_EQ(f.rows(), 7168);
  EXPECT_EQ(f.read_rows({0, 7167}).shape(), (Shape{2, 0, 28}));
  EXPECT_EQ(f.read_rows({3}, int32).shape(), (Shape{1, 0, 28}));
  EXPECT_EQ(f.read_range(1, 4).shape(), (Shape{3, 0, 28}));
  write_bytes(path("z16"), idx_header(0x0B, {2, 0}));
  EXPECT_EQ(io::IdxFile::open(path("z16"), cache()).read_rows({1, 0}).shape(), (Shape{2, 0}));
}

TEST_F(IdxFiles, RepeatedRowsPastLoomsShapeLimit) {
  // Found by fuzz_idx: one row of shape (0, 23551, 982784, 236453888) is a valid empty file, but
  // two of them make a shape whose strides overflow int64.
  write_bytes(path("w"), idx_header(0x0C, {1, 0, 23551, 982784, 236453888}));
  auto f = io::IdxFile::open(path("w"), cache());
  EXPECT_EQ(f.read_rows({0}).shape(), (Shape{1, 0, 23551, 982784, 236453888}));
  EXPECT_THROW_MSG(f.read_rows({0, 0}), std::invalid_argument,
                   "[IdxFile::read_rows] 2 rows of '" + path("w") +
                       "' make shape (2,0,23551,982784,236453888), too large for Loom (its strides overflow int64)");
  EXPECT_THROW_MSG(f.read_rows({0, 0}, float32), std::invalid_argument, "too large for Loom");
}

TEST_F(IdxFiles, IdxRowsOutOfRange) {
  write_bytes(path("a"), kIdx2x3);
  auto f = io::IdxFile::open(path("a"), cache());
  EXPECT_THROW_MSG(f.read_rows({0, 2}), std::out_of_range, "row 2 is out of range for '" + path("a") + "' with 2 rows");
  EXPECT_THROW_MSG(f.read_rows({-1}), std::out_of_range, "row -1 is out of range");
  EXPECT_THROW_MSG(f.read_range(1, 3), std::out_of_range, "rows [1, 3) are out of range");
  EXPECT_THROW_MSG(f.read_range(2, 1), std::out_of_range, "rows [2, 1)");
}

}  // namespace

// Rows of zero values (found by fuzzing): reading them copies nothing, where it used to memcpy from or
// to a null pointer (undefined behaviour, which UBSan stops on).
TEST_F(IdxFiles, ZeroWidthRowsReadAsEmptyArrays) {
  for (int code : {0x08, 0x0D}) {
    SCOPED_TRACE(code);
    const std::string p = path("empty" + std::to_string(code));
    write_bytes(p, idx_header(code, {3, 0}));
    auto f = io::IdxFile::open(p, cache());
    EXPECT_EQ(f.shape(), (Shape{3, 0}));
    expect_array(f.read_all(), {3, 0}, {});
    expect_array(f.read_rows({2, 0}), {2, 0}, {});
  }
}
