#include <limits>

#include "dataset_test_helpers.h"
#include "io_test_helpers.h"
#include "largest_allocation.h"

using namespace loom;
using loom::iotest::bytes;
using loom::iotest::le;
using loom::iotest::read_bytes;
using loom::iotest::write_bytes;
using loom::testing::expect_array;

namespace {

// 0.0f .. 5.0f, little-endian, written out by hand.
const std::string kSafetensorsF32Arange6 = bytes({0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x80, 0x3f, 0x00, 0x00, 0x00, 0x40,
                                       0x00, 0x00, 0x40, 0x40, 0x00, 0x00, 0x80, 0x40, 0x00, 0x00, 0xa0, 0x40});

// A safetensors file: the 8-byte header length, the header text as given, the data.
std::string st_file(const std::string& header, const std::string& data) { return le(header.size(), 8) + header + data; }

class Safetensors : public loom::iotest::TempDirTest {
 protected:
  // Writes `content`, loads it and expects a runtime_error naming the file and `needle`.
  void expect_bad(const std::string& content, const std::string& needle) {
    const std::string p = path("bad.safetensors");
    write_bytes(p, content);
    try {
      load_safetensors(p);
      ADD_FAILURE() << "expected an error containing \"" << needle << "\"";
    } catch (const std::runtime_error& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find(needle), std::string::npos) << what;
      EXPECT_NE(what.find("[load_safetensors] '" + p + "'"), std::string::npos) << what;
    }
  }
  // One F32 tensor entry.
  static std::string entry(const std::string& name, const std::string& shape, uint64_t b, uint64_t e,
                           const std::string& dtype = "F32") {
    return "\"" + name + "\":{\"dtype\":\"" + dtype + "\",\"shape\":" + shape + ",\"data_offsets\":[" +
           std::to_string(b) + "," + std::to_string(e) + "]}";
  }
};

TEST_F(Safetensors, MatchesTheReferenceWritersBytes) {
  // The byte sequences asserted by the reference Rust implementation's own serialization tests (files
  // without checksums, as other writers make them), which the reader takes as they are.
  // "attn.0": the header is exactly 64 bytes, so no padding.
  const std::string h1 = "{\"attn.0\":{\"dtype\":\"F32\",\"shape\":[1,2,3],\"data_offsets\":[0,24]}}";
  ASSERT_EQ(h1.size(), 64u);
  write_bytes(path("a.safetensors"), bytes({64, 0, 0, 0, 0, 0, 0, 0}) + h1 + kSafetensorsF32Arange6);
  // "attn0" with shape [1,1,2,3]: 65 bytes padded with 7 spaces to 72.
  const std::string h2 = "{\"attn0\":{\"dtype\":\"F32\",\"shape\":[1,1,2,3],\"data_offsets\":[0,24]}}";
  ASSERT_EQ(h2.size(), 65u);
  write_bytes(path("b.safetensors"), bytes({72, 0, 0, 0, 0, 0, 0, 0}) + h2 + "       " + kSafetensorsF32Arange6);
  auto [t1, meta1] = load_safetensors(path("a.safetensors"));
  EXPECT_TRUE(meta1.empty());
  expect_array(t1.at("attn.0"), {1, 2, 3}, {0, 1, 2, 3, 4, 5}, 0.0);
  auto [t, meta] = load_safetensors(path("b.safetensors"));
  ASSERT_EQ(t.size(), 1u);
  EXPECT_TRUE(meta.empty());
  EXPECT_EQ(t.at("attn0").dtype(), float32);
  expect_array(t.at("attn0"), {1, 1, 2, 3}, {0, 1, 2, 3, 4, 5}, 0.0);

  // Loom's writer adds each tensor's CRC-32 as metadata, and writes what the reference writer
  // writes given that metadata: 112 bytes of JSON, no padding. 0x91e79017 is zlib.crc32 of the
  // 24 data bytes (and datatest::crc32's, an independent bitwise CRC).
  ASSERT_EQ(loom::datatest::crc32(kSafetensorsF32Arange6), 0x91e79017u);
  save_safetensors(path("w.safetensors"), {{"attn.0", reshape(arange(6.0, float32), {1, 2, 3})}});
  const std::string h3 =
      "{\"__metadata__\":{\"loom.crc32.attn.0\":\"91e79017\"},"
      "\"attn.0\":{\"dtype\":\"F32\",\"shape\":[1,2,3],\"data_offsets\":[0,24]}}";
  ASSERT_EQ(h3.size(), 112u);
  EXPECT_EQ(read_bytes(path("w.safetensors")), bytes({112, 0, 0, 0, 0, 0, 0, 0}) + h3 + kSafetensorsF32Arange6);

  // No tensors at all: no metadata either.
  save_safetensors(path("e.safetensors"), {});
  EXPECT_EQ(read_bytes(path("e.safetensors")), bytes({8, 0, 0, 0, 0, 0, 0, 0, '{', '}', 32, 32, 32, 32, 32, 32}));
  auto empty = load_safetensors(path("e.safetensors"));
  EXPECT_TRUE(empty.first.empty());
  EXPECT_TRUE(empty.second.empty());
}

TEST_F(Safetensors, MetadataFirstThenTensorsSortedByName) {
  // Hand-counted: the JSON is 203 bytes, padded with five spaces to 208 = 0xd0. The checksums are
  // zlib.crc32 of each tensor's bytes; the caller's metadata comes back without them.
  save_safetensors(path("m.safetensors"), {{"b", array(int64_t(7))}, {"a", array({1.0f, -2.0f})}},
                   {{"format", "pt"}, {"author", "x"}});
  const std::string json =
      "{\"__metadata__\":{\"author\":\"x\",\"format\":\"pt\",\"loom.crc32.a\":\"c3872656\","
      "\"loom.crc32.b\":\"6fe7d670\"},"
      "\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
      "\"b\":{\"dtype\":\"I64\",\"shape\":[],\"data_offsets\":[8,16]}}";
  ASSERT_EQ(json.size(), 203u);
  EXPECT_EQ(read_bytes(path("m.safetensors")), bytes({0xd0, 0, 0, 0, 0, 0, 0, 0}) + json + "     " +
                                                   bytes({0, 0, 0x80, 0x3f, 0, 0, 0, 0xc0}) +
                                                   bytes({7, 0, 0, 0, 0, 0, 0, 0}));
  auto [t, meta] = load_safetensors(path("m.safetensors"));
  EXPECT_EQ(meta, (std::unordered_map<std::string, std::string>{{"format", "pt"}, {"author", "x"}}));
  expect_array(t.at("a"), {2}, {1, -2}, 0.0);
  EXPECT_EQ(t.at("b").ndim(), 0u);
  EXPECT_EQ(t.at("b").item<int64_t>(), 7);

  // Mixed sizes: offsets follow name order; 256 bytes of JSON, no padding.
  save_safetensors(path("o.safetensors"),
                   {{"w", array({0.5, -1.0}, float64)}, {"b", array({1, 2, 3}, {3}, uint8)}, {"a", array({true})}});
  const std::string json2 =
      "{\"__metadata__\":{\"loom.crc32.a\":\"a505df1b\",\"loom.crc32.b\":\"55bc801d\",\"loom.crc32.w\":\"65b30687\"},"
      "\"a\":{\"dtype\":\"BOOL\",\"shape\":[1],\"data_offsets\":[0,1]},"
      "\"b\":{\"dtype\":\"U8\",\"shape\":[3],\"data_offsets\":[1,4]},"
      "\"w\":{\"dtype\":\"F64\",\"shape\":[2],\"data_offsets\":[4,20]}}";
  ASSERT_EQ(json2.size(), 256u);
  EXPECT_EQ(read_bytes(path("o.safetensors")), bytes({0, 1, 0, 0, 0, 0, 0, 0}) + json2 + bytes({1, 1, 2, 3}) +
                                                   bytes({0, 0, 0, 0, 0, 0, 0xe0, 0x3f, 0, 0, 0, 0, 0, 0, 0xf0, 0xbf}));
  EXPECT_TRUE(load_safetensors(path("o.safetensors")).second.empty());
}

TEST_F(Safetensors, RoundTripsEveryDtypeAndLayout) {
  array m = reshape(arange(12.0, float32), {3, 4});
  std::unordered_map<std::string, array> in = {
      {"bool", array({true, false, true})},
      {"u8", array({0, 255, 7}, {3}, uint8)},
      {"i32", array({-2147483647 - 1, 5, 2147483647}, {3}, int32)},
      {"i64",
       array({std::numeric_limits<int64_t>::min(), int64_t(1), std::numeric_limits<int64_t>::max()}, {3}, int64)},
      {"f16", array({1.0, -65504.0, 0.5}, {3}, float16)},
      {"bf16", array({1.0f, -3.0f, 0.5f, 1e30f}, {2, 2}, bfloat16)},
      {"f32", m},
      {"f64", array({0.1, -1e300}, {2, 1}, float64)},
      {"transposed", transpose(m)},
      {"reversed", slice(m, {2, 3}, {-4, -5}, {-1, -2})},
      {"broadcast", broadcast_to(array({1.5f, 2.5f}), {2, 2})},
      {"scalar", array(3.25, float64)},
      {"empty", zeros({0, 3}, bfloat16)},
      {"empty2", zeros({4, 0}, int64)},
      {"lazy", add(m, array(1.0f))},
  };
  save_safetensors(path("all.safetensors"), in, {{"step", "12"}});
  EXPECT_EQ(listing(), std::vector<std::string>{"all.safetensors"});  // no temporary, no suffix
  auto [t, meta] = load_safetensors(path("all.safetensors"));
  EXPECT_EQ(meta.at("step"), "12");
  ASSERT_EQ(t.size(), in.size());
  for (auto& [name, a] : in) {
    SCOPED_TRACE(name);
    EXPECT_EQ(t.at(name).dtype(), a.dtype());
    EXPECT_TRUE(t.at(name).flags().row_contiguous);
  }
  expect_array(t.at("bool"), {3}, {1, 0, 1}, 0.0);
  expect_array(t.at("u8"), {3}, {0, 255, 7}, 0.0);
  EXPECT_EQ(t.at("i32").to_vector<int32_t>(), (std::vector<int32_t>{-2147483647 - 1, 5, 2147483647}));
  EXPECT_EQ(t.at("i64").to_vector<int64_t>(),
            (std::vector<int64_t>{std::numeric_limits<int64_t>::min(), 1, std::numeric_limits<int64_t>::max()}));
  expect_array(t.at("f16"), {3}, {1, -65504, 0.5}, 0.0);
  // bfloat16 keeps 8 significand bits: 1e30 (0x7149f2ca as float32) rounds to 0x714a.
  expect_array(t.at("bf16"), {2, 2}, {1, -3, 0.5, 1.0002555517425873e30}, 0.0);
  EXPECT_EQ(static_cast<const uint16_t*>(t.at("bf16").raw_data())[3], 0x714a);
  expect_array(t.at("f32"), {3, 4}, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, 0.0);
  expect_array(t.at("f64"), {2, 1}, {0.1, -1e300}, 0.0);
  expect_array(t.at("transposed"), {4, 3}, {0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11}, 0.0);
  expect_array(t.at("reversed"), {3, 2}, {11, 9, 7, 5, 3, 1}, 0.0);
  expect_array(t.at("broadcast"), {2, 2}, {1.5, 2.5, 1.5, 2.5}, 0.0);
  expect_array(t.at("scalar"), {}, {3.25}, 0.0);
  EXPECT_EQ(t.at("empty").shape(), (Shape{0, 3}));
  EXPECT_EQ(t.at("empty2").shape(), (Shape{4, 0}));
  expect_array(t.at("lazy"), {3, 4}, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, 0.0);
}

TEST_F(Safetensors, DeterministicAndAtomic) {
  std::unordered_map<std::string, array> a, b;
  const std::vector<std::string> names = {"layer.0.w", "layer.0.b", "emb", "z", "layer.10.w", "A"};
  for (size_t i = 0; i < names.size(); ++i) a.emplace(names[i], full({2}, float(i)));
  for (size_t i = names.size(); i-- > 0;) b.emplace(names[i], full({2}, float(i)));
  save_safetensors(path("a.st"), a, {{"x", "1"}, {"y", "2"}, {"w", "3"}});
  save_safetensors(path("b.st"), b, {{"w", "3"}, {"y", "2"}, {"x", "1"}});
  EXPECT_EQ(read_bytes(path("a.st")), read_bytes(path("b.st")));
  // Overwrite in place; nothing else left in the directory.
  save_safetensors(path("a.st"), {{"only", array({1})}});
  EXPECT_EQ(load_safetensors(path("a.st")).first.size(), 1u);
  EXPECT_EQ(listing(), (std::vector<std::string>{"a.st", "b.st"}));
  EXPECT_THROW_MSG(save_safetensors(path("no_dir/x.st"), a), std::runtime_error, "cannot create");
}

TEST_F(Safetensors, RejectsBadNamesBeforeWriting) {
  EXPECT_THROW_MSG(save_safetensors(path("x.st"), {{"__metadata__", array({1})}}), std::invalid_argument,
                   "'__metadata__' is reserved");
  EXPECT_THROW_MSG(save_safetensors(path("x.st"), {{std::string("bad\xff"), array({1})}}), std::invalid_argument,
                   "not valid UTF-8");
  EXPECT_THROW_MSG(save_safetensors(path("x.st"), {{"ok", array({1})}}, {{"k", std::string("\xc3")}}),
                   std::invalid_argument, "not valid UTF-8");
  EXPECT_TRUE(listing().empty());
}

TEST_F(Safetensors, ChecksumsReservedInTheMetadata) {
  EXPECT_THROW_MSG(save_safetensors(path("x.st"), {{"w", array({1})}}, {{"loom.crc32.w", "00000000"}}),
                   std::invalid_argument,
                   "[save_safetensors] metadata key 'loom.crc32.w' uses the prefix 'loom.crc32.', reserved for the "
                   "tensors' checksums");
  EXPECT_TRUE(listing().empty());
  // Other "loom." keys are the caller's (checkpoints use them).
  save_safetensors(path("k.st"), {{"w", array({1})}}, {{"loom.step", "3"}, {"loom.crc32", "x"}});
  EXPECT_EQ(load_safetensors(path("k.st")).second,
            (std::unordered_map<std::string, std::string>{{"loom.step", "3"}, {"loom.crc32", "x"}}));
}

TEST_F(Safetensors, DamagedDataIsRefusedNamingTheTensor) {
  const std::unordered_map<std::string, array> in = {{"l1.weight", reshape(arange(12.0, float32), {3, 4})},
                                                     {"l1.bias", array({0.5f, -0.5f, 1.5f})},
                                                     {"step", array(int64_t(9))}};
  save_safetensors(path("good.st"), in, {{"epoch", "2"}});
  const std::string good = read_bytes(path("good.st"));
  uint64_t hlen = 0;
  for (int b = 7; b >= 0; --b) hlen = (hlen << 8) | static_cast<unsigned char>(good[b]);
  // The data buffer: l1.bias [0, 12), l1.weight [12, 60), step [60, 68).
  const size_t data = 8 + hlen;
  ASSERT_EQ(good.size(), data + 68);
  struct Case {
    size_t offset;
    std::string tensor;
  };
  for (const Case& c : std::vector<Case>{{data + 0, "l1.bias"}, {data + 12 + 17, "l1.weight"}, {data + 67, "step"}}) {
    SCOPED_TRACE(c.tensor);
    std::string bad = good;
    bad[c.offset] = static_cast<char>(bad[c.offset] ^ 0x01);  // one bit: a value still, just a wrong one
    expect_bad(bad, "tensor '" + c.tensor + "': checksum mismatch, the file is damaged (its data has CRC-32 ");
    std::istringstream is(bad);
    EXPECT_THROW_MSG(load_safetensors(is), std::runtime_error,
                     "[load_safetensors] '<stream>': tensor '" + c.tensor + "': checksum mismatch");
    loom::iotest::PipeBuf pipe(bad);
    std::istream ps(&pipe);
    EXPECT_THROW_MSG(load_safetensors(ps), std::runtime_error, "tensor '" + c.tensor + "': checksum mismatch");
  }
  // A damaged checksum is a damaged file too.
  std::string bad = good;
  const size_t at = bad.find("\"loom.crc32.step\":\"") + std::string("\"loom.crc32.step\":\"").size();
  bad[at] = bad[at] == '0' ? '1' : '0';
  expect_bad(bad, "tensor 'step': checksum mismatch, the file is damaged");
  // The undamaged file loads, its checksums left out of the metadata.
  auto [t, meta] = load_safetensors(path("good.st"));
  EXPECT_EQ(meta, (std::unordered_map<std::string, std::string>{{"epoch", "2"}}));
  expect_array(t.at("l1.bias"), {3}, {0.5, -0.5, 1.5}, 0.0);
}

TEST_F(Safetensors, FilesWithoutChecksumsLoadUnchecked) {
  save_safetensors(path("c.st"), {{"a", array({1.0f, 2.0f})}, {"b", array({3}, {1}, int32)}}, {{"k", "v"}});
  const std::string with = read_bytes(path("c.st"));
  ASSERT_NE(with.find("\"loom.crc32.a\":\""), std::string::npos);
  const std::string plain = loom::iotest::strip_checksums(with);
  ASSERT_EQ(plain.find("loom.crc32"), std::string::npos);
  write_bytes(path("plain.st"), plain);
  auto [t, meta] = load_safetensors(path("plain.st"));
  expect_array(t.at("a"), {2}, {1, 2}, 0.0);
  EXPECT_EQ(t.at("b").to_vector<int32_t>(), std::vector<int32_t>{3});
  EXPECT_EQ(meta, (std::unordered_map<std::string, std::string>{{"k", "v"}}));
  // Unchecked: a changed byte loads as a changed value.
  std::string changed = plain;
  changed[changed.size() - 6] = static_cast<char>(0x40);  // a[1]: 2.0f (0x40000000) becomes 3.0f (0x40400000)
  write_bytes(path("changed.st"), changed);
  expect_array(load_safetensors(path("changed.st")).first.at("a"), {2}, {1, 3}, 0.0);
  // Only some tensors checked (upper-case hex is read too): the others load unchecked.
  const std::string h = "{\"__metadata__\":{\"loom.crc32.a\":\"C3872656\"}," + entry("a", "[2]", 0, 8) + "," +
                        entry("z", "[1]", 8, 12) + "}";
  write_bytes(path("some.st"), st_file(h, bytes({0, 0, 0x80, 0x3f, 0, 0, 0, 0xc0, 0, 0, 0, 0})));
  auto some = load_safetensors(path("some.st"));
  expect_array(some.first.at("a"), {2}, {1, -2}, 0.0);
  EXPECT_TRUE(some.second.empty());
}

TEST_F(Safetensors, ReadsOffsetsInAnyNameOrderAndEmptyTensors) {
  // "z" comes first in the buffer, "a" second; "e" (empty) sits at offset 4; an unknown field is ignored.
  const std::string h = "{" + entry("a", "[2]", 4, 12) + "," + entry("z", "[1]", 0, 4, "I32") + "," +
                        entry("e", "[0,5]", 4, 4, "F64") +
                        ",\"__metadata__\":{\"note\":\"hand made\"},\"x\":{\"dtype\":\"U8\",\"shape\":[],"
                        "\"data_offsets\":[12,13],\"extra\":true}}";
  write_bytes(path("h.st"), st_file(h, bytes({0xfe, 0xff, 0xff, 0xff, 0, 0, 0x80, 0x3f, 0, 0, 0x20, 0xc1, 9})));
  auto [t, meta] = load_safetensors(path("h.st"));
  EXPECT_EQ(t.size(), 4u);
  EXPECT_EQ(meta.at("note"), "hand made");
  EXPECT_EQ(t.at("z").to_vector<int32_t>(), std::vector<int32_t>{-2});
  expect_array(t.at("a"), {2}, {1.0, -10.0}, 0.0);
  EXPECT_EQ(t.at("e").shape(), (Shape{0, 5}));
  EXPECT_EQ(t.at("e").dtype(), float64);
  EXPECT_EQ(t.at("x").item<int>(), 9);
  // A null metadata entry means no metadata.
  write_bytes(path("n.st"),
              st_file("{\"__metadata__\":null," + entry("a", "[]", 0, 4) + "}", bytes({0, 0, 0x80, 0x3f})));
  auto nl = load_safetensors(path("n.st"));
  EXPECT_TRUE(nl.second.empty());
  expect_array(nl.first.at("a"), {}, {1.0}, 0.0);
  // Bool bytes other than 0 and 1 read as true.
  write_bytes(path("b.st"), st_file("{" + entry("b", "[3]", 0, 3, "BOOL") + "}", bytes({0, 5, 1})));
  array bb = load_safetensors(path("b.st")).first.at("b");
  const auto* raw = static_cast<const uint8_t*>(bb.raw_data());
  EXPECT_EQ(std::vector<int>(raw, raw + 3), (std::vector<int>{0, 1, 1}));
}

TEST_F(Safetensors, StreamsAndPipes) {
  std::stringstream ss;
  save_safetensors(ss, {{"w", array({1.0f, 2.0f})}}, {{"k", "v"}});
  ss << "TRAILER";
  auto [t, meta] = load_safetensors(ss);
  expect_array(t.at("w"), {2}, {1, 2}, 0.0);
  EXPECT_EQ(meta.at("k"), "v");
  std::string rest;
  ss >> rest;
  EXPECT_EQ(rest, "TRAILER");  // the stream stops right after the data

  loom::iotest::PipeBuf pipe(st_file("{" + entry("a", "[2,3]", 0, 24) + "}", kSafetensorsF32Arange6));
  std::istream in(&pipe);
  expect_array(load_safetensors(in).first.at("a"), {2, 3}, {0, 1, 2, 3, 4, 5}, 0.0);

  // A pipe whose data ends early, and one claiming a giant header.
  loom::iotest::PipeBuf short_pipe(st_file("{" + entry("a", "[2,3]", 0, 24) + "}", kSafetensorsF32Arange6.substr(0, 10)));
  std::istream in2(&short_pipe);
  EXPECT_THROW_MSG(load_safetensors(in2), std::runtime_error,
                   "[load_safetensors] '<stream>': truncated file: tensor 'a' needs 24 bytes but only 10");
  loom::iotest::PipeBuf big_pipe(le(uint64_t(1) << 62, 8) + "{}");
  std::istream in3(&big_pipe);
  EXPECT_THROW_MSG(load_safetensors(in3), std::runtime_error, "exceeds the limit of 100000000 bytes");
}

TEST_F(Safetensors, APipeClaimingAHugeHeaderCostsWhatItHolds) {
  // Just under the 100,000,000-byte limit, with 16 bytes behind it: the header is read in growing
  // chunks (1 MiB first), not into one buffer of the claimed size.
  loom::iotest::PipeBuf pipe(le(99999992, 8) + "{\"a\":12345678901");
  std::istream in(&pipe);
  EXPECT_THROW_MSG(load_safetensors(in), std::runtime_error,
                   "[load_safetensors] '<stream>': truncated file: the header needs 99999992 bytes but only 16 could "
                   "be read");
  const size_t largest = loom::iotest::largest_allocation([&] {
    loom::iotest::PipeBuf again(le(99999992, 8) + "{\"a\":12345678901");
    std::istream in2(&again);
    try {
      load_safetensors(in2);
    } catch (const std::runtime_error&) {
    }
  });
  EXPECT_LE(largest, size_t(2) << 20);
}

TEST_F(Safetensors, RejectsTruncatedAndOversizedHeaders) {
  const std::string good = st_file("{" + entry("a", "[2,3]", 0, 24) + "}", kSafetensorsF32Arange6);
  expect_bad("", "truncated file: 0 bytes is too short for a safetensors file");
  expect_bad(good.substr(0, 5), "truncated file: 5 bytes is too short");
  expect_bad(good.substr(0, 20), "truncated file: the header length 57 exceeds the 12 bytes left");
  expect_bad(le(uint64_t(1) << 62, 8) + "{}", "the header length 4611686018427387904 exceeds the 2 bytes left");
  expect_bad(le(~uint64_t(0), 8), "the header length 18446744073709551615 exceeds the 0 bytes left");
  expect_bad(good.substr(0, good.size() - 1), "tensor 'a': data_offsets [0, 24] are out of bounds of the 23-byte");
  expect_bad(good + "x", "the data buffer has 25 bytes but the tensors cover only 24");
  expect_bad(st_file("", ""), "the header is not a JSON object (it must start with '{')");
}

TEST_F(Safetensors, RejectsMalformedHeaders) {
  const std::string d8(8, '\0');
  struct Case {
    std::string header, data, needle;
  };
  const std::vector<Case> cases = {
      {"[1, 2]", "", "the header is not a JSON object"},
      {" {}", "", "it must start with '{'"},
      {"{\"a\": ", "", "the header is not valid JSON"},
      {"{" + entry("a", "[2]", 0, 8) + "} x", d8, "the header is not valid JSON"},
      {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8],\"bad\":\"\xff\"}}", d8, "not valid JSON"},
      {"{\"a\":[1]}", "", "tensor 'a': the header entry is not a JSON object"},
      {"{\"a\":{\"shape\":[2],\"data_offsets\":[0,8]}}", d8, "tensor 'a' has no \"dtype\""},
      {"{\"a\":{\"dtype\":\"F32\",\"data_offsets\":[0,8]}}", d8, "tensor 'a' has no \"shape\""},
      {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2]}}", d8, "tensor 'a' has no \"data_offsets\""},
      {"{\"a\":{\"dtype\":5,\"shape\":[2],\"data_offsets\":[0,8]}}", d8, "\"dtype\" is not a string"},
      {"{" + entry("a", "[4]", 0, 8, "F8_E4M3") + "}", d8, "tensor 'a' has unsupported dtype \"F8_E4M3\""},
      {"{" + entry("a", "[8]", 0, 8, "F8_E4M3") + "}", d8, "unsupported dtype \"F8_E4M3\""},
      {"{" + entry("a", "[8]", 0, 8, "f32") + "}", d8, "unsupported dtype \"f32\""},
      {"{" + entry("a", "4", 0, 8) + "}", d8, "\"shape\" is not an array"},
      {"{" + entry("a", "[-2]", 0, 8) + "}", d8, "\"shape\" has a negative dimension -2"},
      {"{" + entry("a", "[2.0]", 0, 8) + "}", d8, "\"shape\" entries must be non-negative integers, got 2.0"},
      {"{" + entry("a", "[\"2\"]", 0, 8) + "}", d8, "must be non-negative integers"},
      {"{" + entry("a", "[4294967298]", 0, 8) + "}", d8, "dimension 4294967298 in \"shape\" is larger"},
      {"{" + entry("a", "[2147483647,2147483647,2147483647,2147483647,2147483647]", 0, 8) + "}", d8,
       "needs more than 2^64 bytes"},
      {"{" + entry("a", "[99999999999999999999999]", 0, 8) + "}", d8, "must be non-negative integers"},
      {"{" + entry("a", "[0,2147483647,2147483647,2147483647]", 0, 0) + "," + entry("b", "[2]", 0, 8) + "}", d8,
       "tensor 'a': shape (0,2147483647,2147483647,2147483647) is too large for Loom"},
      {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0]}}", d8,
       "\"data_offsets\" must be two non-negative integers, got [0]"},
      {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[-1,7]}}", d8, "must be two non-negative integers"},
      {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,\"8\"]}}", d8, "must be two non-negative"},
      {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":{\"b\":0}}}", d8, "must be two non-negative"},
      {"{" + entry("a", "[2]", 8, 0) + "}", d8, "data_offsets [8, 0] end before they begin"},
      {"{" + entry("a", "[4]", 0, 16) + "}", d8, "data_offsets [0, 16] are out of bounds of the 8-byte data buffer"},
      {"{" + entry("a", "[2]", 9223372036854775808ull, 9223372036854775816ull) + "}", d8, "are out of bounds"},
      {"{" + entry("a", "[3]", 0, 8) + "}", d8, "shape (3) of F32 needs 12 bytes but data_offsets [0, 8] span 8"},
      {"{" + entry("a", "[1]", 0, 8, "F64") + "," + entry("b", "[2]", 4, 8, "C128") + "}", d8, "unsupported"},
      {"{" + entry("a", "[2]", 0, 8) + "," + entry("b", "[1]", 4, 8) + "}", d8,
       "tensor 'b' (data_offsets [4, 8]) overlaps tensor 'a' ([0, 8])"},
      {"{" + entry("a", "[1]", 0, 4) + "," + entry("b", "[1]", 4, 8) + "," + entry("c", "[1]", 4, 8) + "}",
       std::string(8, '\0'), "overlaps"},
      {"{" + entry("a", "[0]", 6, 6) + "," + entry("b", "[1]", 0, 8, "F64") + "}", d8, "overlaps tensor 'b'"},
      {"{" + entry("a", "[1]", 0, 4) + "," + entry("b", "[1]", 8, 12) + "}", std::string(12, '\0'),
       "bytes [4, 8) of the data buffer belong to no tensor (a gap before tensor 'b')"},
      {"{" + entry("a", "[1]", 4, 8) + "}", d8, "bytes [0, 4) of the data buffer belong to no tensor"},
      {"{" + entry("a", "[1]", 0, 4) + "}", d8, "the data buffer has 8 bytes but the tensors cover only 4"},
      {"{}", d8, "the data buffer has 8 bytes but the tensors cover only 0"},
      {"{\"__metadata__\":[\"x\"]}", "", "\"__metadata__\" must be an object mapping strings to strings"},
      {"{\"__metadata__\":{\"k\":1}}", "", "\"__metadata__\" value for key 'k' is not a string: 1"},
      {"{" + entry("a", "[1]", 0, 4) + "," + entry("a", "[1]", 4, 8) + "}", d8, "lists the name 'a' twice"},
      {"{\"__metadata__\":{\"loom.crc32.a\":\"1234567\"}," + entry("a", "[1]", 0, 4) + "}", std::string(4, '\0'),
       "\"__metadata__\" key 'loom.crc32.a' is not a CRC-32 (8 hex digits): \"1234567\""},
      {"{\"__metadata__\":{\"loom.crc32.a\":\"0x345678\"}," + entry("a", "[1]", 0, 4) + "}", std::string(4, '\0'),
       "is not a CRC-32 (8 hex digits)"},
      {"{\"__metadata__\":{\"loom.crc32.b\":\"00000000\"}," + entry("a", "[1]", 0, 4) + "}", std::string(4, '\0'),
       "\"__metadata__\" has a checksum for tensor 'b', which the file does not hold"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.header);
    expect_bad(st_file(c.header, c.data), c.needle);
  }
  // Deep nesting where a value is quoted in the error (it overflowed the stack of the JSON
  // serializer), and where it is not; 64 levels are taken, 65 are not.
  const std::string deep(100000, '['), undeep(100000, ']');
  expect_bad(st_file("{" + entry("a", "[" + deep + undeep + "]", 0, 0) + "}", ""),
             "the header nests JSON deeper than 64 levels (a safetensors header needs 3)");
  expect_bad(st_file("{\"__metadata__\":{\"k\":" + deep + undeep + "}}", ""), "nests JSON deeper than 64 levels");
  expect_bad(st_file("{\"x\":" + std::string(63, '[') + std::string(63, ']') + "}", ""),
             "tensor 'x': the header entry is not a JSON object");
  expect_bad(st_file("{\"x\":" + std::string(64, '[') + std::string(64, ']') + "}", ""), "deeper than 64 levels");
}

TEST_F(Safetensors, HostileSizesAllocateNothing) {
  const size_t before = get_active_memory();
  reset_peak_memory();
  // A claimed 2^62-byte header, a tensor of 8 EB, a tensor whose shape disagrees with its bytes.
  expect_bad(le(uint64_t(1) << 62, 8) + "{}", "exceeds");
  expect_bad(st_file("{" + entry("a", "[2147483647,2147483647,2]", 0, 8) + "}", std::string(8, '\0')), "needs");
  expect_bad(st_file("{" + entry("a", "[1000000000]", 0, 4000000000) + "}", std::string(8, '\0')), "out of bounds");
  EXPECT_LE(get_peak_memory(), before + 4096);
}

}  // namespace
