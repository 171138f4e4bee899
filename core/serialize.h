// Primitives' parameters to bytes and back: what export_function writes for each node and
// import_function reads (autograd/export.h). A primitive that can be exported writes its parameters
// in Primitive::save and registers, once, a loader that reads them back in the same order and
// builds the primitive (register_primitive, keyed by its name()).
#pragma once

#include <cstdint>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "loom/core/array.h"

namespace loom {
class Primitive;
}

namespace loom::detail {

/// Appends values in a fixed little-endian layout: integers and floats by their bytes, bool as one
/// byte, Dtype by its name, shapes and vectors by their length then their elements, strings by their
/// length then their bytes.
class Writer {
 public:
  template <typename... Ts>
  void put(const Ts&... xs) {
    (put_one(xs), ...);
  }
  const std::string& bytes() const { return out_; }

 private:
  template <typename T>
  void raw(T v) {
    static_assert(std::is_trivially_copyable_v<T>);
    char b[sizeof(T)];
    std::memcpy(b, &v, sizeof(T));
    out_.append(b, sizeof(T));
  }
  void put_one(bool v) { raw<uint8_t>(v ? 1 : 0); }
  void put_one(int v) { raw<int32_t>(v); }
  void put_one(unsigned v) { raw<uint32_t>(v); }
  void put_one(int64_t v) { raw<int64_t>(v); }
  void put_one(uint64_t v) { raw<uint64_t>(v); }
  void put_one(float v) { raw<float>(v); }
  void put_one(double v) { raw<double>(v); }
  void put_one(const std::string& s) {
    raw<uint64_t>(s.size());
    out_.append(s);
  }
  void put_one(const char* s) { put_one(std::string(s)); }
  void put_one(Dtype d) { put_one(to_string(d)); }
  template <typename T, size_t N>
  void put_one(const SmallVector<T, N>& v) {
    raw<uint64_t>(v.size());
    for (const T& x : v) put_one(x);
  }
  template <typename T>
  void put_one(const std::vector<T>& v) {
    raw<uint64_t>(v.size());
    for (const T& x : v) put_one(x);
  }
  template <typename E, typename = std::enable_if_t<std::is_enum_v<E>>>
  void put_one(E e) {
    raw<int32_t>(static_cast<int32_t>(e));
  }
  std::string out_;
};

/// Reads what a Writer wrote, in the same order. Reading past the end, or a length or a dtype name
/// that cannot be, throws std::runtime_error naming `what` (the file) as truncated or corrupt.
class Reader {
 public:
  Reader(const char* data, size_t size, std::string what) : p_(data), end_(data + size), what_(std::move(what)) {}
  template <typename... Ts>
  void get(Ts&... xs) {
    (get_one(xs), ...);
  }
  template <typename T>
  T get() {
    T x{};
    get_one(x);
    return x;
  }
  size_t remaining() const { return static_cast<size_t>(end_ - p_); }
  /// `n` raw bytes (the caller copies them before reading on).
  const char* take(size_t n) {
    if (n > remaining()) fail("it ends early");
    const char* at = p_;
    p_ += n;
    return at;
  }
  [[noreturn]] void fail(const std::string& why) const {
    throw std::runtime_error("[import_function] " + what_ + " is truncated or corrupt: " + why);
  }

 private:
  template <typename T>
  T raw() {
    T v;
    std::memcpy(&v, take(sizeof(T)), sizeof(T));
    return v;
  }
  uint64_t length(size_t item) {
    const uint64_t n = raw<uint64_t>();
    if (item != 0 && n > remaining() / item) fail("a length of " + std::to_string(n) + " runs past its end");
    return n;
  }
  void get_one(bool& v) { v = raw<uint8_t>() != 0; }
  void get_one(int& v) { v = raw<int32_t>(); }
  void get_one(unsigned& v) { v = raw<uint32_t>(); }
  void get_one(int64_t& v) { v = raw<int64_t>(); }
  void get_one(uint64_t& v) { v = raw<uint64_t>(); }
  void get_one(float& v) { v = raw<float>(); }
  void get_one(double& v) { v = raw<double>(); }
  void get_one(std::string& s) {
    const uint64_t n = length(1);
    s.assign(take(n), n);
  }
  void get_one(Dtype& d);  // core/serialize.cpp: by name
  template <typename T, size_t N>
  void get_one(SmallVector<T, N>& v) {
    const uint64_t n = length(1);
    v.clear();
    for (uint64_t i = 0; i < n; ++i) v.push_back(get<T>());
  }
  template <typename T>
  void get_one(std::vector<T>& v) {
    const uint64_t n = length(1);
    v.clear();
    v.reserve(n);
    for (uint64_t i = 0; i < n; ++i) v.push_back(get<T>());
  }
  template <typename E, typename = std::enable_if_t<std::is_enum_v<E>>>
  void get_one(E& e) {
    e = static_cast<E>(raw<int32_t>());
  }
  const char* p_;
  const char* end_;
  std::string what_;
};

/// Builds a primitive from the parameters its save() wrote.
using PrimitiveLoader = std::shared_ptr<Primitive> (*)(Reader& params);
/// Registers the loader of the primitive whose name() is `name` (once; a second registration of a
/// name keeps the first). Returns true, for a static initializer.
bool register_primitive(const char* name, PrimitiveLoader load);
/// The loader registered for `name`, or null.
PrimitiveLoader primitive_loader(const std::string& name);

}  // namespace loom::detail
