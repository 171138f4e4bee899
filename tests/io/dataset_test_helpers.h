// Byte-level builders for the dataset tests: IDX files and gzip streams (written by hand with stored
// deflate blocks, so the tests need no zlib of their own; zlib is private to the library).
#pragma once

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

namespace loom::datatest {

/// `v` as n big-endian bytes.
inline std::string be(uint64_t v, int n) {
  std::string s;
  for (int i = n - 1; i >= 0; --i) s += static_cast<char>((v >> (8 * i)) & 0xff);
  return s;
}

/// An IDX header: 0, 0, type code, ndim, then each dimension as a big-endian uint32.
inline std::string idx_header(int code, std::initializer_list<uint32_t> dims) {
  std::string s;
  s += '\0';
  s += '\0';
  s += static_cast<char>(code);
  s += static_cast<char>(dims.size());
  for (uint32_t d : dims) s += be(d, 4);
  return s;
}

/// CRC-32 (IEEE 802.3, reflected, polynomial 0xEDB88320), bit by bit.
inline uint32_t crc32(const std::string& data) {
  uint32_t c = 0xffffffffu;
  for (unsigned char b : data) {
    c ^= b;
    for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0xedb88320u & (0u - (c & 1u)));
  }
  return ~c;
}

inline std::string le32(uint32_t v) {
  std::string s;
  for (int i = 0; i < 4; ++i) s += static_cast<char>((v >> (8 * i)) & 0xff);
  return s;
}

/// A gzip stream (RFC 1952) holding `data` in stored (uncompressed) deflate blocks of at most
/// 65535 bytes (RFC 1951 section 3.2.4), with the CRC-32 and length trailer.
inline std::string gzip_stored(const std::string& data) {
  std::string s("\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff", 10);  // no flags, mtime 0, OS unknown
  size_t off = 0;
  do {
    const size_t n = std::min<size_t>(65535, data.size() - off);
    const bool last = off + n == data.size();
    s += static_cast<char>(last ? 1 : 0);  // BFINAL, BTYPE = 00 (stored)
    s += static_cast<char>(n & 0xff);
    s += static_cast<char>(n >> 8);
    s += static_cast<char>(~n & 0xff);
    s += static_cast<char>((~n >> 8) & 0xff);
    s.append(data, off, n);
    off += n;
  } while (off < data.size());
  return s + le32(crc32(data)) + le32(static_cast<uint32_t>(data.size()));
}

}  // namespace loom::datatest
