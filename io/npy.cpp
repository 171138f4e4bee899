// numpy's .npy format: https://numpy.org/doc/stable/reference/generated/numpy.lib.format.html
//
// A file is the magic "\x93NUMPY", a version (major, minor), the header length (uint16 LE for 1.0,
// uint32 LE for 2.0 and 3.0), a header holding a Python dict literal
// {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), } padded with spaces and a final
// '\n' so that the data starts at a multiple of 64 bytes, then the raw data.
#include <algorithm>
#include <cctype>
#include <climits>
#include <vector>

#include "loom/core/copy.h"
#include "loom/core/eval.h"
#include "loom/io/detail.h"
#include "loom/io/io.h"
#include "loom/ops/ops.h"

namespace loom {

using io::detail::Reader;

namespace {

constexpr char kMagic[] = "\x93NUMPY";
constexpr size_t kMagicLen = 6;
constexpr size_t kAlign = 64;
// numpy leaves room for the first axis to grow to this many digits (so files can be appended to).
constexpr size_t kGrowthAxisMaxDigits = 21;
// No real header comes near this (numpy's own reader refuses more than 10000 bytes by default).
constexpr uint64_t kMaxHeaderLen = uint64_t(1) << 20;

// ---------------------------------------------------------------------------------------------
// Writing

std::string npy_descr(Dtype t) {
  switch (t.val) {
    case Dtype::Val::bool_:
      return "|b1";
    case Dtype::Val::uint8:
      return "|u1";
    case Dtype::Val::uint16:
      return "<u2";
    case Dtype::Val::uint32:
      return "<u4";
    case Dtype::Val::uint64:
      return "<u8";
    case Dtype::Val::int8:
      return "|i1";
    case Dtype::Val::int16:
      return "<i2";
    case Dtype::Val::int32:
      return "<i4";
    case Dtype::Val::int64:
      return "<i8";
    case Dtype::Val::float16:
      return "<f2";
    case Dtype::Val::float32:
      return "<f4";
    case Dtype::Val::float64:
      return "<f8";
    case Dtype::Val::complex64:
      return "<c8";
    case Dtype::Val::bfloat16:
      break;
  }
  throw std::invalid_argument(
      "[save] bfloat16 arrays cannot be stored in .npy: numpy has no bfloat16 dtype. Use "
      "save_safetensors (which stores BF16), or convert with astype(a, float32) first");
}

// The header current numpy writes for a C-order array, with the spare room for growth that
// np.save leaves after the dict (byte-identical to np.save).
std::string npy_header(Dtype dtype, const Shape& shape) {
  std::string dict = "{'descr': '" + npy_descr(dtype) + "', 'fortran_order': False, 'shape': (";
  for (size_t i = 0; i < shape.size(); ++i) dict += (i ? ", " : "") + std::to_string(shape[i]);
  if (shape.size() == 1) dict += ",";
  dict += "), }";
  if (!shape.empty()) dict.append(kGrowthAxisMaxDigits - std::to_string(shape[0]).size(), ' ');

  const size_t hlen = dict.size() + 1;  // + the final '\n'
  for (int major : {1, 2}) {
    const size_t prefix = kMagicLen + 2 + (major == 1 ? 2 : 4);
    const size_t pad = kAlign - (prefix + hlen) % kAlign;  // numpy pads 1..64 spaces
    const uint64_t total = hlen + pad;
    if (major == 1 && total > 0xffff) continue;  // too long for version 1.0: numpy switches to 2.0
    std::string out(kMagic, kMagicLen);
    out += static_cast<char>(major);
    out += '\0';
    for (size_t b = 0; b < (major == 1 ? 2u : 4u); ++b) out += static_cast<char>((total >> (8 * b)) & 0xff);
    out += dict;
    out.append(pad, ' ');
    out += '\n';
    return out;
  }
  throw std::invalid_argument("[save] the .npy header for shape " + detail::shape_str(shape) + " is too long");
}

void write_npy(io::detail::Sink& sink, const array& a) {
  const std::string header = npy_header(a.dtype(), a.shape());  // validates the dtype first
  array x = kernels::evaluated_row_contiguous(a);
  sink.write(header.data(), header.size());
  io::detail::write_little_endian(sink, x);
}

// ---------------------------------------------------------------------------------------------
// Reading: a parser for the Python literals that appear in headers.

struct PyValue {
  enum Kind { kStr, kBool, kInt, kNone, kTuple, kList, kDict } kind = kNone;
  std::string str;
  bool b = false;
  bool neg = false, overflow = false;
  uint64_t mag = 0;
  std::vector<PyValue> items;     // tuple, list and dict values
  std::vector<std::string> keys;  // dict keys (strings only)
};

const char* kind_name(PyValue::Kind k) {
  switch (k) {
    case PyValue::kStr:
      return "a string";
    case PyValue::kBool:
      return "a bool";
    case PyValue::kInt:
      return "an integer";
    case PyValue::kNone:
      return "None";
    case PyValue::kTuple:
      return "a tuple";
    case PyValue::kList:
      return "a list";
    case PyValue::kDict:
      return "a dict";
  }
  return "?";
}

std::string printable(const std::string& s, size_t max = 160) {
  std::string out;
  for (size_t i = 0; i < s.size() && i < max; ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c == '\n') {
      out += "\\n";
    } else if (c >= 0x20 && c < 0x7f) {
      out += static_cast<char>(c);
    } else {
      static const char hex[] = "0123456789abcdef";
      out += "\\x";
      out += hex[c >> 4];
      out += hex[c & 15];
    }
  }
  if (s.size() > max) out += "...";
  return out;
}

class PyParser {
 public:
  PyParser(const std::string& text, const Reader& reader) : s_(text), r_(reader) {}

  PyValue parse_dict_literal() {
    skip_ws();
    if (peek() != '{') error("expected '{'");
    PyValue v = value(0);
    skip_ws();
    if (i_ != s_.size()) error("unexpected text after the dictionary");
    return v;
  }

 private:
  const std::string& s_;
  const Reader& r_;
  size_t i_ = 0;

  [[noreturn]] void error(const std::string& what) const {
    r_.fail("malformed .npy header: " + what + " at offset " + std::to_string(i_) + " of \"" + printable(s_) + "\"");
  }
  char peek() const { return i_ < s_.size() ? s_[i_] : '\0'; }
  bool at_end() const { return i_ >= s_.size(); }
  void skip_ws() {
    while (!at_end() && (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\n' || s_[i_] == '\r')) ++i_;
  }
  bool word(const char* w) {
    const size_t n = std::strlen(w);
    if (s_.compare(i_, n, w) != 0) return false;
    const char next = i_ + n < s_.size() ? s_[i_ + n] : '\0';
    if (std::isalnum(static_cast<unsigned char>(next)) || next == '_') return false;
    i_ += n;
    return true;
  }

  PyValue value(int depth) {
    if (depth > 32) error("nesting too deep");
    skip_ws();
    if (at_end()) error("unexpected end of header");
    const char c = peek();
    PyValue v;
    if (c == '\'' || c == '"') return string_literal();
    if ((c == 'u' || c == 'b') && i_ + 1 < s_.size() && (s_[i_ + 1] == '\'' || s_[i_ + 1] == '"')) {
      ++i_;
      return string_literal();
    }
    if (c == '-' || c == '+' || std::isdigit(static_cast<unsigned char>(c))) return integer();
    if (word("True") || word("False")) {
      v.kind = PyValue::kBool;
      v.b = s_[i_ - 1] == 'e' && s_[i_ - 4] == 'T';
      return v;
    }
    if (word("None")) return v;
    if (c == '(' || c == '[') {
      const char close = c == '(' ? ')' : ']';
      ++i_;
      bool comma = false;
      v.kind = c == '(' ? PyValue::kTuple : PyValue::kList;
      for (;;) {
        skip_ws();
        if (peek() == close) break;
        v.items.push_back(value(depth + 1));
        skip_ws();
        if (peek() == ',') {
          comma = true;
          ++i_;
        } else if (peek() != close) {
          error(std::string("expected ',' or '") + close + "'");
        }
      }
      ++i_;
      if (c == '(' && v.items.size() == 1 && !comma) return v.items[0];  // (x) is just x
      return v;
    }
    if (c == '{') {
      ++i_;
      v.kind = PyValue::kDict;
      for (;;) {
        skip_ws();
        if (peek() == '}') break;
        PyValue k = value(depth + 1);
        if (k.kind != PyValue::kStr) error(std::string("dictionary keys must be strings, got ") + kind_name(k.kind));
        skip_ws();
        if (peek() != ':') error("expected ':'");
        ++i_;
        v.keys.push_back(k.str);
        v.items.push_back(value(depth + 1));
        skip_ws();
        if (peek() == ',') {
          ++i_;
        } else if (peek() != '}') {
          error("expected ',' or '}'");
        }
      }
      ++i_;
      return v;
    }
    error("unexpected character '" + printable(std::string(1, c)) + "'");
  }

  PyValue string_literal() {
    const char q = s_[i_++];
    PyValue v;
    v.kind = PyValue::kStr;
    for (;;) {
      if (at_end()) error("unterminated string");
      char c = s_[i_++];
      if (c == q) break;
      if (c == '\\') {
        if (at_end()) error("unterminated string");
        c = s_[i_++];
      }
      v.str += c;
    }
    return v;
  }

  PyValue integer() {
    PyValue v;
    v.kind = PyValue::kInt;
    if (peek() == '-' || peek() == '+') v.neg = s_[i_++] == '-';
    if (!std::isdigit(static_cast<unsigned char>(peek()))) error("expected a digit");
    while (std::isdigit(static_cast<unsigned char>(peek()))) {
      const uint64_t d = static_cast<uint64_t>(s_[i_++] - '0');
      if (v.mag > (UINT64_MAX - d) / 10) v.overflow = true;
      if (!v.overflow) v.mag = v.mag * 10 + d;
    }
    if (peek() == 'L' || peek() == 'l') ++i_;  // Python 2 long suffix
    if (std::isalpha(static_cast<unsigned char>(peek())) || peek() == '.' || peek() == '_') {
      error("expected an integer");
    }
    return v;
  }
};

struct NpyHeader {
  Dtype dtype = float32;
  bool swap = false;
  bool fortran = false;
  Shape shape;
  uint64_t nbytes = 0;
};

Dtype parse_descr(const std::string& descr, bool* swap, const Reader& r) {
  const bool little = io::detail::host_is_little_endian();
  std::string code = descr;
  char order = '=';
  if (!code.empty() && (code[0] == '<' || code[0] == '>' || code[0] == '|' || code[0] == '=')) {
    order = code[0];
    code = code.substr(1);
  }
  Dtype t;
  if (code == "b1" || code == "?") {
    t = bool_;
  } else if (code == "u1") {
    t = uint8;
  } else if (code == "u2") {
    t = uint16;
  } else if (code == "u4") {
    t = uint32;
  } else if (code == "u8") {
    t = uint64;
  } else if (code == "i1") {
    t = int8;
  } else if (code == "i2") {
    t = int16;
  } else if (code == "i4") {
    t = int32;
  } else if (code == "i8") {
    t = int64;
  } else if (code == "f2") {
    t = float16;
  } else if (code == "f4") {
    t = float32;
  } else if (code == "f8") {
    t = float64;
  } else if (code == "c8") {
    t = complex64;
  } else {
    r.fail("unsupported dtype '" + printable(descr) +
           "' (Loom reads |b1, |u1, <i4, <i8, <f2, <f4, <f8, <c8 and the big-endian '>' forms)");
  }
  *swap = t.size > 1 && ((order == '<' && !little) || (order == '>' && little));
  return t;
}

NpyHeader parse_header(const std::string& text, Reader& r) {
  PyValue d = PyParser(text, r).parse_dict_literal();
  if (d.kind != PyValue::kDict) r.fail("the .npy header is not a dictionary");
  const PyValue* descr = nullptr;
  const PyValue* fortran = nullptr;
  const PyValue* shape = nullptr;
  for (size_t k = 0; k < d.keys.size(); ++k) {
    const PyValue** slot = d.keys[k] == "descr"           ? &descr
                           : d.keys[k] == "fortran_order" ? &fortran
                           : d.keys[k] == "shape"         ? &shape
                                                          : nullptr;
    if (!slot) r.fail("the .npy header has an unexpected key '" + printable(d.keys[k]) + "'");
    if (*slot) r.fail("the .npy header repeats the key '" + d.keys[k] + "'");
    *slot = &d.items[k];
  }
  if (!descr) r.fail("the .npy header is missing the key 'descr'");
  if (!fortran) r.fail("the .npy header is missing the key 'fortran_order'");
  if (!shape) r.fail("the .npy header is missing the key 'shape'");

  NpyHeader h;
  if (descr->kind == PyValue::kList) r.fail("structured dtypes (a list as 'descr') are not supported");
  if (descr->kind != PyValue::kStr) r.fail(std::string("'descr' must be a string, got ") + kind_name(descr->kind));
  h.dtype = parse_descr(descr->str, &h.swap, r);
  if (fortran->kind != PyValue::kBool) {
    r.fail(std::string("'fortran_order' must be True or False, got ") + kind_name(fortran->kind));
  }
  h.fortran = fortran->b;
  if (shape->kind != PyValue::kTuple) r.fail(std::string("'shape' must be a tuple, got ") + kind_name(shape->kind));
  uint64_t count = 1;
  bool count_overflow = false;
  for (const PyValue& dim : shape->items) {
    if (dim.kind != PyValue::kInt) r.fail(std::string("'shape' entries must be integers, got ") + kind_name(dim.kind));
    if (dim.neg && (dim.mag != 0 || dim.overflow)) r.fail("'shape' has a negative dimension");
    if (dim.overflow || dim.mag > static_cast<uint64_t>(INT_MAX)) {
      r.fail("'shape' dimension " + (dim.overflow ? std::string("(beyond 2^64)") : std::to_string(dim.mag)) +
             " is larger than Loom's limit of " + std::to_string(INT_MAX));
    }
    h.shape.push_back(static_cast<int>(dim.mag));
    count_overflow |= !io::detail::checked_mul(count, dim.mag, &count);
  }
  if (count_overflow || !io::detail::checked_mul(count, h.dtype.size, &h.nbytes)) {
    r.fail("shape " + detail::shape_str(h.shape) + " holds more bytes than can be addressed");
  }
  if (!io::detail::strides_fit(h.shape)) {
    r.fail("shape " + detail::shape_str(h.shape) + " is too large for Loom (its strides overflow int64)");
  }
  return h;
}

uint64_t read_le(const unsigned char* p, int n) {
  uint64_t v = 0;
  for (int b = n - 1; b >= 0; --b) v = (v << 8) | p[b];
  return v;
}

// Reads one array; with `exact`, the data must end exactly at the end of the file.
array read_npy(Reader& r, bool exact) {
  unsigned char pre[kMagicLen + 2];
  if (r.size_known() && r.remaining() < sizeof(pre)) {
    r.fail("truncated file: " + std::to_string(r.remaining()) +
           " bytes is too short for a .npy file (the magic string and version need 8)");
  }
  r.read_exact(pre, sizeof(pre), "the magic string and version");
  if (std::memcmp(pre, kMagic, kMagicLen) != 0) {
    r.fail("not a .npy file: bad magic string \"" + printable(std::string(reinterpret_cast<char*>(pre), kMagicLen)) +
           "\" (expected \"\\x93NUMPY\")");
  }
  const int major = pre[kMagicLen], minor = pre[kMagicLen + 1];
  if (major < 1 || major > 3 || minor != 0) {
    r.fail("unsupported .npy format version " + std::to_string(major) + "." + std::to_string(minor) +
           " (Loom reads 1.0, 2.0 and 3.0)");
  }
  const int len_bytes = major == 1 ? 2 : 4;
  unsigned char lenbuf[4];
  r.read_exact(lenbuf, len_bytes, "the header length");
  const uint64_t hlen = read_le(lenbuf, len_bytes);
  if (r.size_known() && hlen > r.remaining()) {
    r.fail("truncated file: the header length " + std::to_string(hlen) + " exceeds the " +
           std::to_string(r.remaining()) + " bytes left in the file");
  }
  if (hlen > kMaxHeaderLen) {
    r.fail("the header length " + std::to_string(hlen) + " exceeds the limit of " + std::to_string(kMaxHeaderLen) +
           " bytes");
  }
  const std::string text = r.read_string(hlen, "the header");
  NpyHeader h = parse_header(text, r);

  if (r.size_known()) {
    if (r.remaining() < h.nbytes) {
      r.fail("truncated file: shape " + detail::shape_str(h.shape) + " of " + to_string(h.dtype) + " needs " +
             std::to_string(h.nbytes) + " data bytes but only " + std::to_string(r.remaining()) + " follow the header");
    }
    if (exact && r.remaining() > h.nbytes) {
      r.fail("the file has " + std::to_string(r.remaining()) + " data bytes after the header but shape " +
             detail::shape_str(h.shape) + " of " + to_string(h.dtype) + " needs " + std::to_string(h.nbytes));
    }
  }
  // Fortran order: the bytes are the row-major layout of the reversed shape.
  Shape stored = h.shape;
  const bool transpose_back = h.fortran && h.shape.size() > 1;
  if (transpose_back) std::reverse(stored.begin(), stored.end());

  array out(r.read_buffer(h.nbytes, "the array data"), stored, h.dtype);
  const size_t n = out.size();
  // complex64 swaps each float32 part.
  if (h.swap && is_complex(h.dtype)) io::detail::byteswap_inplace(out.raw_data(), 2 * n, 4);
  else if (h.swap) io::detail::byteswap_inplace(out.raw_data(), n, h.dtype.size);
  if (h.dtype == bool_) io::detail::normalize_bools(out.raw_data(), n);
  if (transpose_back) {
    out = transpose(out);  // a view: column-major strides over the same buffer
    out.eval();
  }
  return out;
}

std::string with_npy_suffix(const std::string& path) {
  const std::string ext = ".npy";
  if (path.size() >= ext.size() && path.compare(path.size() - ext.size(), ext.size(), ext) == 0) return path;
  return path + ext;
}

}  // namespace

void save(std::ostream& os, const array& a) {
  io::detail::OstreamSink sink(os, "save");
  write_npy(sink, a);
}

void save(const std::string& path, const array& a) {
  npy_descr(a.dtype());  // refuse bfloat16 before touching the file system
  io::detail::AtomicFileSink sink(with_npy_suffix(path), "save");
  write_npy(sink, a);
  sink.commit();
}

array load(std::istream& is, StreamOrDevice s) {
  OnStream on(s);
  Reader r(is, "load", "<stream>");
  return read_npy(r, false);
}

array load(const std::string& path, StreamOrDevice s) {
  OnStream on(s);
  io::detail::InputFile f(path, "load");
  Reader r(f.stream(), "load", path);
  return read_npy(r, true);
}

}  // namespace loom
