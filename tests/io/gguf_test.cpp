// GGUF: a file written by an independent Python writer (tests/io/gguf_expected.py) loads with the
// values numpy gives, including the Q4_0 / Q4_1 / Q8_0 triples dequantized by hand; save_gguf writes
// the bytes that writer writes; round trips of every dtype and metadata type; argument errors; and
// hostile files (truncated, bad magic and versions, absurd counts, sizes and offsets) give a clear
// std::runtime_error, never a crash or a large allocation.
#include <random>

#include "io_test_helpers.h"
#include "largest_allocation.h"
#include "loom/io/gguf.h"

namespace loom {
namespace {

using iotest::le;
using iotest::read_bytes;
using iotest::write_bytes;
using testing::expect_array;

class GGUF : public iotest::TempDirTest {};

// Printed by tests/io/gguf_expected.py (numpy 1.x): file 1 holds every metadata type and every
// tensor type Loom reads; kQ40 / kQ41 / kQ80 are its quantized tensors' values, dequantized by
// numpy from the blocks' definitions (w = d (q - 8), w = d q + m, w = d q); file 2 is what
// save_gguf must write for the arrays and metadata of SaveWritesTheBytesPythonWrites.
const char* kFile1Hex =
    "474755460300000009000000000000000f00000000000000140000000000000067656e6572616c2e6172636869746563"
    "747572650800000004000000000000006c6f6f6d0200000000000000753800000000c802000000000000006938010000"
    "00f903000000000000007531360200000060ea030000000000000069313603000000d08a030000000000000075333204"
    "00000000286bee030000000000000069333205000000c01dfeff0300000000000000663332060000000000c03f040000"
    "0000000000666c6167070000000103000000000000007536340a00000005000000000000800300000000000000693634"
    "0b0000000000000000ffffff03000000000000006636340c0000009a9999999999b93f0400000000000000696e747309"
    "00000005000000030000000000000001000000feffffff0300000005000000000000006e616d65730900000008000000"
    "0300000000000000010000000000000061000000000000000003000000000000006363630600000000000000666c6f61"
    "7473090000000600000002000000000000000000003f000080bf03000000000000006633320200000003000000000000"
    "000200000000000000000000000000000000000000030000000000000066313601000000030000000000000001000000"
    "20000000000000000400000000000000626631360100000002000000000000001e000000400000000000000002000000"
    "000000006938020000000400000000000000010000000000000018000000600000000000000003000000000000006931"
    "360100000002000000000000001900000080000000000000000300000000000000693332030000000200000000000000"
    "010000000000000002000000000000001a000000a0000000000000000f00000000000000626c6b2e71345f302e776569"
    "676874020000004000000000000000020000000000000002000000c0000000000000000f00000000000000626c6b2e71"
    "345f312e7765696768740200000040000000000000000100000000000000030000002001000000000000020000000000"
    "000071380200000020000000000000000200000000000000080000006001000000000000000000000000000000000000"
    "00000000000000000000000000000000000020c00000c0bf000000bf0000003f0000c03f000020400000000000000000"
    "003e00c0ff7b0000000000000000000000000000000000000000000000000000c03f40c0000000000000000000000000"
    "0000000000000000000000000000000080ff007f00000000000000000000000000000000000000000000000000000000"
    "0080ff7f00000000000000000000000000000000000000000000000000000000fbffffff0600000007000000f8ffffff"
    "0000000000000000000000000000000000388ccfa510637b73e789135592d487964800b4e37003159e9fff00f2a34871"
    "33edb3230030a7fc821010749595366874b1ef24b90a00404e4385ecf94a34ab74f6d45f5f04135c0000000000000000"
    "00000000000000000000000000000000003a00bcd903705f95fe00a122b4a2f07db3229a003e0038124ea36ebb83b22e"
    "330401620b6e39ea000000000000000000000000000000000000000000000000002caaf3383c68cd9e98fd8283de62eb"
    "8df0a8c893dfc81a427834c36cbd8ee0844300b86d0b7cd64df9edcb3890181d15ee99503cf9f6f53dd321e820647b7b"
    "f9c6559f";

const std::vector<double> kQ40 = {
    2, 3.5, -1.5, -4, -2.5, 1.5, -2.5, -0.5, 0.5, -2.5, -1.5, -3, -2, -0.5, -1, 0, 0, 2, 1, -3.5, -1, -0.5,
    -0.5, 3, 0, -3.5, -1.5, 0.5, 2.5, 0, 0.5, -2, 1.25, 2, 1.25, 0.75, -1.5, -1.75, -1.75, 2, 1.5, 1.25, -0,
    1.75, 1.25, -1.25, 1.25, 1.25, -1.5, 0.25, 2, 1.75, -0.25, -0.25, -1.75, 2, -1.75, -0.5, 1, 0.25, 1.25,
    -1.5, -0.75, 1.5, -0.125, 0.5, -0.75, -1, -1, -0.5, -0.375, -0.375, -0.25, 0, -0.5, -0.875, 0.875, -0.5,
    0.125, 0.25, 0.25, 0.875, 0, -0.875, -0.875, -0.125, 0.125, 0.125, -0.625, -0.25, -0.125, 0.375, 0.75,
    -0.75, 0.375, -1, 12, -10, -6, 8, 2, 4, -8, 6, -8, -4, -8, 14, 14, -8, -10, 8, -8, -8, 0, 12, 14, -8, -10,
    4, -2, 14, 10, -6, -6, -16, -14, -6};
const std::vector<double> kQ41 = {
    5.75, 1.25, -1, 10.25, 2.75, 9.5, -1, -0.25, 0.5, 2, 0.5, -1, 8.75, 1.25, 0.5, 6.5, 8.75, -1, 4.25, 2.75,
    5.75, 10.25, -1, 6.5, 0.5, 7.25, 6.5, 10.25, 4.25, 7.25, 0.5, 5.75, 3.5, 21.5, 5, 21.5, 17, 5, 3.5, 21.5,
    5, 6.5, 2, 3.5, 17, 21.5, 14, 15.5, 2, 6.5, 15.5, 9.5, 17, 12.5, 17, 3.5, 5, 0.5, 0.5, 9.5, 0.5, 9.5, 5,
    21.5};
const std::vector<double> kQ80 = {
    -5.375, -0.8125, 3.5, 3.75, 6.5, -3.1875, -6.125, -6.5, -0.1875, -7.875, -7.8125, -2.125, 6.125, -1.3125,
    -7.1875, -1, -5.5, -3.5, -6.8125, -2.0625, -3.5, 1.625, 4.125, 7.5, 3.25, -3.8125, 6.75, -4.1875, -7.125,
    -2, -7.75, 4.1875, -54.5, -5.5, -62, 21, -38.5, 3.5, 9.5, 26.5, -28, 56, -12, -14.5, -10.5, 9, 51.5, -40,
    -30, 3.5, 5, 5.5, -30.5, 22.5, -16.5, 12, -16, -50, -61.5, -61.5, 3.5, 29, -42.5, 48.5};

const char* kFile2Hex =
    "4747554603000000030000000000000004000000000000000500000000000000636f756e740400000003000000030000"
    "0000000000696473090000000b00000002000000000000000500000000000000faffffffffffffff0400000000000000"
    "6e616d6508000000040000000000000074696e7904000000000000007461677309000000080000000200000000000000"
    "0100000000000000780200000000000000797a0100000000000000610200000003000000000000000200000000000000"
    "000000000000000000000000010000000000000062010000000300000000000000180000002000000000000000010000"
    "000000000063020000000200000000000000020000000000000001000000400000000000000000000000000000000000"
    "000000000000003f0000803f0000c03f0000004000002040000000000000000001fe0300000000000000000000000000"
    "000000000000000000000000000000000038003c004000c4";

std::string unhex(const char* h) {
  std::string out;
  for (size_t i = 0; h[i] && h[i + 1]; i += 2) out += static_cast<char>(std::stoi(std::string(h + i, 2), nullptr, 16));
  return out;
}

// MLX's affine dequantization, by hand: code i of a row is bits [bits * (i % k), ...) of word
// i / k (k = 32 / bits), times its group's scale plus its group's bias (groups of 32).
std::vector<double> dequantize_by_hand(array w, array scales, array biases, int bits) {
  const auto words = w.to_vector<uint32_t>();
  const auto s = scales.to_vector<double>();
  const auto b = biases.to_vector<double>();
  const int per_word = 32 / bits, cols = w.shape(-1) * per_word;
  std::vector<double> out;
  for (size_t r = 0; r < words.size() / w.shape(-1); ++r) {
    for (int i = 0; i < cols; ++i) {
      const uint32_t word = words[r * w.shape(-1) + i / per_word];
      const uint32_t code = (word >> (bits * (i % per_word))) & ((1u << bits) - 1);
      const size_t g = r * (cols / 32) + i / 32;
      out.push_back(s[g] * code + b[g]);
    }
  }
  return out;
}

template <typename T>
T scalar(const GGUFMetaData& v, Dtype dt) {
  const array* a = std::get_if<array>(&v);
  EXPECT_TRUE(a != nullptr);
  if (!a) return T();
  EXPECT_EQ(a->dtype(), dt);
  EXPECT_EQ(a->ndim(), 0u);
  return a->item<T>();
}

TEST_F(GGUF, LoadsAFileWrittenByPython) {
  write_bytes(path("py.gguf"), unhex(kFile1Hex));
  auto [arrays, meta] = load_gguf(path("py.gguf"));

  EXPECT_EQ(meta.size(), 15u);
  EXPECT_EQ(std::get<std::string>(meta.at("general.architecture")), "loom");
  EXPECT_EQ(scalar<uint8_t>(meta.at("u8"), uint8), 200);
  EXPECT_EQ(scalar<int8_t>(meta.at("i8"), int8), -7);
  EXPECT_EQ(scalar<uint16_t>(meta.at("u16"), uint16), 60000);
  EXPECT_EQ(scalar<int16_t>(meta.at("i16"), int16), -30000);
  EXPECT_EQ(scalar<uint32_t>(meta.at("u32"), uint32), 4000000000u);
  EXPECT_EQ(scalar<int32_t>(meta.at("i32"), int32), -123456);
  EXPECT_EQ(scalar<float>(meta.at("f32"), float32), 1.5f);
  EXPECT_EQ(scalar<bool>(meta.at("flag"), bool_), true);
  EXPECT_EQ(scalar<uint64_t>(meta.at("u64"), uint64), (uint64_t(1) << 63) + 5);
  EXPECT_EQ(scalar<int64_t>(meta.at("i64"), int64), -(int64_t(1) << 40));
  EXPECT_EQ(scalar<double>(meta.at("f64"), float64), 0.1);
  const array& ints = std::get<array>(meta.at("ints"));
  EXPECT_EQ(ints.dtype(), int32);
  expect_array(ints, {3}, {1, -2, 3}, 0);
  expect_array(std::get<array>(meta.at("floats")), {2}, {0.5, -1.0}, 0);
  EXPECT_EQ(std::get<std::vector<std::string>>(meta.at("names")), (std::vector<std::string>{"a", "", "ccc"}));

  EXPECT_EQ(arrays.size(), 15u);  // 6 plain tensors and 3 quantized triples
  // Shapes are the GGUF dimensions reversed: numpy's order again.
  EXPECT_EQ(arrays.at("f32").dtype(), float32);
  expect_array(arrays.at("f32"), {2, 3}, {-2.5, -1.5, -0.5, 0.5, 1.5, 2.5}, 0);
  EXPECT_EQ(arrays.at("f16").dtype(), float16);
  expect_array(arrays.at("f16"), {3}, {1.5, -2.0, 65504}, 0);
  EXPECT_EQ(arrays.at("bf16").dtype(), bfloat16);
  expect_array(arrays.at("bf16"), {2}, {1.5, -3.0}, 0);
  EXPECT_EQ(arrays.at("i8").dtype(), int8);
  expect_array(arrays.at("i8"), {1, 4}, {-128, -1, 0, 127}, 0);
  EXPECT_EQ(arrays.at("i16").dtype(), int16);
  expect_array(arrays.at("i16"), {2}, {-32768, 32767}, 0);
  EXPECT_EQ(arrays.at("i32").dtype(), int32);
  expect_array(arrays.at("i32"), {2, 1, 2}, {-5, 6, 7, -8}, 0);

  // Quantized tensors: MLX's triple; "<name>.weight" gives "<name>.scales" / "<name>.biases".
  const array& w4 = arrays.at("blk.q4_0.weight");
  EXPECT_EQ(w4.dtype(), uint32);
  EXPECT_EQ(w4.shape(), (Shape{2, 8}));
  EXPECT_EQ(arrays.at("blk.q4_0.scales").dtype(), float16);
  EXPECT_EQ(arrays.at("blk.q4_0.scales").shape(), (Shape{2, 2}));
  EXPECT_EQ(arrays.at("blk.q4_0.biases").shape(), (Shape{2, 2}));
  expect_array(arrays.at("blk.q4_0.scales"), {2, 2}, {0.5, -0.25, 0.125, 2.0}, 0);
  expect_array(arrays.at("blk.q4_0.biases"), {2, 2}, {-4, 2, -1, -16}, 0);  // -8 d
  EXPECT_EQ(dequantize_by_hand(w4, arrays.at("blk.q4_0.scales"), arrays.at("blk.q4_0.biases"), 4), kQ40);
  const array& w41 = arrays.at("blk.q4_1.weight");
  EXPECT_EQ(w41.shape(), (Shape{1, 8}));
  expect_array(arrays.at("blk.q4_1.biases"), {1, 2}, {-1.0, 0.5}, 0);  // m, as stored
  EXPECT_EQ(dequantize_by_hand(w41, arrays.at("blk.q4_1.scales"), arrays.at("blk.q4_1.biases"), 4), kQ41);
  // A name without ".weight" keeps its whole name as the prefix.
  const array& w8 = arrays.at("q8");
  EXPECT_EQ(w8.shape(), (Shape{2, 8}));
  expect_array(arrays.at("q8.biases"), {2, 1}, {-8, 64}, 0);  // -128 d
  EXPECT_EQ(dequantize_by_hand(w8, arrays.at("q8.scales"), arrays.at("q8.biases"), 8), kQ80);
}

TEST_F(GGUF, SaveWritesTheBytesPythonWrites) {
  std::unordered_map<std::string, array> arrays = {
      {"a", reshape(arange(6.0, float32) * 0.5f, {2, 3})},
      {"b", array({1, -2, 3}, {3}, int8)},
      {"c", array({0.5, 1.0, 2.0, -4.0}, {2, 2}, float16)}};
  std::unordered_map<std::string, GGUFMetaData> meta = {{"count", array(3, uint32)},
                                                        {"ids", array({5, -6}, {2}, int64)},
                                                        {"name", std::string("tiny")},
                                                        {"tags", std::vector<std::string>{"x", "yz"}}};
  save_gguf(path("tiny"), arrays, meta);  // ".gguf" is appended, as MLX does
  EXPECT_EQ(listing(), (std::vector<std::string>{"tiny.gguf"}));
  EXPECT_EQ(read_bytes(path("tiny.gguf")), unhex(kFile2Hex));
}

TEST_F(GGUF, RoundTrip) {
  std::unordered_map<std::string, array> arrays = {
      {"f32", reshape(arange(24.0, float32), {2, 3, 4})},
      {"f16", array({0.5, -1.25}, {2}, float16)},
      {"bf16", array({3.0, -0.5, 8.0}, {3, 1}, bfloat16)},
      {"f64", array({0.1, 1e300}, {1, 2}, float64)},
      {"i8", array({-128, 127}, {2}, int8)},
      {"i16", array({-300, 300}, {2}, int16)},
      {"i32", transpose(reshape(arange(6), {2, 3}))},  // strided: written in row-major order
      {"i64", broadcast_to(array({int64_t(1) << 40}, {1}, int64), {2, 2})},
      {"scalar", array(2.5f)},
      {"empty", zeros({0, 3}, float32)},
      {"five_d", ones({1, 2, 1, 2, 1}, int32)}};
  std::unordered_map<std::string, GGUFMetaData> meta = {
      {"s", std::string("hello")},           {"list", std::vector<std::string>{"a", "bb"}},
      {"none", std::vector<std::string>{}},  {"u8", array(uint8_t(9), uint8)},
      {"i8s", array({-1, 2}, {2}, int8)},    {"u16", array({7}, {1}, uint16)},
      {"i16", array(int16_t(-2), int16)},    {"u32s", array({1u, 4000000000u}, {2}, uint32)},
      {"f32", array(0.25f)},                 {"bools", array({true, false, true})},
      {"u64", array(uint64_t(1) << 60, uint64)}, {"i64", array({int64_t(-1)}, {1}, int64)},
      {"f64", array({0.1, -2.0}, {2}, float64)}, {"general.alignment", array(64u, uint32)}};
  save_gguf(path("rt.gguf"), arrays, meta);
  auto [got, gmeta] = load_gguf(path("rt.gguf"));
  ASSERT_EQ(got.size(), arrays.size());
  for (auto [name, a] : arrays) {
    SCOPED_TRACE(name);
    EXPECT_EQ(got.at(name).dtype(), a.dtype());
    expect_array(got.at(name), a.shape(), a.to_vector<double>(), 0);
  }
  ASSERT_EQ(gmeta.size(), meta.size());
  for (const auto& [key, v] : meta) {
    SCOPED_TRACE(key);
    ASSERT_EQ(gmeta.at(key).index(), v.index());
    if (auto pa = std::get_if<array>(&v)) {
      array a = *pa, b = std::get<array>(gmeta.at(key));
      EXPECT_EQ(b.dtype(), a.dtype());
      EXPECT_EQ(b.shape(), a.shape());
      if (a.dtype() == uint64) {
        EXPECT_EQ(b.to_vector<uint64_t>(), a.to_vector<uint64_t>());
      } else {
        EXPECT_EQ(b.to_vector<double>(), a.to_vector<double>());
      }
    } else if (auto ps = std::get_if<std::string>(&v)) {
      EXPECT_EQ(std::get<std::string>(gmeta.at(key)), *ps);
    } else {
      EXPECT_EQ(std::get<std::vector<std::string>>(gmeta.at(key)), std::get<std::vector<std::string>>(v));
    }
  }
}

TEST_F(GGUF, SaveErrors) {
  auto save_one = [&](const array& a) { save_gguf(path("e.gguf"), {{"x", a}}); };
  EXPECT_THROW_MSG(save_one(array({1, 2}, {2}, uint8)), std::invalid_argument, "[save_gguf] tensor 'x': dtype uint8");
  EXPECT_THROW_MSG(save_one(array({true})), std::invalid_argument, "dtype bool");
  EXPECT_THROW_MSG(save_one(zeros({1, 1, 1, 1, 1, 1, 1, 1, 1})), std::invalid_argument, "9 dimensions");
  auto save_meta = [&](const GGUFMetaData& v) { save_gguf(path("e.gguf"), {}, {{"k", v}}); };
  EXPECT_THROW_MSG(save_meta(array(1.0, float16)), std::invalid_argument, "[save_gguf] metadata 'k': dtype float16");
  EXPECT_THROW_MSG(save_meta(zeros({2, 2})), std::invalid_argument, "shape (2,2)");
  EXPECT_THROW_MSG(save_meta(zeros({0})), std::invalid_argument, "empty");
  EXPECT_THROW_MSG(save_meta(GGUFMetaData{}), std::invalid_argument, "std::monostate");
  auto save_align = [&](const array& a) { save_gguf(path("e.gguf"), {}, {{"general.alignment", a}}); };
  EXPECT_THROW_MSG(save_align(array(0u, uint32)), std::invalid_argument, "general.alignment");
  EXPECT_THROW_MSG(save_align(array(32)), std::invalid_argument, "general.alignment");  // int32
  EXPECT_THROW_MSG(save_align(array(1u << 21, uint32)), std::invalid_argument, "general.alignment");
  EXPECT_TRUE(listing().empty());  // nothing written, no temporary left
}

// ---- hostile files, built byte by byte ----

std::string u32(uint64_t v) { return le(v, 4); }
std::string u64(uint64_t v) { return le(v, 8); }
std::string gstr(const std::string& s) { return u64(s.size()) + s; }
std::string header(uint64_t tensors, uint64_t kvs, uint32_t version = 3) {
  return "GGUF" + u32(version) + u64(tensors) + u64(kvs);
}
// One tensor info (dims as GGUF stores them).
std::string info(const std::string& name, const std::vector<uint64_t>& dims, uint32_t type, uint64_t offset) {
  std::string s = gstr(name) + u32(dims.size());
  for (uint64_t d : dims) s += u64(d);
  return s + u32(type) + u64(offset);
}
std::string padded(std::string s) { return s.append((32 - s.size() % 32) % 32, '\0'); }

class GGUFHostile : public iotest::TempDirTest {
 protected:
  // Loading `bytes` throws std::runtime_error "[load_gguf] '<path>': " containing `needle`, with no
  // allocation near what the file claims.
  void expect_refused(const std::string& bytes, const std::string& needle) {
    const std::string p = path("h.gguf");
    write_bytes(p, bytes);
    const size_t largest = iotest::largest_allocation([&] {
      try {
        load_gguf(p);
        ADD_FAILURE() << "expected an error containing '" << needle << "'";
      } catch (const std::runtime_error& e) {
        const std::string what = e.what();
        EXPECT_EQ(what.rfind("[load_gguf] '" + p + "': ", 0), 0u) << what;
        EXPECT_NE(what.find(needle), std::string::npos) << what;
      }
    });
    EXPECT_LT(largest, size_t(1) << 20);
  }
};

TEST_F(GGUFHostile, MagicVersionsAndTruncation) {
  expect_refused("", "too short");
  expect_refused("GGU", "too short");
  expect_refused("GGML" + u32(3) + u64(0) + u64(0), "magic");
  expect_refused(header(0, 0, 1), "unsupported GGUF version 1");
  expect_refused(header(0, 0, 4), "version 4");
  expect_refused(header(0, 0, 0x03000000), "big-endian");
  expect_refused("GGUF" + u32(3) + u64(0), "the metadata count");
  // A valid file is refused at every shorter length.
  save_gguf(path("good.gguf"), {{"w", reshape(arange(6.0, float32), {2, 3})}, {"b", array({1, 2}, {2}, int8)}},
            {{"name", std::string("x")}, {"v", array({1, 2}, {2}, int32)}});
  const std::string good = read_bytes(path("good.gguf"));
  EXPECT_NO_THROW(load_gguf(path("good.gguf")));
  for (size_t n = 0; n < good.size(); ++n) {
    SCOPED_TRACE("truncated to " + std::to_string(n));
    expect_refused(good.substr(0, n), "");
  }
  // A file of metadata only may end without padding.
  write_bytes(path("meta.gguf"), header(0, 1) + gstr("k") + u32(8) + gstr("v"));
  EXPECT_EQ(std::get<std::string>(load_gguf(path("meta.gguf")).second.at("k")), "v");
}

TEST_F(GGUFHostile, AbsurdCountsAndLengths) {
  expect_refused(header(uint64_t(1) << 62, 0), "tensor count");
  expect_refused(header(0, uint64_t(1) << 62), "metadata count");
  expect_refused(header(0, 1) + u64(uint64_t(1) << 63) + std::string(16, 'k'), "metadata key 0");
  expect_refused(header(0, 1) + gstr("k") + u32(8) + u64(~uint64_t(0)), "metadata 'k'");
  // Numeric array whose byte count overflows 64 bits, and a string array claiming 2^60 strings.
  expect_refused(header(0, 1) + gstr("k") + u32(9) + u32(10) + u64(uint64_t(1) << 61) + std::string(16, 0), "claims");
  expect_refused(header(0, 1) + gstr("k") + u32(9) + u32(8) + u64(uint64_t(1) << 60) + std::string(16, 0), "strings");
  expect_refused(header(0, 1) + gstr("k") + u32(9) + u32(9) + u64(1) + std::string(16, 0), "array of arrays");
  expect_refused(header(0, 1) + gstr("k") + u32(13) + std::string(16, 0), "unknown value type 13");
  expect_refused(header(0, 1) + gstr("k") + u32(9) + u32(77) + u64(1) + std::string(16, 0), "unknown value type 77");
  expect_refused(header(0, 2) + gstr("k") + u32(0) + "a" + gstr("k") + u32(0) + "b", "appears twice");
  expect_refused(header(0, 1) + gstr("general.alignment") + u32(4) + u32(0), "is 0");
  expect_refused(header(0, 1) + gstr("general.alignment") + u32(8) + gstr("32"), "must be a uint32");
}

TEST_F(GGUFHostile, AbsurdTensors) {
  const std::string data(64, '\0');
  auto one = [&](const std::vector<uint64_t>& dims, uint32_t type, uint64_t offset) {
    return padded(header(1, 0) + info("t", dims, type, offset)) + data;
  };
  EXPECT_NO_THROW(write_bytes(path("ok.gguf"), one({4, 2}, 0, 0)));
  EXPECT_EQ(load_gguf(path("ok.gguf")).first.at("t").shape(), (Shape{2, 4}));
  expect_refused(one({uint64_t(1) << 40}, 0, 0), "larger than Loom's limit");
  expect_refused(one({2147483647, 2147483647, 2147483647, 2147483647}, 0, 0), "too large");
  expect_refused(one({1, 1, 1, 1, 1, 1, 1, 1, 1}, 0, 0), "9 dimensions");
  expect_refused(padded(header(1, 0) + gstr("t") + u32(0xffffffff)), "dimensions");
  expect_refused(one({4}, 14, 0), "GGML type Q6_K (14)");
  expect_refused(one({4}, 99, 0), "unknown (99)");
  expect_refused(one({17}, 0, 0), "68 bytes at data offset 0 lie outside the 64-byte data section");
  expect_refused(one({4}, 0, 64), "at data offset 64");
  expect_refused(one({4}, 0, ~uint64_t(0) - 3), "outside");  // offset + size overflows
  expect_refused(one({2147483647, 2147483647}, 1, 0), "outside");
  expect_refused(one({48}, 8, 0), "multiple of the block size 32");
  expect_refused(one({}, 2, 0), "multiple of the block size 32");
  expect_refused(padded(header(2, 0) + info("t", {1}, 0, 0) + info("t", {1}, 0, 0)) + data, "appears twice");
  // A quantized tensor's scales collide with a plain tensor's name.
  expect_refused(padded(header(2, 0) + info("x.scales", {1}, 0, 0) + info("x.weight", {32}, 8, 0)) + data,
                 "'x.scales'");
  // The data section must exist when there are tensors.
  expect_refused(header(1, 0) + info("t", {1}, 0, 0), "data section");
}

// Mutated bytes of a valid file either load or give the documented error.
TEST_F(GGUFHostile, SurvivesRandomDamage) {
  save_gguf(path("good.gguf"), {{"w", reshape(arange(6.0, float32), {2, 3})}},
            {{"name", std::string("x")}, {"v", array({1, 2}, {2}, int32)}, {"l", std::vector<std::string>{"a"}}});
  const std::string good = read_bytes(path("good.gguf"));
  write_bytes(path("q.gguf"), unhex(kFile1Hex));
  const std::string good2 = read_bytes(path("q.gguf"));
  std::mt19937 rng(7);
  size_t loaded = 0, refused = 0;
  const std::string p = path("m.gguf");
  for (const std::string* base : {&good, &good2}) {
    for (int it = 0; it < 600; ++it) {
      std::string bad = *base;
      const int flips = 1 + static_cast<int>(rng() % 3);
      for (int k = 0; k < flips; ++k) bad[rng() % bad.size()] = static_cast<char>(rng() & 0xff);
      write_bytes(p, bad);
      try {
        load_gguf(p);
        ++loaded;
      } catch (const std::runtime_error& e) {
        EXPECT_EQ(std::string(e.what()).rfind("[load_gguf] '" + p + "': ", 0), 0u) << e.what();
        ++refused;
      }
    }
  }
  EXPECT_GT(loaded, 0u);
  EXPECT_GT(refused, 0u);
}

TEST_F(GGUF, MissingFile) {
  EXPECT_THROW_MSG(load_gguf(path("nope.gguf")), std::runtime_error, "[load_gguf] '" + path("nope.gguf") + "'");
}

}  // namespace
}  // namespace loom
