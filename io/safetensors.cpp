// The safetensors format: https://github.com/huggingface/safetensors
//
// 8 bytes: N, an unsigned little-endian 64-bit integer, the size of the header.
// N bytes: a UTF-8 JSON object {"name": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]},
//          ..., "__metadata__": {"key": "value"}} (optional metadata, strings only), which the
//          reference writer pads with spaces to a multiple of 8 bytes.
// The rest: the data buffer. Offsets are relative to its start; the tensors must tile it exactly
//          (no overlap, no gap, nothing after the last one). Data is little-endian, row-major.
//
// Loom adds one metadata entry per tensor, "loom.crc32.<name>": the CRC-32 (zlib's) of the
// tensor's data bytes as 8 lowercase hex digits. Metadata is a plain string map to every other
// reader, so they still open the file; Loom's reader checks each checksum present, so that a
// damaged file is refused instead of loading wrong numbers.
#include <algorithm>
#include <climits>
#include <nlohmann/json.hpp>
#include <set>
#include <vector>

#include "loom/core/copy.h"
#include "loom/core/eval.h"
#include "loom/io/detail.h"
#include "loom/io/io.h"

namespace loom {

using io::detail::Reader;
using json = nlohmann::json;

namespace {

// The reference implementation's limit on the header size.
constexpr uint64_t kMaxHeaderLen = 100000000;
// A header nests 3 levels (the object, a tensor's entry, its shape); more than this is no header,
// and deeper values would overflow the stack of the recursive serializer that quotes them in
// errors (a 100,000-deep shape did).
constexpr int kMaxDepth = 64;
constexpr const char* kMetadataKey = "__metadata__";
constexpr const char* kChecksumPrefix = "loom.crc32.";

bool starts_with(const std::string& s, const std::string& prefix) { return s.compare(0, prefix.size(), prefix) == 0; }

std::string hex32(uint32_t v) {
  static const char* d = "0123456789abcdef";
  std::string s(8, '0');
  for (int i = 7; i >= 0; --i, v >>= 4) s[i] = d[v & 15];
  return s;
}

// Exactly 8 hex digits (either case), as hex32 writes them.
bool parse_hex32(const std::string& s, uint32_t* out) {
  if (s.size() != 8) return false;
  uint32_t v = 0;
  for (char c : s) {
    int x;
    if (c >= '0' && c <= '9') {
      x = c - '0';
    } else if (c >= 'a' && c <= 'f') {
      x = c - 'a' + 10;
    } else if (c >= 'A' && c <= 'F') {
      x = c - 'A' + 10;
    } else {
      return false;
    }
    v = v << 4 | static_cast<uint32_t>(x);
  }
  *out = v;
  return true;
}

const char* st_dtype_name(Dtype t) {
  switch (t.val) {
    case Dtype::Val::bool_:
      return "BOOL";
    case Dtype::Val::uint8:
      return "U8";
    case Dtype::Val::uint16:
      return "U16";
    case Dtype::Val::uint32:
      return "U32";
    case Dtype::Val::uint64:
      return "U64";
    case Dtype::Val::int8:
      return "I8";
    case Dtype::Val::int16:
      return "I16";
    case Dtype::Val::int32:
      return "I32";
    case Dtype::Val::int64:
      return "I64";
    case Dtype::Val::float16:
      return "F16";
    case Dtype::Val::bfloat16:
      return "BF16";
    case Dtype::Val::float32:
      return "F32";
    case Dtype::Val::float64:
      return "F64";
    case Dtype::Val::complex64:
      return "C64";
  }
  return "?";
}

bool st_parse_dtype(const std::string& s, Dtype* out) {
  static const std::pair<const char*, Dtype> table[] = {{"BOOL", bool_},  {"U8", uint8},    {"U16", uint16}, {"U32", uint32},
                                                        {"U64", uint64},  {"I8", int8},     {"I16", int16},  {"I32", int32},
                                                        {"I64", int64},   {"F16", float16}, {"BF16", bfloat16},
                                                        {"F32", float32}, {"F64", float64}, {"C64", complex64}};
  for (const auto& [name, t] : table) {
    if (s == name) {
      *out = t;
      return true;
    }
  }
  return false;
}

// ---------------------------------------------------------------------------------------------
// Writing

struct Prepared {
  std::string header;  // the 8-byte length followed by the padded JSON
  std::vector<array> tensors;
};

Prepared prepare(const std::unordered_map<std::string, array>& arrays,
                 const std::unordered_map<std::string, std::string>& metadata) {
  std::vector<std::string> names;
  names.reserve(arrays.size());
  for (const auto& kv : arrays) {
    if (kv.first == kMetadataKey) {
      throw std::invalid_argument("[save_safetensors] the tensor name '__metadata__' is reserved for the metadata map");
    }
    names.push_back(kv.first);
  }
  std::sort(names.begin(), names.end());
  for (const auto& kv : metadata) {
    if (starts_with(kv.first, kChecksumPrefix)) {
      throw std::invalid_argument("[save_safetensors] metadata key '" + kv.first + "' uses the prefix '" +
                                  kChecksumPrefix + "', reserved for the tensors' checksums");
    }
  }

  Prepared p;
  std::vector<array> lazy;
  for (const auto& n : names) lazy.push_back(arrays.at(n));
  eval(lazy);
  for (const auto& a : lazy) p.tensors.push_back(kernels::evaluated_row_contiguous(a));

  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  std::vector<std::pair<std::string, std::string>> meta(metadata.begin(), metadata.end());
  for (size_t i = 0; i < names.size(); ++i) {
    meta.emplace_back(kChecksumPrefix + names[i], hex32(io::detail::crc32_little_endian(p.tensors[i])));
  }
  if (!meta.empty()) {
    std::sort(meta.begin(), meta.end());
    nlohmann::ordered_json m = nlohmann::ordered_json::object();
    for (const auto& [k, v] : meta) m[k] = v;
    header[kMetadataKey] = std::move(m);
  }
  uint64_t offset = 0;
  for (size_t i = 0; i < names.size(); ++i) {
    const array& a = p.tensors[i];
    nlohmann::ordered_json t = nlohmann::ordered_json::object();
    t["dtype"] = st_dtype_name(a.dtype());
    nlohmann::ordered_json shape = nlohmann::ordered_json::array();
    for (int d : a.shape()) shape.push_back(d);
    t["shape"] = std::move(shape);
    t["data_offsets"] = nlohmann::ordered_json::array({offset, offset + a.nbytes()});
    offset += a.nbytes();
    header[names[i]] = std::move(t);
  }
  std::string text;
  try {
    text = header.dump();
  } catch (const nlohmann::json::exception& e) {
    throw std::invalid_argument(
        std::string("[save_safetensors] a tensor name or metadata string is not valid UTF-8 (") + e.what() + ")");
  }
  text.append((8 - text.size() % 8) % 8, ' ');  // as the reference writer does

  const uint64_t n = text.size();
  p.header.resize(8);
  for (int b = 0; b < 8; ++b) p.header[b] = static_cast<char>((n >> (8 * b)) & 0xff);
  p.header += text;
  return p;
}

void emit(io::detail::Sink& sink, const Prepared& p) {
  sink.write(p.header.data(), p.header.size());
  for (const auto& a : p.tensors) io::detail::write_little_endian(sink, a);
}

// ---------------------------------------------------------------------------------------------
// Reading

struct Entry {
  std::string name;
  Dtype dtype = float32;
  Shape shape;
  uint64_t begin = 0, end = 0;
};

// Keeps error messages short whatever a hostile header holds.
std::string clip(std::string s, size_t max = 120) {
  if (s.size() > max) s = s.substr(0, max) + "...";
  return s;
}
std::string short_dump(const json& v) { return clip(v.dump(-1, ' ', false, json::error_handler_t::replace)); }

std::string range_str(uint64_t b, uint64_t e) { return "[" + std::to_string(b) + ", " + std::to_string(e) + "]"; }

Entry parse_entry(const std::string& name, const json& v, Reader& r, bool size_known, uint64_t buffer_size) {
  const std::string who = "tensor '" + clip(name) + "'";
  if (!v.is_object()) r.fail(who + ": the header entry is not a JSON object");
  Entry e;
  e.name = name;

  auto dt = v.find("dtype");
  if (dt == v.end()) r.fail(who + " has no \"dtype\"");
  if (!dt->is_string()) r.fail(who + ": \"dtype\" is not a string");
  if (!st_parse_dtype(dt->get<std::string>(), &e.dtype)) {
    r.fail(who + " has unsupported dtype \"" + clip(dt->get<std::string>()) +
           "\" (Loom reads BOOL, U8, U16, U32, U64, I8, I16, I32, I64, F16, BF16, F32, F64 and C64)");
  }

  auto sh = v.find("shape");
  if (sh == v.end()) r.fail(who + " has no \"shape\"");
  if (!sh->is_array()) r.fail(who + ": \"shape\" is not an array");
  uint64_t count = 1;
  bool overflow = false;
  for (const auto& d : *sh) {
    if (d.is_number_integer() && !d.is_number_unsigned())
      r.fail(who + ": \"shape\" has a negative dimension " + short_dump(d));
    if (!d.is_number_unsigned())
      r.fail(who + ": \"shape\" entries must be non-negative integers, got " + short_dump(d));
    const uint64_t dim = d.get<uint64_t>();
    if (dim > static_cast<uint64_t>(INT_MAX)) {
      r.fail(who + ": dimension " + std::to_string(dim) + " in \"shape\" is larger than Loom's limit of " +
             std::to_string(INT_MAX));
    }
    e.shape.push_back(static_cast<int>(dim));
    overflow |= !io::detail::checked_mul(count, dim, &count);
  }

  auto off = v.find("data_offsets");
  if (off == v.end()) r.fail(who + " has no \"data_offsets\"");
  if (!off->is_array() || off->size() != 2 || !(*off)[0].is_number_unsigned() || !(*off)[1].is_number_unsigned()) {
    r.fail(who + ": \"data_offsets\" must be two non-negative integers, got " + short_dump(*off));
  }
  e.begin = (*off)[0].get<uint64_t>();
  e.end = (*off)[1].get<uint64_t>();
  if (e.begin > e.end) r.fail(who + ": data_offsets " + range_str(e.begin, e.end) + " end before they begin");
  if (size_known && e.end > buffer_size) {
    r.fail(who + ": data_offsets " + range_str(e.begin, e.end) + " are out of bounds of the " +
           std::to_string(buffer_size) + "-byte data buffer");
  }
  uint64_t nbytes = 0;
  const bool huge = overflow || !io::detail::checked_mul(count, e.dtype.size, &nbytes);
  if (huge || nbytes != e.end - e.begin) {
    r.fail(who + ": shape " + detail::shape_str(e.shape) + " of " + st_dtype_name(e.dtype) + " needs " +
           (huge ? std::string("more than 2^64") : std::to_string(nbytes)) + " bytes but data_offsets " +
           range_str(e.begin, e.end) + " span " + std::to_string(e.end - e.begin));
  }
  if (!io::detail::strides_fit(e.shape)) {
    r.fail(who + ": shape " + detail::shape_str(e.shape) + " is too large for Loom (its strides overflow int64)");
  }
  return e;
}

SafetensorsLoad read_safetensors(Reader& r, bool exact) {
  if (r.size_known() && r.remaining() < 8) {
    r.fail("truncated file: " + std::to_string(r.remaining()) +
           " bytes is too short for a safetensors file (the header length alone needs 8)");
  }
  unsigned char lenbuf[8];
  r.read_exact(lenbuf, 8, "the header length");
  uint64_t hlen = 0;
  for (int b = 7; b >= 0; --b) hlen = (hlen << 8) | lenbuf[b];
  if (r.size_known() && hlen > r.remaining()) {
    r.fail("truncated file: the header length " + std::to_string(hlen) + " exceeds the " +
           std::to_string(r.remaining()) + " bytes left in the file");
  }
  if (hlen > kMaxHeaderLen) {
    r.fail("the header length " + std::to_string(hlen) + " exceeds the limit of " + std::to_string(kMaxHeaderLen) +
           " bytes");
  }
  const std::string text = r.read_string(hlen, "the header");
  if (text.empty() || text[0] != '{') r.fail("the header is not a JSON object (it must start with '{')");

  // Duplicate tensor names would silently replace each other: spot them while parsing.
  std::set<std::string> seen;
  std::string duplicate;
  struct TooDeep {};
  json j;
  try {
    j = json::parse(text, [&](int depth, json::parse_event_t ev, json& parsed) {
      if ((ev == json::parse_event_t::object_start || ev == json::parse_event_t::array_start) && depth >= kMaxDepth) {
        throw TooDeep{};
      }
      if (ev == json::parse_event_t::key && depth == 1 && duplicate.empty()) {
        const std::string& k = parsed.get_ref<const std::string&>();
        if (!seen.insert(k).second) duplicate = k;
      }
      return true;
    });
  } catch (const json::exception& e) {
    r.fail("the header is not valid JSON: " + clip(e.what(), 300));
  } catch (const TooDeep&) {
    r.fail("the header nests JSON deeper than " + std::to_string(kMaxDepth) + " levels (a safetensors header needs 3)");
  }
  if (!j.is_object()) r.fail("the header is not a JSON object");
  if (!duplicate.empty()) r.fail("the header lists the name '" + clip(duplicate) + "' twice");

  const bool known = r.size_known();
  const uint64_t buffer_size = known ? r.remaining() : 0;
  std::unordered_map<std::string, std::string> metadata;
  std::unordered_map<std::string, uint32_t> checksums;  // tensor name -> CRC-32 of its bytes
  std::vector<Entry> entries;
  for (const auto& [key, val] : j.items()) {
    if (key == kMetadataKey) {
      if (val.is_null()) continue;  // the reference reader takes null as "no metadata"
      if (!val.is_object()) r.fail("\"__metadata__\" must be an object mapping strings to strings");
      for (const auto& [mk, mv] : val.items()) {
        if (!mv.is_string())
          r.fail("\"__metadata__\" value for key '" + clip(mk) + "' is not a string: " + short_dump(mv));
        if (starts_with(mk, kChecksumPrefix)) {
          uint32_t crc = 0;
          if (!parse_hex32(mv.get_ref<const std::string&>(), &crc)) {
            r.fail("\"__metadata__\" key '" + clip(mk) + "' is not a CRC-32 (8 hex digits): " + short_dump(mv));
          }
          checksums.emplace(mk.substr(std::string(kChecksumPrefix).size()), crc);
        } else {
          metadata.emplace(mk, mv.get<std::string>());
        }
      }
      continue;
    }
    entries.push_back(parse_entry(key, val, r, known, buffer_size));
  }
  std::set<std::string> held;
  for (const Entry& e : entries) held.insert(e.name);
  for (const auto& kv : checksums) {
    if (!held.count(kv.first)) {
      r.fail("\"__metadata__\" has a checksum for tensor '" + clip(kv.first) + "', which the file does not hold");
    }
  }

  // The tensors must tile the data buffer in offset order.
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end != b.end ? a.end < b.end : a.name < b.name;
  });
  uint64_t pos = 0;
  for (size_t i = 0; i < entries.size(); ++i) {
    const Entry& e = entries[i];
    if (e.begin < pos) {
      const Entry& p = entries[i - 1];
      r.fail("tensor '" + clip(e.name) + "' (data_offsets " + range_str(e.begin, e.end) + ") overlaps tensor '" +
             clip(p.name) + "' (" + range_str(p.begin, p.end) + ")");
    }
    if (e.begin > pos) {
      r.fail("bytes [" + std::to_string(pos) + ", " + std::to_string(e.begin) +
             ") of the data buffer belong to no tensor (a gap before tensor '" + clip(e.name) + "')");
    }
    pos = e.end;
  }
  if (known && exact && pos != buffer_size) {
    r.fail("the data buffer has " + std::to_string(buffer_size) + " bytes but the tensors cover only " +
           std::to_string(pos));
  }

  SafetensorsLoad out;
  out.second = std::move(metadata);
  const bool swap = !io::detail::host_is_little_endian();
  for (const Entry& e : entries) {
    array a(r.read_buffer(e.end - e.begin, "tensor '" + clip(e.name) + "'"), e.shape, e.dtype);
    auto crc = checksums.find(e.name);
    if (crc != checksums.end()) {
      const uint32_t got = io::detail::crc32(a.raw_data(), e.end - e.begin);  // the bytes as stored
      if (got != crc->second) {
        r.fail("tensor '" + clip(e.name) + "': checksum mismatch, the file is damaged (its data has CRC-32 " +
               hex32(got) + ", the header records " + hex32(crc->second) + ")");
      }
    }
    if (swap) io::detail::byteswap_inplace(a.raw_data(), a.size(), a.itemsize());
    if (e.dtype == bool_) io::detail::normalize_bools(a.raw_data(), a.size());
    out.first.emplace(e.name, std::move(a));
  }
  return out;
}

}  // namespace

void save_safetensors(std::ostream& os, const std::unordered_map<std::string, array>& arrays,
                      const std::unordered_map<std::string, std::string>& metadata) {
  Prepared p = prepare(arrays, metadata);
  io::detail::OstreamSink sink(os, "save_safetensors");
  emit(sink, p);
}

void save_safetensors(const std::string& path, const std::unordered_map<std::string, array>& arrays,
                      const std::unordered_map<std::string, std::string>& metadata) {
  Prepared p = prepare(arrays, metadata);
  io::detail::AtomicFileSink sink(path, "save_safetensors");
  emit(sink, p);
  sink.commit();
}

SafetensorsLoad load_safetensors(std::istream& is) {
  Reader r(is, "load_safetensors", "<stream>");
  return read_safetensors(r, false);
}

SafetensorsLoad load_safetensors(const std::string& path) {
  io::detail::InputFile f(path, "load_safetensors");
  Reader r(f.stream(), "load_safetensors", path);
  return read_safetensors(r, true);
}

}  // namespace loom
