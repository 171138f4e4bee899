#include "loom/io/dataset.h"

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

const char* kFashion = "/usr/share/datasets/fashion-mnist";

// [[1, 2, 3], [250, 251, 252]] as a uint8 IDX file.
const std::string kIdx2x3 = idx_header(0x08, {2, 3}) + bytes({1, 2, 3, 250, 251, 252});

// kIdx2x3 compressed by Python's gzip.compress(data, mtime=0): real deflate (fixed Huffman codes).
const std::string kIdx2x3Deflated =
    bytes({0x1f, 0x8b, 0x08, 0x00, 0x00, 0x00, 0x00, 0x00, 0x02, 0x03, 0x63, 0x60, 0xe0, 0x60, 0x62, 0x60, 0x60, 0x00,
           0x61, 0x66, 0x46, 0x26, 0xe6, 0x5f, 0xbf, 0xff, 0x00, 0x00, 0xa3, 0x1d, 0x33, 0x8d, 0x12, 0x00, 0x00, 0x00});

std::vector<int64_t> as_int64(array a) {
  auto v = a.to_vector<int64_t>();
  return {v.begin(), v.end()};
}

class Data : public loom::iotest::TempDirTest {
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

TEST_F(Data, IdxUint8RawFile) {
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

TEST_F(Data, IdxEveryTypeCode) {
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

TEST_F(Data, IdxOneAndFourDimensions) {
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

TEST_F(Data, GzipIsDecompressedOnceToTheCache) {
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

TEST_F(Data, GzipOfManyBlocks) {
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

TEST_F(Data, GzipHelperIsAValidStream) {
  EXPECT_EQ(loom::datatest::crc32("123456789"), 0xcbf43926u);  // the CRC-32 check value
  // The same file from the hand-built stored stream and from Python's deflate.
  write_bytes(path("s.gz"), gzip_stored(kIdx2x3));
  expect_array(io::IdxFile::open(path("s.gz"), cache()).read_all(), {2, 3}, {1, 2, 3, 250, 251, 252});
}

TEST_F(Data, DefaultCacheDirFollowsTheEnvironment) {
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

TEST_F(Data, IdxBadFiles) {
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

TEST_F(Data, GzipBadFiles) {
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

TEST_F(Data, EveryTruncationAndBitFlipIsAnErrorOrAWholeFile) {
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

TEST_F(Data, IdxRowsOutOfRange) {
  write_bytes(path("a"), kIdx2x3);
  auto f = io::IdxFile::open(path("a"), cache());
  EXPECT_THROW_MSG(f.read_rows({0, 2}), std::out_of_range, "row 2 is out of range for '" + path("a") + "' with 2 rows");
  EXPECT_THROW_MSG(f.read_rows({-1}), std::out_of_range, "row -1 is out of range");
  EXPECT_THROW_MSG(f.read_range(1, 3), std::out_of_range, "rows [1, 3) are out of range");
  EXPECT_THROW_MSG(f.read_range(2, 1), std::out_of_range, "rows [2, 1)");
}

TEST_F(Data, IdxDatasetPairsRowsAndConverts) {
  write_bytes(path("x"), kIdx2x3);
  write_bytes(path("y"), idx_header(0x08, {2}) + bytes({4, 200}));
  io::IdxDataset ds(io::IdxFile::open(path("x"), cache()), io::IdxFile::open(path("y"), cache()), float32, int32);
  EXPECT_EQ(ds.size(), 2);
  auto [x, y] = ds.get({1, 1, 0});
  EXPECT_EQ(x.dtype(), float32);
  EXPECT_EQ(y.dtype(), int32);
  EXPECT_TRUE(x.is_evaluated());
  expect_array(x, {3, 3}, {250, 251, 252, 250, 251, 252, 1, 2, 3});
  expect_array(y, {3}, {200, 200, 4});

  write_bytes(path("y3"), idx_header(0x08, {3}) + bytes({1, 2, 3}));
  EXPECT_THROW_MSG(io::IdxDataset(io::IdxFile::open(path("x"), cache()), io::IdxFile::open(path("y3"), cache())),
                   std::invalid_argument, "'" + path("x") + "' has 2 rows but '" + path("y3") + "' has 3");
}

// ---- Fashion-MNIST (when the Debian package dataset-fashion-mnist is installed) ----

TEST_F(Data, FashionMnistTrainAndTest) {
  if (!std::filesystem::exists(kFashion)) GTEST_SKIP() << kFashion << " is not installed";
  auto train = io::fashion_mnist(kFashion, "train", cache());
  EXPECT_EQ(train.size(), 60000);
  EXPECT_EQ(train.x().shape(), (Shape{60000, 28, 28}));
  EXPECT_EQ(train.y().shape(), (Shape{60000}));
  auto [x, y] = train.get({0});
  EXPECT_EQ(x.dtype(), uint8);
  EXPECT_EQ(x.shape(), (Shape{1, 28, 28}));
  EXPECT_EQ(y.dtype(), int32);
  expect_array(y, {1}, {9});  // the first training image is an ankle boot
  // Values checked against Python's gzip module reading the same file.
  EXPECT_EQ(sum(astype(x, int32)).item<int>(), 76247);
  auto px = x.to_vector<int>();
  const std::vector<int> row14 = {0,   0,   1,   4,   6,   7,   2,   0,   0,   0,   0,   0,   237, 226,
                                  217, 223, 222, 219, 222, 221, 216, 223, 229, 215, 218, 255, 77,  0};
  EXPECT_EQ(std::vector<int>(px.begin() + 14 * 28, px.begin() + 15 * 28), row14);
  EXPECT_EQ(sum(astype(train.x().read_rows({59999}), int32)).item<int>(), 16684);
  // Six thousand of each class 0..9: the labels sum to 6000 * 45.
  array labels = train.y().read_all();
  EXPECT_EQ(sum(astype(labels, int32)).item<int>(), 270000);
  EXPECT_EQ(max(labels).item<int>(), 9);

  auto test = io::fashion_mnist(kFashion, "test", cache());
  EXPECT_EQ(test.size(), 10000);
  auto [tx, ty] = test.get({0, 1, 2, 3, 4});
  expect_array(ty, {5}, {9, 2, 1, 1, 6});
  EXPECT_EQ(sum(astype(tx, int32), std::vector<int>{1, 2}).to_vector<int>()[0], 33456);
  EXPECT_EQ(sum(astype(test.y().read_all(), int32)).item<int>(), 45000);
}

TEST_F(Data, FashionMnistErrors) {
  EXPECT_THROW_MSG(io::fashion_mnist(kFashion, "validation", cache()), std::invalid_argument,
                   "split must be \"train\" or \"test\", got \"validation\"");
  EXPECT_THROW_MSG(io::fashion_mnist(path("nowhere"), "train", cache()), std::runtime_error,
                   "neither '" + path("nowhere") + "/train-images-idx3-ubyte' nor");
  // Raw files are found too, and a wrong layout is refused.
  write_bytes(path("t10k-images-idx3-ubyte"), idx_header(0x08, {1, 2, 2}) + bytes({0, 1, 2, 3}));
  write_bytes(path("t10k-labels-idx1-ubyte.gz"), gzip_stored(idx_header(0x08, {1}) + bytes({5})));
  auto ds = io::fashion_mnist(dir.string(), "test", cache());
  auto [x, y] = ds.get({0});
  expect_array(x, {1, 2, 2}, {0, 1, 2, 3});
  expect_array(y, {1}, {5});
  write_bytes(path("t10k-labels-idx1-ubyte"), idx_header(0x0C, {1}) + be(5, 4));
  EXPECT_THROW_MSG(io::fashion_mnist(dir.string(), "test", cache()), std::runtime_error,
                   "holds int32 (1), expected uint8 labels [n]");
}

// ---- text ----

TEST_F(Data, TextWindowsAcrossFiles) {
  write_bytes(path("a.txt"), "abcdefghij");
  write_bytes(path("empty.txt"), "");
  write_bytes(path("b.txt"), "KLMNO");
  io::TextDataset ds({path("a.txt"), path("empty.txt"), path("b.txt")}, 4);
  EXPECT_EQ(ds.num_bytes(), 15);
  EXPECT_EQ(ds.context(), 4);
  EXPECT_EQ(ds.stride(), 4);
  // Windows of 5 bytes start at 0, 4, 8 (8 + 5 <= 15; 12 + 5 > 15).
  EXPECT_EQ(ds.size(), 3);
  auto [x, y] = ds.get({2, 0});
  EXPECT_EQ(x.dtype(), int32);
  // "ijKL" -> "jKLM" (across the file boundary), then "abcd" -> "bcde".
  expect_array(x, {2, 4}, {105, 106, 75, 76, 97, 98, 99, 100});
  expect_array(y, {2, 4}, {106, 75, 76, 77, 98, 99, 100, 101});

  io::TextDataset every({path("a.txt"), path("b.txt")}, 4, 1);
  EXPECT_EQ(every.size(), 11);
  expect_array(every.get({10}).second, {1, 4}, {76, 77, 78, 79});  // "LMNO"
  io::TextDataset apart({path("a.txt"), path("b.txt")}, 4, 5);     // windows of 5 that do not overlap
  EXPECT_EQ(apart.size(), 3);
  expect_array(apart.get({1}).first, {1, 4}, {102, 103, 104, 105});  // "fghi"
  io::TextDataset exact({path("b.txt")}, 4);                         // exactly one window
  EXPECT_EQ(exact.size(), 1);
}

TEST_F(Data, TextErrors) {
  write_bytes(path("a.txt"), "abcdefghij");
  EXPECT_THROW_MSG(io::TextDataset({}, 4), std::invalid_argument, "needs at least one file");
  EXPECT_THROW_MSG(io::TextDataset({path("a.txt")}, 0), std::invalid_argument, "context must be at least 1, got 0");
  EXPECT_THROW_MSG(io::TextDataset({path("a.txt")}, 4, -1), std::invalid_argument, "stride must be >= 0, got -1");
  EXPECT_THROW_MSG(io::TextDataset({path("a.txt")}, 10), std::invalid_argument,
                   "hold 10 bytes, fewer than context + 1 = 11");
  EXPECT_THROW_MSG(io::TextDataset({path("a.txt"), path("nope")}, 4), std::runtime_error,
                   "[TextDataset] '" + path("nope") + "': cannot open");
  io::TextDataset ds({path("a.txt")}, 4);
  EXPECT_THROW_MSG(ds.get({2}), std::out_of_range, "sample 2 is out of range for 2 windows");
}

TEST_F(Data, FortuneFiles) {
  for (const char* n : {"b", "a", "a.dat", "b.dat", ".hidden"}) write_bytes(path(n), "x");
  std::filesystem::create_symlink(path("a"), path("a.u8"));
  std::filesystem::create_directories(path("off"));
  EXPECT_EQ(io::fortune_files(dir.string()), (std::vector<std::string>{path("a"), path("b")}));
  EXPECT_THROW_MSG(io::fortune_files(path("none")), std::runtime_error, "cannot list '" + path("none") + "'");

  const std::string sys = "/usr/share/games/fortunes";
  if (!std::filesystem::exists(sys)) GTEST_SKIP() << sys << " is not installed";
  auto files = io::fortune_files(sys);
  ASSERT_FALSE(files.empty());
  uint64_t total = 0;
  for (const auto& f : files) {
    EXPECT_EQ(f.find(".dat"), std::string::npos);
    EXPECT_EQ(f.find(".u8"), std::string::npos);
    total += std::filesystem::file_size(f);
  }
  EXPECT_NE(std::find(files.begin(), files.end(), sys + "/fortunes"), files.end());
  io::TextDataset text(files, 128);
  EXPECT_EQ(text.num_bytes(), static_cast<int64_t>(total));
  EXPECT_EQ(text.size(), static_cast<int64_t>((total - 129) / 128 + 1));
  // The first window is the first 129 bytes of the first file.
  const std::string head = read_bytes(files[0]).substr(0, 129);
  auto [x, y] = text.get({0});
  auto xv = x.to_vector<int>(), yv = y.to_vector<int>();
  for (int k = 0; k < 128; ++k) {
    ASSERT_EQ(xv[k], static_cast<unsigned char>(head[k])) << k;
    ASSERT_EQ(yv[k], static_cast<unsigned char>(head[k + 1])) << k;
  }
}

// ---- permutation and the loader ----

TEST(Permutation, MatchesAnIndependentImplementation) {
  // From a Python transcription of splitmix64 (checked against the published test vector: seed
  // 1234567 gives 6457827717110365317, 3203168211198807973, ...) and the Fisher-Yates loop.
  EXPECT_EQ(io::permutation(10, 0, 0), (std::vector<int64_t>{1, 7, 6, 2, 0, 9, 8, 4, 5, 3}));
  EXPECT_EQ(io::permutation(10, 0, 1), (std::vector<int64_t>{7, 9, 6, 8, 1, 5, 0, 4, 3, 2}));
  EXPECT_EQ(io::permutation(10, 42, 3), (std::vector<int64_t>{0, 4, 8, 3, 5, 9, 7, 2, 6, 1}));
  EXPECT_EQ(io::permutation(1, 5, 5), (std::vector<int64_t>{0}));
  EXPECT_TRUE(io::permutation(0, 5, 5).empty());
  EXPECT_THROW_MSG(io::permutation(-1, 0, 0), std::invalid_argument, "n must be >= 0, got -1");
}

TEST(Permutation, IsAPermutationAndDependsOnSeedAndEpoch) {
  auto p = io::permutation(1000, 7, 2);
  std::vector<int64_t> sorted = p;
  std::sort(sorted.begin(), sorted.end());
  for (int64_t i = 0; i < 1000; ++i) ASSERT_EQ(sorted[i], i);
  EXPECT_EQ(io::permutation(1000, 7, 2), p);
  EXPECT_NE(io::permutation(1000, 7, 3), p);
  EXPECT_NE(io::permutation(1000, 8, 2), p);
}

// x = 0..n-1 (int32), y = 10 x: a sample's values name its index.
io::ArrayDataset indices_dataset(int n) {
  array x = arange(0, n);
  return io::ArrayDataset(astype(x, int32), astype(x * 10, int32));
}

io::LoaderOptions opts(bool shuffle, io::Remainder rem, uint64_t seed = 0) {
  io::LoaderOptions o;
  o.shuffle = shuffle;
  o.remainder = rem;
  o.seed = seed;
  return o;
}

TEST(DataLoader, InOrderDropAndPad) {
  auto ds = indices_dataset(10);
  io::DataLoader drop(ds, 4, opts(false, io::Remainder::drop), io::Shard(0, 1));
  EXPECT_EQ(drop.num_batches(), 2);
  EXPECT_EQ(drop.global_indices(1), (std::vector<int64_t>{4, 5, 6, 7}));
  io::DataLoader pad(ds, 4, opts(false, io::Remainder::pad), io::Shard(0, 1));
  EXPECT_EQ(pad.num_batches(), 3);
  EXPECT_EQ(pad.global_indices(2), (std::vector<int64_t>{8, 9, 0, 1}));  // wraps to the start
  // Fewer samples than one batch: pad wraps as often as needed, drop yields nothing.
  auto tiny = indices_dataset(3);
  io::DataLoader tpad(tiny, 8, opts(false, io::Remainder::pad), io::Shard(0, 1));
  EXPECT_EQ(tpad.num_batches(), 1);
  EXPECT_EQ(tpad.global_indices(0), (std::vector<int64_t>{0, 1, 2, 0, 1, 2, 0, 1}));
  io::DataLoader tdrop(tiny, 8, opts(false, io::Remainder::drop), io::Shard(0, 1));
  EXPECT_EQ(tdrop.num_batches(), 0);
  EXPECT_EQ(tdrop.begin(), tdrop.end());
}

TEST(DataLoader, ShuffledBatchesFollowThePermutation) {
  auto ds = indices_dataset(10);
  io::DataLoader pad(ds, 4, opts(true, io::Remainder::pad), io::Shard(0, 1));
  // permutation(10, 0, 0) = 1 7 6 2 | 0 9 8 4 | 5 3 (then wraps to 1 7).
  EXPECT_EQ(pad.global_indices(0), (std::vector<int64_t>{1, 7, 6, 2}));
  EXPECT_EQ(pad.global_indices(2), (std::vector<int64_t>{5, 3, 1, 7}));
  pad.set_epoch(1);  // permutation(10, 0, 1) = 7 9 6 8 1 5 0 4 3 2
  EXPECT_EQ(pad.epoch(), 1);
  EXPECT_EQ(pad.global_indices(0), (std::vector<int64_t>{7, 9, 6, 8}));
  // Rank 1 of 2 takes the second half of each global batch.
  io::DataLoader r1(ds, 4, opts(true, io::Remainder::pad), io::Shard(1, 2));
  EXPECT_EQ(r1.local_batch_size(), 2);
  EXPECT_EQ(r1.indices(0), (std::vector<int64_t>{6, 2}));
  EXPECT_EQ(r1.indices(2), (std::vector<int64_t>{1, 7}));
  auto [x, y] = r1.batch(0);
  expect_array(x, {2}, {6, 2});
  expect_array(y, {2}, {60, 20});
  // A different seed gives a different order; the same seed the same one.
  io::DataLoader s7(ds, 10, opts(true, io::Remainder::drop, 7), io::Shard(0, 1));
  io::DataLoader s7b(ds, 10, opts(true, io::Remainder::drop, 7), io::Shard(0, 1));
  EXPECT_EQ(s7.global_indices(0), io::permutation(10, 7, 0));
  EXPECT_EQ(s7.global_indices(0), s7b.global_indices(0));
  EXPECT_NE(s7.global_indices(0), pad.global_indices(0));
}

TEST(DataLoader, ShardsPartitionTheGlobalBatch) {
  // For every group size dividing 12, the ranks' indices concatenated in rank order are exactly the
  // single-process batch, and every rank has the same number of batches.
  auto ds = indices_dataset(50);
  for (auto rem : {io::Remainder::drop, io::Remainder::pad}) {
    for (bool shuffle : {false, true}) {
      io::DataLoader whole(ds, 12, opts(shuffle, rem, 3), io::Shard(0, 1));
      for (int64_t epoch : {0, 1, 5}) {
        whole.set_epoch(epoch);
        std::multiset<int64_t> seen;
        for (int size : {1, 2, 3, 4, 6, 12}) {
          std::vector<io::DataLoader> ranks;
          for (int r = 0; r < size; ++r) ranks.emplace_back(ds, 12, opts(shuffle, rem, 3), io::Shard(r, size));
          for (auto& l : ranks) {
            l.set_epoch(epoch);
            ASSERT_EQ(l.num_batches(), whole.num_batches());
          }
          for (int64_t b = 0; b < whole.num_batches(); ++b) {
            std::vector<int64_t> joined;
            for (auto& l : ranks) {
              auto idx = l.indices(b);
              ASSERT_EQ(idx.size(), size_t(12 / size));
              joined.insert(joined.end(), idx.begin(), idx.end());
              if (size == 1) seen.insert(idx.begin(), idx.end());
            }
            ASSERT_EQ(joined, whole.global_indices(b)) << "size " << size << " batch " << b;
          }
        }
        // Drop: 4 batches of 12 distinct samples; pad: 5 batches, all 50 samples, 10 of them twice.
        if (rem == io::Remainder::drop) {
          EXPECT_EQ(whole.num_batches(), 4);
          EXPECT_EQ(seen.size(), 48u);
          EXPECT_EQ(std::set<int64_t>(seen.begin(), seen.end()).size(), 48u);
        } else {
          EXPECT_EQ(whole.num_batches(), 5);
          EXPECT_EQ(seen.size(), 60u);
          EXPECT_EQ(std::set<int64_t>(seen.begin(), seen.end()).size(), 50u);
        }
      }
    }
  }
}

TEST(DataLoader, RangeForAndResume) {
  auto ds = indices_dataset(10);
  io::DataLoader loader(ds, 4, opts(false, io::Remainder::pad), io::Shard(0, 2));
  std::vector<std::vector<int>> got;
  for (auto& [x, y] : loader) {
    EXPECT_EQ(x.shape(), (Shape{2}));
    expect_array(y, {2}, {10.0 * x.to_vector<int>()[0], 10.0 * x.to_vector<int>()[1]});
    got.push_back(x.to_vector<int>());
  }
  EXPECT_EQ(got, (std::vector<std::vector<int>>{{0, 1}, {4, 5}, {8, 9}}));

  loader.set_start_batch(2);  // resume at the last batch
  got.clear();
  for (auto& [x, y] : loader) got.push_back(x.to_vector<int>());
  EXPECT_EQ(got, (std::vector<std::vector<int>>{{8, 9}}));
  loader.set_start_batch(3);
  EXPECT_EQ(loader.begin(), loader.end());
  loader.set_epoch(1);
  EXPECT_EQ(loader.start_batch(), 0);
  int n = 0;
  for (auto it = loader.begin(); it != loader.end(); ++it) ++n;  // never reads a batch
  EXPECT_EQ(n, 3);
  EXPECT_THROW_MSG(loader.set_start_batch(4), std::out_of_range, "start batch 4 is outside [0, 3]");
  EXPECT_THROW_MSG(loader.set_start_batch(-1), std::out_of_range, "start batch -1");
}

TEST(DataLoader, BadArguments) {
  auto ds = indices_dataset(10);
  EXPECT_THROW_MSG(io::DataLoader(ds, 10, {}, io::Shard(0, 3)), std::invalid_argument,
                   "the global batch size 10 is not divisible by the number of ranks 3");
  EXPECT_THROW_MSG(io::DataLoader(ds, 0, {}, io::Shard(0, 1)), std::invalid_argument,
                   "batch_size must be at least 1, got 0");
  EXPECT_THROW_MSG(io::DataLoader(std::shared_ptr<const io::Dataset>(), 4, {}, io::Shard(0, 1)), std::invalid_argument,
                   "the dataset is null");
  EXPECT_THROW_MSG(io::Shard(2, 2), std::invalid_argument, "rank 2 is outside a group of size 2");
  EXPECT_THROW_MSG(io::Shard(0, 0), std::invalid_argument, "size must be at least 1, got 0");
  io::DataLoader l(ds, 4, {}, io::Shard(0, 1));
  EXPECT_THROW_MSG(l.batch(2), std::out_of_range, "batch 2 is out of range for 2 batches per epoch");
  EXPECT_THROW_MSG(l.global_indices(-1), std::out_of_range, "batch -1 is out of range");
  EXPECT_THROW_MSG(l.set_epoch(-1), std::invalid_argument, "epoch must be >= 0, got -1");
}

TEST(DataLoader, DefaultsAreShuffledDroppedAndTheWorldShard) {
  auto ds = indices_dataset(10);
  io::DataLoader l(ds, 4);
  auto world = distributed::init();
  EXPECT_EQ(l.shard().rank, world.rank());
  EXPECT_EQ(l.shard().size, world.size());
  EXPECT_EQ(l.num_batches(), 2);
  EXPECT_EQ(l.global_indices(0), (std::vector<int64_t>{1, 7, 6, 2}));
  io::DataLoader from_group(ds, 4, {}, world);  // a Group converts to its Shard
  EXPECT_EQ(from_group.shard().size, world.size());
}

TEST(ArrayDataset, RowsOfStridedArraysAndErrors) {
  // x is a transposed (strided) view: rows of x.T.
  array m = reshape(arange(0.0, 6.0, 1.0, float32), {2, 3});
  io::ArrayDataset ds(transpose(m), array({1, 2, 3}));
  EXPECT_EQ(ds.size(), 3);
  auto [x, y] = ds.get({2, 0});
  expect_array(x, {2, 2}, {2, 5, 0, 3});
  expect_array(y, {2}, {3, 1});
  EXPECT_THROW_MSG(ds.get({3}), std::out_of_range, "sample 3 is out of range for 3 samples");
  EXPECT_THROW_MSG(io::ArrayDataset(m, array({1, 2, 3})), std::invalid_argument,
                   "need the same first dimension, got (2,3) and (3)");
  EXPECT_THROW_MSG(io::ArrayDataset(array(1.0f), array({1})), std::invalid_argument, "same first dimension");
}

TEST_F(Data, LoaderOverIdxAndText) {
  // uint8 images [6, 2] with row i = (i, 100 + i) and labels i, read through a 2-rank shard.
  std::string img;
  for (int i = 0; i < 6; ++i) img += bytes({i, 100 + i});
  write_bytes(path("x.gz"), gzip_stored(idx_header(0x08, {6, 2}) + img));
  write_bytes(path("y"), idx_header(0x08, {6}) + bytes({0, 1, 2, 3, 4, 5}));
  io::IdxDataset ds(io::IdxFile::open(path("x.gz"), cache()), io::IdxFile::open(path("y"), cache()));
  io::DataLoader l(ds, 4, opts(false, io::Remainder::pad), io::Shard(1, 2));
  std::vector<double> xs, ys;
  for (auto& [x, y] : l) {
    EXPECT_EQ(x.shape(), (Shape{2, 2}));
    for (int v : x.to_vector<int>()) xs.push_back(v);
    for (int v : y.to_vector<int>()) ys.push_back(v);
  }
  // Batches {0,1,2,3} and {4,5,0,1}: rank 1 reads samples 2, 3, then 0, 1.
  EXPECT_EQ(xs, (std::vector<double>{2, 102, 3, 103, 0, 100, 1, 101}));
  EXPECT_EQ(ys, (std::vector<double>{2, 3, 0, 1}));

  write_bytes(path("t.txt"), "0123456789");
  io::DataLoader tl(io::TextDataset({path("t.txt")}, 3), 2, opts(false, io::Remainder::drop), io::Shard(0, 1));
  EXPECT_EQ(tl.num_batches(), 1);  // windows at 0, 3, 6: one full batch of 2
  auto [x, y] = tl.batch(0);
  expect_array(x, {2, 3}, {48, 49, 50, 51, 52, 53});
  expect_array(y, {2, 3}, {49, 50, 51, 52, 53, 54});
}

}  // namespace
