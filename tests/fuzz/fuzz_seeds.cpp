// Writes the seed corpora of the fuzz harnesses, with Loom's own writers (and IDX headers by hand,
// as tests/io does), so that a fresh checkout fuzzes from valid files and the repository stores no
// binaries:  fuzz_seeds DIR  writes DIR/{npy,safetensors,idx,text,checkpoint,gguf}/*.
#include <fstream>
#include <sstream>

#include "../io/dataset_test_helpers.h"
#include "fuzz_common.h"

using namespace loom;
using loom::datatest::gzip_stored;
using loom::datatest::idx_header;
namespace fs = std::filesystem;

namespace {

void put(const fs::path& file, const std::string& bytes) {
  std::ofstream f(file, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!f) throw std::runtime_error("cannot write " + file.string());
}

std::string npy_bytes(const array& a) {
  std::stringstream ss;
  save(ss, a);
  return ss.str();
}

// A .npy file with a hand-written header (Fortran order, big-endian, version 2.0: what save does
// not write), padded as numpy pads it.
std::string npy_by_hand(int major, const std::string& dict, const std::string& data) {
  const size_t prefix = 6 + 2 + (major == 1 ? 2 : 4);
  std::string header = dict;
  header.append(64 - (prefix + header.size() + 1) % 64, ' ');
  header += '\n';
  std::string out("\x93NUMPY", 6);
  out += static_cast<char>(major);
  out += '\0';
  for (int b = 0; b < (major == 1 ? 2 : 4); ++b) out += static_cast<char>((header.size() >> (8 * b)) & 0xff);
  return out + header + data;
}

void npy(const fs::path& dir) {
  put(dir / "f32_2x3.npy", npy_bytes(reshape(arange(6.0, float32), {2, 3})));
  put(dir / "bool.npy", npy_bytes(array({true, false, true})));
  put(dir / "u8_scalar.npy", npy_bytes(array(7, uint8)));
  put(dir / "i32.npy", npy_bytes(array({-1, 2, 3}, {3}, int32)));
  put(dir / "i64_empty.npy", npy_bytes(zeros({0, 3}, int64)));
  put(dir / "f16.npy", npy_bytes(array({1.0, -2.0}, {2}, float16)));
  put(dir / "f64_3d.npy", npy_bytes(reshape(arange(8.0, float64), {2, 2, 2})));
  const std::string f32_6(reinterpret_cast<const char*>(std::vector<float>{0, 1, 2, 3, 4, 5}.data()), 24);
  put(dir / "fortran.npy", npy_by_hand(1, "{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3), }", f32_6));
  put(dir / "big_endian.npy",
      npy_by_hand(1, "{'descr': '>i4', 'fortran_order': False, 'shape': (2,), }", std::string("\0\0\0\1\0\0\0\2", 8)));
  put(dir / "v2.npy", npy_by_hand(2, "{'descr': '|u1', 'fortran_order': False, 'shape': (4,), }", "abcd"));
}

void safetensors(const fs::path& dir) {
  auto st = [](const std::unordered_map<std::string, array>& t, const std::unordered_map<std::string, std::string>& m) {
    std::stringstream ss;
    save_safetensors(ss, t, m);
    return ss.str();
  };
  put(dir / "mixed.safetensors",
      st({{"w", reshape(arange(6.0, float32), {2, 3})}, {"b", array({1, 2}, {2}, int64)}, {"flag", array({true})}},
         {{"format", "pt"}}));
  put(dir / "dtypes.safetensors", st({{"u8", array({1, 2, 3}, {3}, uint8)},
                                      {"i32", array(5)},
                                      {"f16", array({0.5}, {1}, float16)},
                                      {"bf16", array({1.0f, -2.0f}, {2}, bfloat16)},
                                      {"f64", array({0.25}, {1, 1}, float64)},
                                      {"empty", zeros({0, 4}, float32)}},
                                     {}));
  put(dir / "empty.safetensors", st({}, {}));
  put(dir / "metadata_only.safetensors", st({}, {{"a", "b"}, {"c", ""}}));
}

void idx(const fs::path& dir) {
  put(dir / "u8_3x2x2.idx", idx_header(0x08, {3, 2, 2}) + std::string("\1\2\3\4\5\6\7\10\11\12\13\14", 12));
  put(dir / "labels.idx", idx_header(0x08, {4}) + std::string("\0\1\2\11", 4));
  put(dir / "i8.idx", idx_header(0x09, {2, 1}) + std::string("\x80\x7f", 2));
  put(dir / "i16.idx", idx_header(0x0B, {2}) + std::string("\x80\x00\x01\x02", 4));
  put(dir / "i32.idx", idx_header(0x0C, {1, 2}) + std::string("\xff\xff\xff\xfe\0\0\1\0", 8));
  put(dir / "f32.idx", idx_header(0x0D, {2}) + std::string("\x3f\x80\0\0\xc0\0\0\0", 8));
  put(dir / "f64.idx", idx_header(0x0E, {1}) + std::string("\x3f\xf0\0\0\0\0\0\0", 8));
  put(dir / "empty.idx", idx_header(0x08, {0, 28, 28}));
  put(dir / "u8_2x3.idx.gz", gzip_stored(idx_header(0x08, {2, 3}) + "abcdef"));
}

void text(const fs::path& dir) {
  // Byte 0: context - 1; byte 1: stride (0: the context); byte 2: where the text is cut in two.
  put(dir / "fortune.txt", std::string("\x07\x00\x05", 3) + "A fool and his money are soon parted.\n%\n");
  put(dir / "stride.txt", std::string("\x02\x03\x00", 3) + "abcdefghijklmnop");
  put(dir / "binary.txt", std::string("\x00\x01\xff\x00\xff\x80\x7f\n", 8));
}

void checkpoint(const fs::path& dir) {
  random::seed(3);
  fuzz::Model model;
  optim::AdamW opt(1e-3);
  // Step 0: no optimizer slots yet.
  optim::save_checkpoint((dir / "step0.safetensors").string(), model, opt);
  auto loss_and_grad = nn::value_and_grad(model, [&](const array& x, const array& y) {
    return nn::losses::cross_entropy(model(x), y, "mean");
  });
  auto [loss, grads] = loss_and_grad(array({0.5f, -1.0f, 2.0f}, {1, 3}), array({1}, {1}, int32));
  opt.update(model, grads);
  eval(loss, model.parameters());
  optim::save_checkpoint((dir / "step1.safetensors").string(), model, opt, {{"epoch", "1"}});
}

void gguf(const fs::path& dir) {
  save_gguf((dir / "mixed.gguf").string(),
            {{"w", reshape(arange(6.0, float32), {2, 3})}, {"h", array({0.5, -1.0}, {2}, float16)},
             {"b", array({1.0f, 2.0f}, {2}, bfloat16)}, {"i", array({-1, 2}, {2}, int8)}},
            {{"name", std::string("x")}, {"v", array({1, 2}, {2}, int32)}, {"f", array(0.5)},
             {"tags", std::vector<std::string>{"a", "bc"}}, {"ok", array(true)}});
  // A Q8_0 tensor of 32 values and a Q4_0 and a Q4_1 one (GGUF dims 32, 1), by hand: header, one
  // key, three tensor infos, padding to 32, then the blocks (f16 scale 1.0 = 0x3c00, codes).
  auto le = [](uint64_t v, int n) {
    std::string s;
    for (int i = 0; i < n; ++i) s += static_cast<char>((v >> (8 * i)) & 0xff);
    return s;
  };
  auto info = [&](const std::string& name, uint32_t type, uint64_t offset) {
    return le(name.size(), 8) + name + le(2, 4) + le(32, 8) + le(1, 8) + le(type, 4) + le(offset, 8);
  };
  std::string q = std::string("GGUF") + le(3, 4) + le(3, 8) + le(1, 8) + le(17, 8) + "general.alignment" + le(4, 4) +
                  le(32, 4) + info("a.weight", 8, 0) + info("b.weight", 2, 64) + info("c", 3, 96);
  q.append((32 - q.size() % 32) % 32, '\0');
  std::string q8("\x00\x3c", 2), q40("\x00\x3c", 2), q41("\x00\x3c\x00\xbc", 4);
  for (int i = 0; i < 32; ++i) q8 += static_cast<char>(i * 7 - 100);
  for (int i = 0; i < 16; ++i) q40 += static_cast<char>(i * 17);
  for (int i = 0; i < 16; ++i) q41 += static_cast<char>(255 - i * 16);
  q += q8;
  q.append(64 - 34, '\0');
  q += q40;
  q.append(96 - 64 - 18, '\0');
  q += q41;
  put(dir / "quantized.gguf", q);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s DIR\n", argv[0]);
    return 2;
  }
  const fs::path root = argv[1];
  const std::pair<const char*, void (*)(const fs::path&)> kinds[] = {
      {"npy", npy}, {"safetensors", safetensors}, {"idx", idx}, {"text", text}, {"checkpoint", checkpoint},
      {"gguf", gguf}};
  for (const auto& [name, write] : kinds) {
    fs::remove_all(root / name);
    fs::create_directories(root / name);
    write(root / name);
  }
  std::printf("fuzz seeds written to %s\n", root.c_str());
  return 0;
}
