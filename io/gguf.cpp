// The GGUF format (https://github.com/ggml-org/ggml/blob/master/docs/gguf.md), all little-endian:
//
//   "GGUF", uint32 version (2 or 3), uint64 tensor count, uint64 metadata count,
//   metadata: string key, uint32 value type, value (a string is a uint64 length and its bytes; an
//             array is a uint32 element type, a uint64 count and the elements),
//   tensor infos: string name, uint32 n_dims, uint64 dims[n_dims] (fastest-varying first), uint32
//             GGML type, uint64 offset (relative to the data section),
//   padding to the alignment ("general.alignment", default 32), then the data section.
//
// The reader walks a memory map with a cursor that checks every read against the bytes left, so a
// count or length in the file is never trusted before the bytes it claims are known to be there.
#include "loom/io/gguf.h"

#include <algorithm>
#include <climits>
#include <cstring>

#include "loom/core/copy.h"
#include "loom/core/eval.h"
#include "loom/io/detail.h"

namespace loom {

namespace {

// GGUF metadata value types.
enum ValueType : uint32_t {
  kU8 = 0, kI8 = 1, kU16 = 2, kI16 = 3, kU32 = 4, kI32 = 5, kF32 = 6, kBool = 7,
  kString = 8, kArray = 9, kU64 = 10, kI64 = 11, kF64 = 12,
};

// GGML tensor types Loom reads (the numbers are the format's).
enum TensorType : uint32_t {
  kTF32 = 0, kTF16 = 1, kTQ4_0 = 2, kTQ4_1 = 3, kTQ8_0 = 8,
  kTI8 = 24, kTI16 = 25, kTI32 = 26, kTI64 = 27, kTF64 = 28, kTBF16 = 30,
};

constexpr uint32_t kDefaultAlignment = 32;
constexpr uint32_t kMaxDims = 8;  // gguf-tools' bound (GGML itself uses at most 4)
constexpr const char* kAlignmentKey = "general.alignment";
constexpr uint32_t kMaxSaveAlignment = 1u << 20;  // the padding save_gguf is willing to write

const char* ggml_type_name(uint32_t t) {
  static const char* names[] = {"F32",    "F16",     "Q4_0",    "Q4_1",  "Q4_2",   "Q4_3",   "Q5_0",   "Q5_1",
                                "Q8_0",   "Q8_1",    "Q2_K",    "Q3_K",  "Q4_K",   "Q5_K",   "Q6_K",   "Q8_K",
                                "IQ2_XXS", "IQ2_XS", "IQ3_XXS", "IQ1_S", "IQ4_NL", "IQ3_S",  "IQ2_S",  "IQ4_XS",
                                "I8",     "I16",     "I32",     "I64",   "F64",    "IQ1_M",  "BF16"};
  return t < sizeof(names) / sizeof(names[0]) ? names[t] : "unknown";
}

bool tensor_dtype(uint32_t t, Dtype* out) {
  switch (t) {
    case kTF32: *out = float32; return true;
    case kTF16: *out = float16; return true;
    case kTBF16: *out = bfloat16; return true;
    case kTF64: *out = float64; return true;
    case kTI8: *out = int8; return true;
    case kTI16: *out = int16; return true;
    case kTI32: *out = int32; return true;
    case kTI64: *out = int64; return true;
    default: return false;
  }
}

bool dtype_tensor_type(Dtype d, uint32_t* out) {
  switch (d.val) {
    case Dtype::Val::float32: *out = kTF32; return true;
    case Dtype::Val::float16: *out = kTF16; return true;
    case Dtype::Val::bfloat16: *out = kTBF16; return true;
    case Dtype::Val::float64: *out = kTF64; return true;
    case Dtype::Val::int8: *out = kTI8; return true;
    case Dtype::Val::int16: *out = kTI16; return true;
    case Dtype::Val::int32: *out = kTI32; return true;
    case Dtype::Val::int64: *out = kTI64; return true;
    default: return false;
  }
}

// The dtype of a fixed-size metadata value type.
bool value_dtype(uint32_t t, Dtype* out) {
  switch (t) {
    case kU8: *out = uint8; return true;
    case kI8: *out = int8; return true;
    case kU16: *out = uint16; return true;
    case kI16: *out = int16; return true;
    case kU32: *out = uint32; return true;
    case kI32: *out = int32; return true;
    case kF32: *out = float32; return true;
    case kBool: *out = bool_; return true;
    case kU64: *out = uint64; return true;
    case kI64: *out = int64; return true;
    case kF64: *out = float64; return true;
    default: return false;
  }
}

bool dtype_value_type(Dtype d, uint32_t* out) {
  switch (d.val) {
    case Dtype::Val::uint8: *out = kU8; return true;
    case Dtype::Val::int8: *out = kI8; return true;
    case Dtype::Val::uint16: *out = kU16; return true;
    case Dtype::Val::int16: *out = kI16; return true;
    case Dtype::Val::uint32: *out = kU32; return true;
    case Dtype::Val::int32: *out = kI32; return true;
    case Dtype::Val::float32: *out = kF32; return true;
    case Dtype::Val::bool_: *out = kBool; return true;
    case Dtype::Val::uint64: *out = kU64; return true;
    case Dtype::Val::int64: *out = kI64; return true;
    case Dtype::Val::float64: *out = kF64; return true;
    default: return false;
  }
}

uint64_t padding(uint64_t offset, uint64_t alignment) { return (alignment - offset % alignment) % alignment; }

// Keeps error messages short whatever a hostile file holds.
std::string clip(const std::string& s, size_t max = 120) { return s.size() > max ? s.substr(0, max) + "..." : s; }

// ---------------------------------------------------------------------------------------------
// Reading

class Cursor {
 public:
  Cursor(const uint8_t* data, uint64_t size, std::string label) : data_(data), size_(size), label_(std::move(label)) {}

  [[noreturn]] void fail(const std::string& problem) const {
    throw std::runtime_error("[load_gguf] '" + label_ + "': " + problem);
  }
  uint64_t pos() const { return pos_; }
  uint64_t size() const { return size_; }
  uint64_t left() const { return size_ - pos_; }
  const uint8_t* at(uint64_t p) const { return data_ + p; }

  // Checks that n bytes remain for `what`.
  void need(uint64_t n, const std::string& what) const {
    if (n > left()) {
      fail("truncated file: " + what + " needs " + std::to_string(n) + " bytes at offset " + std::to_string(pos_) +
           " but only " + std::to_string(left()) + " remain");
    }
  }
  uint64_t uint(int bytes, const std::string& what) {
    need(bytes, what);
    uint64_t v = 0;
    for (int b = bytes - 1; b >= 0; --b) v = (v << 8) | data_[pos_ + b];
    pos_ += bytes;
    return v;
  }
  uint32_t u32(const std::string& what) { return static_cast<uint32_t>(uint(4, what)); }
  uint64_t u64(const std::string& what) { return uint(8, what); }
  std::string str(const std::string& what) {
    const uint64_t n = u64("the length of " + what);
    need(n, what + " (" + std::to_string(n) + " bytes)");
    std::string s(reinterpret_cast<const char*>(data_ + pos_), static_cast<size_t>(n));
    pos_ += n;
    return s;
  }
  // n elements of `size` bytes each, or fail.
  const uint8_t* take(uint64_t n, uint64_t size, const std::string& what) {
    uint64_t bytes;
    if (!io::detail::checked_mul(n, size, &bytes) || bytes > left()) {
      fail("truncated file: " + what + " claims " + std::to_string(n) + " elements of " + std::to_string(size) +
           " bytes at offset " + std::to_string(pos_) + " but only " + std::to_string(left()) + " bytes remain");
    }
    const uint8_t* p = data_ + pos_;
    pos_ += bytes;
    return p;
  }

 private:
  const uint8_t* data_;
  uint64_t size_;
  uint64_t pos_ = 0;
  std::string label_;
};

// A row-major array of `shape` and `dtype` from n little-endian bytes.
array array_from_bytes(const uint8_t* src, uint64_t nbytes, const Shape& shape, Dtype dtype) {
  io::detail::BufferGuard buf(allocator::malloc(static_cast<size_t>(nbytes)));
  if (nbytes) std::memcpy(buf.get().ptr, src, static_cast<size_t>(nbytes));
  array a(buf.release(), shape, dtype);
  if (!io::detail::host_is_little_endian()) io::detail::byteswap_inplace(a.raw_data(), a.size(), a.itemsize());
  if (dtype == bool_) io::detail::normalize_bools(a.raw_data(), a.size());
  return a;
}

GGUFMetaData read_value(Cursor& c, uint32_t type, const std::string& who) {
  Dtype dt;
  if (value_dtype(type, &dt)) return array_from_bytes(c.take(1, dt.size, who), dt.size, {}, dt);
  if (type == kString) return c.str(who);
  if (type != kArray) c.fail(who + " has unknown value type " + std::to_string(type));
  const uint32_t etype = c.u32("the element type of " + who);
  const uint64_t n = c.u64("the length of " + who);
  if (value_dtype(etype, &dt)) {
    const uint8_t* p = c.take(n, dt.size, who);
    if (n > static_cast<uint64_t>(INT_MAX)) c.fail(who + ": " + std::to_string(n) + " elements are too many");
    return array_from_bytes(p, n * dt.size, {static_cast<int>(n)}, dt);
  }
  if (etype == kString) {
    // Every string needs at least its 8-byte length: bound the count before growing the list.
    if (n > c.left() / 8) c.fail("truncated file: " + who + " claims " + std::to_string(n) + " strings");
    std::vector<std::string> v;
    for (uint64_t i = 0; i < n; ++i) v.push_back(c.str("string " + std::to_string(i) + " of " + who));
    return v;
  }
  if (etype == kArray) c.fail(who + " is an array of arrays, which Loom (as MLX) does not load");
  c.fail(who + " is an array of unknown value type " + std::to_string(etype));
}

struct TensorInfo {
  std::string name;
  std::vector<uint64_t> dims;  // as stored: fastest-varying first
  uint32_t type = 0;
  uint64_t offset = 0;
};

// "name.weight" -> "name"; other names are kept whole.
std::string quant_prefix(const std::string& name) {
  const std::string suffix = ".weight";
  if (name.size() >= suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0) {
    return name.substr(0, name.size() - suffix.size());
  }
  return name;
}

uint16_t le16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | p[1] << 8); }

float16_t half_from_bits(uint16_t bits) {
  float16_t h;
  h.bits = bits;
  return h;
}

// Q4_0 (|f16 d|16 bytes|, w = d (q - 8)), Q4_1 (|f16 d|f16 m|16 bytes|, w = d q + m) and Q8_0
// (|f16 d|32 int8|, w = d q) blocks of 32 as MLX's affine triple: w = scale * u + bias with u the
// unsigned code (q for 4 bits, q + 128 for 8), packed little-end first into uint32 words.
void load_quantized(std::unordered_map<std::string, array>& out, const TensorInfo& t, const uint8_t* data,
                    const Shape& shape, uint64_t blocks, const Cursor& c) {
  const bool q8 = t.type == kTQ8_0;
  const int per_word = q8 ? 4 : 8;
  Shape wshape = shape, sshape = shape;
  wshape.back() /= per_word;
  sshape.back() /= 32;
  const uint64_t words_per_block = 32 / per_word;
  io::detail::BufferGuard wb(allocator::malloc(static_cast<size_t>(blocks * words_per_block * 4)));
  io::detail::BufferGuard sb(allocator::malloc(static_cast<size_t>(blocks * 2)));
  io::detail::BufferGuard bb(allocator::malloc(static_cast<size_t>(blocks * 2)));
  auto* w = static_cast<uint32_t*>(wb.get().ptr);
  auto* scales = static_cast<float16_t*>(sb.get().ptr);
  auto* biases = static_cast<float16_t*>(bb.get().ptr);
  const uint64_t block_bytes = t.type == kTQ4_0 ? 18 : t.type == kTQ4_1 ? 20 : 34;
  for (uint64_t b = 0; b < blocks; ++b) {
    const uint8_t* p = data + b * block_bytes;
    const float16_t d = half_from_bits(le16(p));
    scales[b] = d;
    uint32_t* wp = w + b * words_per_block;
    if (q8) {
      biases[b] = float16_t(-128.0f * static_cast<float>(d));
      const uint8_t* q = p + 2;
      for (int k = 0; k < 8; ++k) {
        uint32_t v = 0;
        for (int e = 0; e < 4; ++e) v |= uint32_t(q[4 * k + e] ^ 0x80u) << (8 * e);
        wp[k] = v;
      }
    } else {
      biases[b] = t.type == kTQ4_0 ? float16_t(-8.0f * static_cast<float>(d)) : half_from_bits(le16(p + 2));
      const uint8_t* q = p + (t.type == kTQ4_0 ? 2 : 4);
      // Weight j < 16 is the low nibble of byte j, weight 16 + j its high nibble.
      auto nib = [&](int j) { return uint32_t(j < 16 ? q[j] & 15 : q[j - 16] >> 4); };
      for (int k = 0; k < 4; ++k) {
        uint32_t v = 0;
        for (int e = 0; e < 8; ++e) v |= nib(8 * k + e) << (4 * e);
        wp[k] = v;
      }
    }
  }
  const std::string prefix = quant_prefix(t.name);
  auto put = [&](const std::string& name, array a) {
    if (!out.emplace(name, std::move(a)).second) {
      c.fail("quantized tensor '" + clip(t.name) + "' gives the name '" + clip(name) +
             "', which another tensor already has");
    }
  };
  put(t.name, array(wb.release(), wshape, uint32));
  put(prefix + ".scales", array(sb.release(), sshape, float16));
  put(prefix + ".biases", array(bb.release(), std::move(sshape), float16));
}

GGUFLoad read_gguf(const uint8_t* data, uint64_t size, const std::string& label) {
  Cursor c(data, size, label);
  if (size < 4 || std::memcmp(data, "GGUF", 4) != 0) {
    c.fail(size < 4 ? "truncated file: " + std::to_string(size) + " bytes is too short for a GGUF file"
                    : std::string("not a GGUF file (it does not start with the magic \"GGUF\")"));
  }
  c.take(4, 1, "the magic");
  const uint32_t version = c.u32("the version");
  if (version != 2 && version != 3) {
    c.fail("unsupported GGUF version " + std::to_string(version) +
           (version == 0x03000000u || version == 0x02000000u ? " (a big-endian file?)" : "") +
           ": Loom reads little-endian versions 2 and 3");
  }
  const uint64_t n_tensors = c.u64("the tensor count");
  const uint64_t n_kv = c.u64("the metadata count");
  // Each entry needs at least 8 + 4 (+ 1) bytes: bound the counts by the file before looping.
  if (n_kv > c.left() / 12) {
    c.fail("the metadata count " + std::to_string(n_kv) + " is more than " + std::to_string(c.left()) +
           " remaining bytes can hold");
  }
  if (n_tensors > c.left() / 24) {
    c.fail("the tensor count " + std::to_string(n_tensors) + " is more than " + std::to_string(c.left()) +
           " remaining bytes can hold");
  }

  GGUFLoad out;
  uint64_t alignment = kDefaultAlignment;
  for (uint64_t i = 0; i < n_kv; ++i) {
    const std::string key = c.str("metadata key " + std::to_string(i));
    const std::string who = "metadata '" + clip(key) + "'";
    const uint32_t type = c.u32("the value type of " + who);
    GGUFMetaData v = read_value(c, type, who);
    if (key == kAlignmentKey) {
      const array* a = std::get_if<array>(&v);
      if (type != kU32 || !a) c.fail("\"general.alignment\" must be a uint32");
      alignment = a->item<uint32_t>();
      if (alignment == 0) c.fail("\"general.alignment\" is 0");
    }
    if (!out.second.emplace(key, std::move(v)).second) c.fail("the metadata key '" + clip(key) + "' appears twice");
  }

  std::vector<TensorInfo> infos;
  for (uint64_t i = 0; i < n_tensors; ++i) {
    TensorInfo t;
    t.name = c.str("the name of tensor " + std::to_string(i));
    const std::string who = "tensor '" + clip(t.name) + "'";
    const uint32_t nd = c.u32("the dimension count of " + who);
    if (nd > kMaxDims) c.fail(who + " has " + std::to_string(nd) + " dimensions (at most 8)");
    for (uint32_t d = 0; d < nd; ++d) t.dims.push_back(c.u64("a dimension of " + who));
    t.type = c.u32("the type of " + who);
    t.offset = c.u64("the data offset of " + who);
    infos.push_back(std::move(t));
  }
  // A file without tensors may end right after its metadata, unpadded.
  const uint64_t data_start = c.pos() + padding(c.pos(), alignment);
  if (!infos.empty() && data_start > size) {
    c.fail("truncated file: the data section would start at offset " + std::to_string(data_start) + " past its end");
  }
  const uint64_t data_size = data_start > size ? 0 : size - data_start;

  for (const TensorInfo& t : infos) {
    const std::string who = "tensor '" + clip(t.name) + "'";
    Shape shape;
    uint64_t count = 1;
    bool overflow = false;
    for (auto it = t.dims.rbegin(); it != t.dims.rend(); ++it) {
      if (*it > static_cast<uint64_t>(INT_MAX)) {
        c.fail(who + " has dimension " + std::to_string(*it) + ", larger than Loom's limit of " +
               std::to_string(INT_MAX));
      }
      shape.push_back(static_cast<int>(*it));
      overflow |= !io::detail::checked_mul(count, *it, &count);
    }
    if (overflow || !io::detail::strides_fit(shape)) {
      c.fail(who + ": shape " + detail::shape_str(shape) + " is too large");
    }
    Dtype dt;
    const bool plain = tensor_dtype(t.type, &dt);
    const bool quant = t.type == kTQ4_0 || t.type == kTQ4_1 || t.type == kTQ8_0;
    if (!plain && !quant) {
      c.fail(who + " has GGML type " + ggml_type_name(t.type) + " (" + std::to_string(t.type) +
             "), which Loom does not load (it reads F32, F16, BF16, F64, I8, I16, I32, I64, Q4_0, Q4_1 and Q8_0)");
    }
    uint64_t nbytes = 0, blocks = 0;
    if (plain) {
      overflow = !io::detail::checked_mul(count, dt.size, &nbytes);
    } else {
      if (shape.empty() || shape.back() % 32 != 0) {
        c.fail(who + " of type " + ggml_type_name(t.type) + " has shape " + detail::shape_str(shape) +
               ": its last axis must be a multiple of the block size 32");
      }
      blocks = count / 32;
      overflow = !io::detail::checked_mul(blocks, t.type == kTQ4_0 ? 18 : t.type == kTQ4_1 ? 20 : 34, &nbytes);
    }
    if (overflow || t.offset > data_size || nbytes > data_size - t.offset) {
      c.fail(who + ": its " + (overflow ? std::string("more than 2^64") : std::to_string(nbytes)) +
             " bytes at data offset " + std::to_string(t.offset) + " lie outside the " + std::to_string(data_size) +
             "-byte data section");
    }
    const uint8_t* p = c.at(data_start + t.offset);
    if (plain) {
      if (!out.first.emplace(t.name, array_from_bytes(p, nbytes, shape, dt)).second) {
        c.fail("the tensor name '" + clip(t.name) + "' appears twice");
      }
    } else {
      load_quantized(out.first, t, p, shape, blocks, c);
    }
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// Writing

class Bytes {
 public:
  void u32(uint32_t v) { uint(v, 4); }
  void u64(uint64_t v) { uint(v, 8); }
  void str(const std::string& s) {
    u64(s.size());
    b_ += s;
  }
  void raw(const void* p, size_t n) { b_.append(static_cast<const char*>(p), n); }
  std::string& bytes() { return b_; }

 private:
  void uint(uint64_t v, int n) {
    for (int i = 0; i < n; ++i) b_ += static_cast<char>((v >> (8 * i)) & 0xff);
  }
  std::string b_;
};

// The little-endian bytes of evaluated row-contiguous `a`.
std::string le_bytes(const array& a) {
  std::string s(static_cast<const char*>(a.raw_data()), a.nbytes());
  if (!io::detail::host_is_little_endian()) io::detail::byteswap_inplace(&s[0], a.size(), a.itemsize());
  return s;
}

void write_value(Bytes& out, const std::string& key, const GGUFMetaData& value) {
  const std::string who = "[save_gguf] metadata '" + key + "'";
  if (auto s = std::get_if<std::string>(&value)) {
    out.u32(kString);
    out.str(*s);
  } else if (auto v = std::get_if<std::vector<std::string>>(&value)) {
    out.u32(kArray);
    out.u32(kString);
    out.u64(v->size());
    for (const auto& s : *v) out.str(s);
  } else if (auto a = std::get_if<array>(&value)) {
    uint32_t t;
    if (!dtype_value_type(a->dtype(), &t)) {
      throw std::invalid_argument(who + ": dtype " + to_string(a->dtype()) + " has no GGUF metadata type");
    }
    if (a->ndim() > 1) {
      throw std::invalid_argument(who + ": shape " + detail::shape_str(a->shape()) +
                                  ": only scalars (0-d) and 1-d arrays can be saved");
    }
    if (a->size() == 0) throw std::invalid_argument(who + ": empty arrays cannot be saved (as MLX)");
    const array r = kernels::evaluated_row_contiguous(*a);
    if (a->ndim() == 1) {
      out.u32(kArray);
      out.u32(t);
      out.u64(r.size());
    } else {
      out.u32(t);
    }
    const std::string b = le_bytes(r);
    out.raw(b.data(), b.size());
  } else {
    throw std::invalid_argument(who + " holds no value (std::monostate)");
  }
}

}  // namespace

GGUFLoad load_gguf(const std::string& file) {
  io::detail::MappedFile map(file, "load_gguf", file);
  return read_gguf(map.data(), map.size(), file);
}

void save_gguf(std::string file, const std::unordered_map<std::string, array>& array_map,
               const std::unordered_map<std::string, GGUFMetaData>& metadata) {
  if (file.size() < 5 || file.compare(file.size() - 5, 5, ".gguf") != 0) file += ".gguf";

  uint64_t alignment = kDefaultAlignment;
  if (auto it = metadata.find(kAlignmentKey); it != metadata.end()) {
    const array* a = std::get_if<array>(&it->second);
    if (!a || a->dtype() != uint32 || a->ndim() != 0 || a->item<uint32_t>() == 0 ||
        a->item<uint32_t>() > kMaxSaveAlignment) {
      throw std::invalid_argument("[save_gguf] metadata \"general.alignment\" must be a 0-d uint32 array from 1 to " +
                                  std::to_string(kMaxSaveAlignment));
    }
    alignment = a->item<uint32_t>();
  }
  std::vector<std::string> keys, names;
  for (const auto& kv : metadata) keys.push_back(kv.first);
  for (const auto& kv : array_map) names.push_back(kv.first);
  std::sort(keys.begin(), keys.end());
  std::sort(names.begin(), names.end());

  std::vector<array> tensors;
  for (const auto& n : names) {
    const array& a = array_map.at(n);
    uint32_t t;
    if (!dtype_tensor_type(a.dtype(), &t)) {
      throw std::invalid_argument("[save_gguf] tensor '" + n + "': dtype " + to_string(a.dtype()) +
                                  " is not supported (float32, float16, bfloat16, float64, int8, int16, int32, int64)");
    }
    if (a.ndim() > kMaxDims) {
      throw std::invalid_argument("[save_gguf] tensor '" + n + "' has " + std::to_string(a.ndim()) +
                                  " dimensions, more than GGUF's 8");
    }
    tensors.push_back(a);
  }
  eval(tensors);
  for (auto& a : tensors) a = kernels::evaluated_row_contiguous(a);

  Bytes h;
  h.raw("GGUF", 4);
  h.u32(3);
  h.u64(names.size());
  h.u64(keys.size());
  for (const auto& k : keys) {
    h.str(k);
    write_value(h, k, metadata.at(k));
  }
  uint64_t offset = 0;
  std::vector<uint64_t> offsets;
  for (size_t i = 0; i < names.size(); ++i) {
    const array& a = tensors[i];
    uint32_t t = 0;
    dtype_tensor_type(a.dtype(), &t);
    h.str(names[i]);
    h.u32(static_cast<uint32_t>(a.ndim()));
    for (size_t d = a.ndim(); d-- > 0;) h.u64(static_cast<uint64_t>(a.shape()[d]));
    h.u32(t);
    offset += padding(offset, alignment);
    offsets.push_back(offset);
    h.u64(offset);
    offset += a.nbytes();
  }
  h.bytes().append(padding(h.bytes().size(), alignment), '\0');

  io::detail::AtomicFileSink sink(file, "save_gguf");
  sink.write(h.bytes().data(), h.bytes().size());
  uint64_t pos = 0;
  const std::string zeros(alignment, '\0');
  for (size_t i = 0; i < tensors.size(); ++i) {
    sink.write(zeros.data(), static_cast<size_t>(offsets[i] - pos));
    io::detail::write_little_endian(sink, tensors[i]);
    pos = offsets[i] + tensors[i].nbytes();
  }
  sink.commit();
}

}  // namespace loom
