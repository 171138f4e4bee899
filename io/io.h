// Saving and loading arrays: numpy's .npy format and the safetensors format (MLX's names).
//
// Loading never trusts a file: every size in a header is checked against the bytes actually present
// before anything is allocated, and a damaged or hostile file gives a std::runtime_error whose
// message starts with "[load]" / "[load_safetensors]" and names the file and the problem.
// Saving to a path writes `<path>.tmp`, flushes it to disk and renames it over `<path>`, so a
// reader (or a crash) never sees a half-written file.
#pragma once

#include <istream>
#include <ostream>
#include <string>
#include <unordered_map>
#include <utility>

#include "loom/core/array.h"

namespace loom {

// ---- .npy ----

/// Saves `a` (evaluated first; any layout) as a version 1.0 .npy file in C order, little-endian.
/// Appends ".npy" to `path` when it does not end with it, as numpy does. Every dtype but bfloat16
/// is supported; bfloat16 throws std::invalid_argument
/// (numpy has no bfloat16: use save_safetensors, or astype(a, float32)).
void save(const std::string& path, const array& a);
/// Writes the .npy bytes of `a` to `os` (no atomic rename, nothing appended to names).
void save(std::ostream& os, const array& a);

/// Loads a .npy file (format versions 1.0, 2.0 and 3.0; C or Fortran order; little- or big-endian
/// data; descr |b1 |u1 <i4 <i8 <f2 <f4 <f8). The file must hold exactly the header and the data.
/// The result is evaluated; a Fortran-order file gives a column-major view (no extra copy).
array load(const std::string& path, StreamOrDevice s = {});
/// Reads one .npy array from `is` and leaves the stream just after its data, so several arrays
/// written one after another to a stream can be read back in turn.
array load(std::istream& is, StreamOrDevice s = {});

// ---- safetensors ----

using SafetensorsLoad = std::pair<std::unordered_map<std::string, array>, std::unordered_map<std::string, std::string>>;

/// Saves named arrays (evaluated first; any layout) and optional string metadata in the
/// safetensors format. Tensors are laid out sorted by name and the header is padded with spaces
/// to a multiple of 8 bytes, so equal inputs give identical files. dtypes map to BOOL, U8, I32,
/// I64, F16, BF16, F32, F64. Each tensor's checksum goes into the metadata as
/// "loom.crc32.<name>" = the CRC-32 of its data bytes, 8 lowercase hex digits (plain metadata to
/// other safetensors readers). The name "__metadata__" and metadata keys starting with
/// "loom.crc32." are reserved (std::invalid_argument). The file is written at exactly `path`
/// (nothing is appended).
void save_safetensors(const std::string& path, const std::unordered_map<std::string, array>& arrays,
                      const std::unordered_map<std::string, std::string>& metadata = {});
void save_safetensors(std::ostream& os, const std::unordered_map<std::string, array>& arrays,
                      const std::unordered_map<std::string, std::string>& metadata = {});

/// Loads every tensor of a safetensors file and its `__metadata__` map (empty when absent). The
/// header and offsets are validated as the reference implementation does: known dtypes, shapes that
/// agree with the byte ranges, ranges that tile the data buffer with no overlap, gap or trailing
/// bytes. Every "loom.crc32.<name>" checksum present is verified: a tensor whose bytes do not match
/// throws std::runtime_error "[load_safetensors] '<path>': tensor '<name>': checksum mismatch, the
/// file is damaged (...)". Files without checksums (written by other tools) load unchecked. The
/// returned metadata leaves the "loom.crc32." entries out: it holds what the writer passed.
SafetensorsLoad load_safetensors(const std::string& path);
/// Reads one safetensors blob from `is`, leaving the stream just after the last tensor's bytes.
SafetensorsLoad load_safetensors(std::istream& is);

}  // namespace loom
