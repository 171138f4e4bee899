#include <cmath>
#include <limits>

#include "io_test_helpers.h"

using namespace loom;
using loom::iotest::bytes;
using loom::iotest::le;
using loom::iotest::read_bytes;
using loom::iotest::write_bytes;
using loom::testing::expect_array;

namespace {

const std::string kMagic1("\x93NUMPY\x01\x00", 8);

// A .npy file around a header dict, padded the way numpy pads (used to build inputs for the
// reader; the writer's bytes are checked against hand-counted literals below).
std::string npy_file(const std::string& dict, const std::string& data, int major = 1) {
  const size_t prefix = major == 1 ? 10 : 12;
  std::string h = dict;
  const size_t pad = 64 - (prefix + h.size() + 1) % 64;
  h.append(pad, ' ');
  h += '\n';
  return std::string("\x93NUMPY", 6) + static_cast<char>(major) + '\0' + le(h.size(), major == 1 ? 2 : 4) + h + data;
}

// 0.0f .. 5.0f, little-endian, written out by hand.
const std::string kF32Arange6 = bytes({0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x80, 0x3f, 0x00, 0x00, 0x00, 0x40,
                                       0x00, 0x00, 0x40, 0x40, 0x00, 0x00, 0x80, 0x40, 0x00, 0x00, 0xa0, 0x40});

class Npy : public loom::iotest::TempDirTest {
 protected:
  // Writes `content` to a file, loads it and expects a runtime_error naming the file and `needle`.
  void expect_bad(const std::string& content, const std::string& needle) {
    const std::string p = path("bad.npy");
    write_bytes(p, content);
    try {
      load(p);
      ADD_FAILURE() << "expected an error containing \"" << needle << "\"";
    } catch (const std::runtime_error& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find(needle), std::string::npos) << what;
      EXPECT_NE(what.find("[load] '" + p + "'"), std::string::npos) << what;
    }
  }
};

TEST_F(Npy, WritesExactlyNumpysBytesFor2x3Float32) {
  // np.save(f, np.arange(6, dtype='<f4').reshape(2, 3)): 10-byte prefix, header length 0x76 = 118,
  // the dict, spaces up to byte 127 and '\n' at byte 127, then the data.
  const std::string dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }";
  ASSERT_EQ(dict.size(), 59u);
  const std::string expected = kMagic1 + bytes({0x76, 0x00}) + dict + std::string(58, ' ') + "\n" + kF32Arange6;
  ASSERT_EQ(expected.size(), 128u + 24u);

  save(path("a.npy"), reshape(arange(6.0, float32), {2, 3}));
  EXPECT_EQ(read_bytes(path("a.npy")), expected);

  write_bytes(path("b.npy"), expected);
  array b = load(path("b.npy"));
  EXPECT_EQ(b.dtype(), float32);
  expect_array(b, {2, 3}, {0, 1, 2, 3, 4, 5});
}

TEST_F(Npy, WritesExactlyNumpysBytesForScalarsAndBools) {
  // np.save(f, np.int64(7)): a 0-d array gets no growth padding.
  const std::string d0 = "{'descr': '<i8', 'fortran_order': False, 'shape': (), }";
  ASSERT_EQ(d0.size(), 55u);
  save(path("s.npy"), array(int64_t(7)));
  EXPECT_EQ(read_bytes(path("s.npy")),
            kMagic1 + bytes({0x76, 0x00}) + d0 + std::string(62, ' ') + "\n" + bytes({7, 0, 0, 0, 0, 0, 0, 0}));

  // np.save(f, np.array([True, False, True])): 1-d shapes are written "(3,)".
  const std::string d1 = "{'descr': '|b1', 'fortran_order': False, 'shape': (3,), }";
  ASSERT_EQ(d1.size(), 57u);
  save(path("b.npy"), array({true, false, true}));
  EXPECT_EQ(read_bytes(path("b.npy")),
            kMagic1 + bytes({0x76, 0x00}) + d1 + std::string(60, ' ') + "\n" + bytes({1, 0, 1}));

  // uint8 and float16 descriptors.
  save(path("u.npy"), array({uint8_t(200)}, uint8));
  EXPECT_NE(read_bytes(path("u.npy")).find("'descr': '|u1'"), std::string::npos);
  save(path("h.npy"), array({1.0f, -2.0f}, float16));
  const std::string h = read_bytes(path("h.npy"));
  EXPECT_NE(h.find("'descr': '<f2'"), std::string::npos);
  EXPECT_EQ(h.substr(128), bytes({0x00, 0x3c, 0x00, 0xc0}));  // 1.0 = 0x3c00, -2.0 = 0xc000
}

TEST_F(Npy, HeaderLeavesNumpysGrowthRoomAndAlignsTo64) {
  // numpy pads so that the first axis can grow to 21 digits without moving the data: the header
  // length does not depend on the digits of shape[0].
  for (int e = 0; e <= 9; ++e) {
    int n = 1;
    for (int k = 0; k < e; ++k) n *= 10;
    save(path("g.npy"), zeros({n, 0}, float32));
    const std::string f = read_bytes(path("g.npy"));
    ASSERT_EQ(f.size(), 128u) << n;
    EXPECT_EQ(f.substr(8, 2), bytes({0x76, 0x00}));
    EXPECT_EQ(f.back(), '\n');
    const std::string dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (" + std::to_string(n) + ", 0), }";
    EXPECT_EQ(f.substr(10, dict.size()), dict);
    EXPECT_EQ(f.substr(10 + dict.size(), 128 - 11 - dict.size()), std::string(128 - 11 - dict.size(), ' '));
  }
  // 14 dims of 1: dict 95 + 20 growth + '\n' + 10 = 126 -> 2 spaces of padding, 128 bytes.
  save(path("d14.npy"), zeros(Shape(14, 1), float32));
  EXPECT_EQ(read_bytes(path("d14.npy")).size(), 128u + 4u);
  // 15 dims of 1: dict 98 + 20 + 1 + 10 = 129 -> the header grows to 192 bytes.
  save(path("d15.npy"), zeros(Shape(15, 1), float32));
  const std::string f15 = read_bytes(path("d15.npy"));
  EXPECT_EQ(f15.size(), 192u + 4u);
  EXPECT_EQ(f15.substr(8, 2), bytes({182, 0}));
  // dict + growth = 117: exactly 128 before padding, and numpy then pads a full 64 spaces.
  Shape s(12, 1);
  s.push_back(11);
  s.push_back(11);
  save(path("d64.npy"), zeros(s, uint8));
  const std::string f64 = read_bytes(path("d64.npy"));
  EXPECT_EQ(f64.size(), 192u + 121u);
  EXPECT_EQ(f64.substr(191 - 64, 65), std::string(64, ' ') + "\n");
  expect_array(load(path("d64.npy")), s, std::vector<double>(121, 0.0));
}

TEST_F(Npy, RoundTripsEveryDtype) {
  struct Case {
    array a;
    std::vector<double> values;
  };
  std::vector<Case> cases = {
      {array({true, false, false, true}, {2, 2}), {1, 0, 0, 1}},
      {array({0, 1, 254, 255}, {4}, uint8), {0, 1, 254, 255}},
      {array({-2147483647 - 1, -1, 0, 2147483647}, {2, 2}, int32), {-2147483648.0, -1, 0, 2147483647.0}},
      {array({int64_t(-9007199254740992), int64_t(3), int64_t(1) << 40}, {3}, int64),
       {-9007199254740992.0, 3, 1099511627776.0}},
      {array({0.5, -65504.0, 6.103515625e-05, 1.0}, {4}, float16), {0.5, -65504, 6.103515625e-05, 1}},
      {array({1.5f, -0.0f, 3.4e38f, 1e-45f, INFINITY, NAN}, {3, 2}, float32), {1.5, 0, 3.4e38f, 1e-45f, INFINITY, NAN}},
      {array({0.1, -1e300, 5e-324}, {3, 1}, float64), {0.1, -1e300, 5e-324}},
  };
  for (auto& c : cases) {
    SCOPED_TRACE(to_string(c.a.dtype()));
    save(path("r.npy"), c.a);
    array b = load(path("r.npy"));
    EXPECT_EQ(b.dtype(), c.a.dtype());
    EXPECT_TRUE(b.is_evaluated());
    EXPECT_TRUE(b.flags().row_contiguous);
    expect_array(b, c.a.shape(), c.values, 0.0);
  }
  // int64 beyond double precision survives bit-exactly.
  save(path("i.npy"), array({std::numeric_limits<int64_t>::max(), std::numeric_limits<int64_t>::min()}, int64));
  EXPECT_EQ(load(path("i.npy")).to_vector<int64_t>(),
            (std::vector<int64_t>{std::numeric_limits<int64_t>::max(), std::numeric_limits<int64_t>::min()}));
}

TEST_F(Npy, WritesStridedViewsInRowMajorOrder) {
  array m = reshape(arange(12.0, float64), {3, 4});  // 0..11
  // Transposed: (4, 3) with element [i][j] = 4 * j + i.
  save(path("t.npy"), transpose(m));
  expect_array(load(path("t.npy")), {4, 3}, {0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11}, 0.0);
  // Reversed rows, every other column: [[8, 10], [4, 6], [0, 2]].
  save(path("s.npy"), slice(m, {2, 0}, {-4, 4}, {-1, 2}));
  expect_array(load(path("s.npy")), {3, 2}, {8, 10, 4, 6, 0, 2}, 0.0);
  // A broadcast (stride 0) int32 row.
  save(path("b.npy"), broadcast_to(array({1, 2}), {3, 2}));
  expect_array(load(path("b.npy")), {3, 2}, {1, 2, 1, 2, 1, 2}, 0.0);
  // The data bytes of the transposed float32 view are the C-order values, by hand.
  save(path("f.npy"), transpose(reshape(arange(6.0, float32), {3, 2})));  // [[0, 2, 4], [1, 3, 5]]
  EXPECT_EQ(read_bytes(path("f.npy")).substr(128),
            bytes({0, 0, 0, 0, 0, 0, 0, 0x40, 0, 0, 0x80, 0x40, 0, 0, 0x80, 0x3f, 0, 0, 0x40, 0x40, 0, 0, 0xa0, 0x40}));
  // A lazy expression is evaluated first.
  save(path("l.npy"), add(m, array(1.0)));
  expect_array(load(path("l.npy")), {3, 4}, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, 0.0);
}

TEST_F(Npy, ScalarAndEmptyArrays) {
  save(path("z.npy"), array(2.5));
  array z = load(path("z.npy"));
  EXPECT_EQ(z.ndim(), 0u);
  EXPECT_EQ(z.item<double>(), 2.5);

  for (const Shape& s : {Shape{0}, Shape{2, 0, 3}, Shape{0, 0}}) {
    save(path("e.npy"), zeros(s, int32));
    array e = load(path("e.npy"));
    EXPECT_EQ(e.shape(), s);
    EXPECT_EQ(e.dtype(), int32);
    EXPECT_EQ(e.size(), 0u);
    EXPECT_EQ(read_bytes(path("e.npy")).size(), 128u);
  }
}

TEST_F(Npy, RefusesBfloat16WithAHint) {
  EXPECT_THROW_MSG(save(path("x.npy"), array({1.0f}, bfloat16)), std::invalid_argument, "save_safetensors");
  EXPECT_THROW_MSG(save(path("x.npy"), array({1.0f}, bfloat16)), std::invalid_argument, "numpy has no bfloat16");
  std::ostringstream os;
  EXPECT_THROW_MSG(save(os, array({1.0f}, bfloat16)), std::invalid_argument, "bfloat16");
  EXPECT_TRUE(os.str().empty());
  EXPECT_TRUE(listing().empty());  // nothing was created
}

TEST_F(Npy, AppendsTheExtensionAndReplacesAtomically) {
  save(path("weights"), array({1, 2}));
  save(path("bias.npy"), array({3}));
  save(path("odd.NPY"), array({4}));  // numpy's check is case-sensitive too
  EXPECT_EQ(listing(), (std::vector<std::string>{"bias.npy", "odd.NPY.npy", "weights.npy"}));
  // Overwriting replaces the file; no temporary is left behind.
  save(path("weights"), array({5.0f, 6.0f, 7.0f}));
  expect_array(load(path("weights.npy")), {3}, {5, 6, 7});
  EXPECT_EQ(listing(), (std::vector<std::string>{"bias.npy", "odd.NPY.npy", "weights.npy"}));
  // An unwritable destination: a clear error and the old file untouched.
  EXPECT_THROW_MSG(save(path("missing_dir/w.npy"), array({1})), std::runtime_error, "missing_dir/w.npy.tmp");
  std::filesystem::create_directory(path("dir.npy"));
  EXPECT_THROW_MSG(save(path("dir.npy"), array({1})), std::runtime_error, "renaming");
  EXPECT_EQ(listing(), (std::vector<std::string>{"bias.npy", "dir.npy", "odd.NPY.npy", "weights.npy"}));
}

TEST_F(Npy, ReadsBigEndianData) {
  write_bytes(path("i.npy"), npy_file("{'descr': '>i4', 'fortran_order': False, 'shape': (3,), }",
                                      bytes({0, 0, 0, 1, 0xff, 0xff, 0xff, 0xfe, 1, 2, 3, 4})));
  array i = load(path("i.npy"));
  EXPECT_EQ(i.dtype(), int32);
  EXPECT_EQ(i.to_vector<int32_t>(), (std::vector<int32_t>{1, -2, 0x01020304}));

  write_bytes(path("d.npy"), npy_file("{'descr': '>f8', 'fortran_order': False, 'shape': (2,), }",
                                      bytes({0x3f, 0xf8, 0, 0, 0, 0, 0, 0, 0xbf, 0xd0, 0, 0, 0, 0, 0, 0})));
  expect_array(load(path("d.npy")), {2}, {1.5, -0.25}, 0.0);

  write_bytes(path("h.npy"), npy_file("{'descr': '>f2', 'fortran_order': False, 'shape': (3,), }",
                                      bytes({0x3c, 0x00, 0xc0, 0x00, 0x7b, 0xff})));
  expect_array(load(path("h.npy")), {3}, {1.0, -2.0, 65504.0}, 0.0);

  write_bytes(path("l.npy"), npy_file("{'descr': '>i8', 'fortran_order': False, 'shape': (1,), }",
                                      bytes({0x80, 0, 0, 0, 0, 0, 0, 1})));
  EXPECT_EQ(load(path("l.npy")).to_vector<int64_t>(), (std::vector<int64_t>{std::numeric_limits<int64_t>::min() + 1}));
}

TEST_F(Npy, ReadsFortranOrder) {
  // np.asfortranarray(np.arange(6, dtype='<f4').reshape(2, 3)) stores the columns: 0 3 1 4 2 5.
  const std::string cols =
      bytes({0, 0, 0, 0, 0, 0, 0x40, 0x40, 0, 0, 0x80, 0x3f, 0, 0, 0x80, 0x40, 0, 0, 0, 0x40, 0, 0, 0xa0, 0x40});
  write_bytes(path("f.npy"), npy_file("{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3), }", cols));
  array f = load(path("f.npy"));
  EXPECT_EQ(f.shape(), (Shape{2, 3}));
  EXPECT_TRUE(f.is_evaluated());
  EXPECT_TRUE(f.flags().col_contiguous);
  expect_array(f, {2, 3}, {0, 1, 2, 3, 4, 5}, 0.0);
  expect_array(sum(f, 1), {2}, {3, 12}, 0.0);  // ops see the right values

  // 3-d: element [i][j][k] = 100 i + 10 j + k stored with i varying fastest.
  std::string data;
  for (int k = 0; k < 4; ++k)
    for (int j = 0; j < 3; ++j)
      for (int i = 0; i < 2; ++i) data += le(static_cast<uint64_t>(100 * i + 10 * j + k), 8);
  write_bytes(path("g.npy"), npy_file("{'descr': '<i8', 'fortran_order': True, 'shape': (2, 3, 4), }", data));
  std::vector<double> want;
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j)
      for (int k = 0; k < 4; ++k) want.push_back(100 * i + 10 * j + k);
  expect_array(load(path("g.npy")), {2, 3, 4}, want, 0.0);

  // Fortran order of 0-d and 1-d arrays is the same as C order; big-endian Fortran data too.
  write_bytes(path("s.npy"), npy_file("{'descr': '>i4', 'fortran_order': True, 'shape': (2, 2), }",
                                      bytes({0, 0, 0, 1, 0, 0, 0, 3, 0, 0, 0, 2, 0, 0, 0, 4})));
  expect_array(load(path("s.npy")), {2, 2}, {1, 2, 3, 4}, 0.0);
  write_bytes(path("z.npy"),
              npy_file("{'descr': '<f8', 'fortran_order': True, 'shape': (), }", le(0x4000000000000000ull, 8)));
  expect_array(load(path("z.npy")), {}, {2.0}, 0.0);
}

TEST_F(Npy, ReadsVersions2And3AndOlderHeaderSpellings) {
  const std::string d = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }";
  for (int major : {2, 3}) {
    const std::string f = npy_file(d, kF32Arange6, major);
    EXPECT_EQ((12 + f.substr(12).find('\n') + 1) % 64, 0u);
    write_bytes(path("v.npy"), f);
    expect_array(load(path("v.npy")), {2, 3}, {0, 1, 2, 3, 4, 5}, 0.0);
  }
  // Python 2 long suffixes, other key orders, double quotes, no trailing comma, no final newline.
  const std::vector<std::string> dicts = {
      "{'descr': '<f4', 'fortran_order': False, 'shape': (2L, 3L), }",
      "{'shape': (2, 3), 'fortran_order': False, 'descr': '<f4'}",
      "{\"descr\": \"<f4\", \"fortran_order\": False, \"shape\": (2,3,)}",
      "{'descr':u'<f4','fortran_order':False,'shape':(2,3)}",
  };
  for (const auto& dict : dicts) {
    SCOPED_TRACE(dict);
    write_bytes(path("o.npy"), npy_file(dict, kF32Arange6));
    expect_array(load(path("o.npy")), {2, 3}, {0, 1, 2, 3, 4, 5}, 0.0);
  }
  // A header without padding or final newline (numpy does not require them).
  const std::string dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3)}";
  write_bytes(path("n.npy"), kMagic1 + le(dict.size(), 2) + dict + kF32Arange6);
  expect_array(load(path("n.npy")), {2, 3}, {0, 1, 2, 3, 4, 5}, 0.0);
}

TEST_F(Npy, BoolBytesAreNormalized) {
  write_bytes(path("b.npy"),
              npy_file("{'descr': '|b1', 'fortran_order': False, 'shape': (4,), }", bytes({0, 2, 255, 1})));
  array b = load(path("b.npy"));
  EXPECT_EQ(b.dtype(), bool_);
  const auto* raw = static_cast<const uint8_t*>(b.raw_data());
  EXPECT_EQ(std::vector<int>(raw, raw + 4), (std::vector<int>{0, 1, 1, 1}));
  expect_array(sum(b), {}, {3}, 0.0);
}

TEST_F(Npy, StreamsHoldSeveralArraysInTurn) {
  std::stringstream ss;
  save(ss, reshape(arange(6.0, float32), {2, 3}));
  save(ss, array({true, false}));
  save(ss, transpose(reshape(array({1, 2, 3, 4, 5, 6}, {6}, int64), {2, 3})));
  EXPECT_EQ(ss.str().substr(0, 128 + 24), kMagic1 + bytes({0x76, 0x00}) +
                                              "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }" +
                                              std::string(58, ' ') + "\n" + kF32Arange6);
  expect_array(load(ss), {2, 3}, {0, 1, 2, 3, 4, 5}, 0.0);
  expect_array(load(ss), {2}, {1, 0}, 0.0);
  array c = load(ss);
  EXPECT_EQ(c.dtype(), int64);
  expect_array(c, {3, 2}, {1, 4, 2, 5, 3, 6}, 0.0);
  EXPECT_THROW_MSG(load(ss), std::runtime_error, "[load] '<stream>': truncated");

  // A stream that cannot seek (a pipe) works too.
  loom::iotest::PipeBuf pipe(npy_file("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", kF32Arange6));
  std::istream in(&pipe);
  expect_array(load(in), {2, 3}, {0, 1, 2, 3, 4, 5}, 0.0);
}

TEST_F(Npy, MissingFilesAndDirectories) {
  EXPECT_THROW_MSG(load(path("nope.npy")), std::runtime_error, "cannot open '" + path("nope.npy") + "'");
  EXPECT_THROW_MSG(load(path("nope.npy")), std::runtime_error, "No such file");
  EXPECT_THROW_MSG(load(dir.string()), std::runtime_error, "is a directory");
}

TEST_F(Npy, RejectsTruncatedFiles) {
  const std::string good = npy_file("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", kF32Arange6);
  expect_bad("", "truncated file: 0 bytes is too short");
  expect_bad("\x93NUM", "truncated file: 4 bytes is too short");
  expect_bad(good.substr(0, 8), "truncated file: the header length needs 2 bytes");
  expect_bad(good.substr(0, 9), "truncated file: the header length needs 2 bytes but only 1 remain");
  expect_bad(good.substr(0, 60), "truncated file: the header length 118 exceeds the 50 bytes left");
  expect_bad(good.substr(0, 128), "shape (2,3) of float32 needs 24 data bytes but only 0 follow the header");
  expect_bad(good.substr(0, good.size() - 1), "needs 24 data bytes but only 23 follow the header");
  expect_bad(good + "x", "the file has 25 data bytes after the header but shape (2,3) of float32 needs 24");
  // Version 2.0 with a header length far beyond the file.
  expect_bad(std::string("\x93NUMPY\x02\x00", 8) + bytes({0xff, 0xff, 0xff, 0xff}) + "{}",
             "the header length 4294967295 exceeds the 2 bytes left");
}

TEST_F(Npy, RejectsBadMagicAndVersions) {
  const std::string rest = le(10, 2) + "{}        \n";
  expect_bad("PK\x03\x04 this is a zip" + rest, "not a .npy file: bad magic string \"PK\\x03\\x04 t\"");
  expect_bad(std::string("\x93NUMPX\x01\x00", 8) + rest, "bad magic string");
  expect_bad(std::string("\x93NUMPY\x04\x00", 8) + rest, "unsupported .npy format version 4.0");
  expect_bad(std::string("\x93NUMPY\x01\x01", 8) + rest, "unsupported .npy format version 1.1");
  expect_bad(std::string("\x93NUMPY\x00\x00", 8) + rest, "unsupported .npy format version 0.0");
}

TEST_F(Npy, RejectsMalformedHeaderDicts) {
  const std::string data = kF32Arange6;
  struct Case {
    std::string dict, needle;
  };
  const std::vector<Case> cases = {
      {"", "malformed .npy header: expected '{'"},
      {"['descr', '<f4']", "malformed .npy header: expected '{'"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), ", "malformed .npy header: unexpected end"},
      {"{'descr': '<f4' 'fortran_order': False, 'shape': (2, 3)}", "expected ',' or '}'"},
      {"{'descr' '<f4', 'fortran_order': False, 'shape': (2, 3)}", "expected ':'"},
      {"{'descr': '<f4, 'fortran_order': False, 'shape': (2, 3)}", "malformed .npy header"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3)} junk", "unexpected text after the dictionary"},
      {"{'descr': '<f4', 'fortran_order': false, 'shape': (2, 3)}", "unexpected character 'f'"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (2 3)}", "expected ',' or ')'"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (2.5, 3)}", "expected an integer"},
      {"{1: '<f4'}", "dictionary keys must be strings"},
      {"{'descr': '<f4', 'fortran_order': False}", "missing the key 'shape'"},
      {"{'descr': '<f4', 'shape': (2, 3)}", "missing the key 'fortran_order'"},
      {"{'fortran_order': False, 'shape': (2, 3)}", "missing the key 'descr'"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), 'extra': 1}", "unexpected key 'extra'"},
      {"{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (2, 3)}", "repeats the key 'descr'"},
      {"{'descr': '<c16', 'fortran_order': False, 'shape': (2, 3)}", "unsupported dtype '<c16'"},
      {"{'descr': '<c16', 'fortran_order': False, 'shape': (2, 3)}", "unsupported dtype '<c16'"},
      {"{'descr': '<V2', 'fortran_order': False, 'shape': (2, 3)}", "unsupported dtype '<V2'"},
      {"{'descr': [('x', '<f4')], 'fortran_order': False, 'shape': (2, 3)}", "structured dtypes"},
      {"{'descr': 4, 'fortran_order': False, 'shape': (2, 3)}", "'descr' must be a string, got an integer"},
      {"{'descr': '<f4', 'fortran_order': 0, 'shape': (2, 3)}", "'fortran_order' must be True or False"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': [2, 3]}", "'shape' must be a tuple, got a list"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (6)}", "'shape' must be a tuple, got an integer"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': ('2', 3)}", "'shape' entries must be integers"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (2, -3)}", "negative dimension"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (2147483648,)}", "2147483648 is larger than Loom's limit"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999999,)}", "beyond 2^64"},
      {"{'descr': '<f8', 'fortran_order': False, 'shape': (2147483647, 2147483647, 2147483647)}",
       "more bytes than can be addressed"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (0, 2147483647, 2147483647, 2147483647)}",
       "its strides overflow int64"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (3, 3)}", "shape (3,3) of float32 needs 36 data bytes"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (1000000, 1000000)}",
       "needs 4000000000000 data bytes but only 24 follow"},
      {"{'a': " + std::string(100, '(') + "1" + std::string(100, ')') + "}", "nesting too deep"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3)}\x01", "(2, 3)}\\x01 "},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.dict);
    expect_bad(npy_file(c.dict, data), c.needle);
  }
}

TEST_F(Npy, HostileSizesAllocateNothing) {
  // A file claiming 4 TB of data: refused before any allocation.
  const size_t before = get_active_memory();
  reset_peak_memory();
  expect_bad(npy_file("{'descr': '<f4', 'fortran_order': False, 'shape': (1000000, 1000000)}", kF32Arange6),
             "needs 4000000000000 data bytes");
  EXPECT_LE(get_peak_memory(), before + 4096);

  // Through a pipe the size is unknown: the read fails once the stream runs dry.
  loom::iotest::PipeBuf pipe(
      npy_file("{'descr': '<f8', 'fortran_order': False, 'shape': (1000000000,)}", std::string(16, '\0')));
  std::istream in(&pipe);
  EXPECT_THROW_MSG(load(in), std::runtime_error, "truncated file: the array data needs 8000000000 bytes but only 16");
  EXPECT_LE(get_peak_memory(), before + 4096);
}

}  // namespace
