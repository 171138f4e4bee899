// GGUF files (llama.cpp's format), with MLX's load_gguf / save_gguf names and types.
//
// Loading never trusts a file: every count, length, shape and offset is checked against the bytes
// present before anything is allocated, and a damaged or hostile file gives a std::runtime_error
// whose message starts with "[load_gguf] '<path>': " and names the problem.
//
// Deliberate differences from MLX (mlx/io/gguf.cpp on gguf-tools):
// - tensors of type BF16, F64 and I64 load as bfloat16, float64 and int64 (MLX converts BF16 to
//   float16 and cannot read F64 / I64), and save_gguf writes bfloat16, float64 and int64 arrays;
// - quantized types other than Q4_0, Q4_1 and Q8_0 (the K-quants, IQ*, Q5_*, Q8_1) are refused
//   with an error naming the type; MLX dequantizes them to float16;
// - FLOAT64 metadata loads as float64 (MLX: float32) and float64 metadata arrays save as FLOAT64
//   (MLX refuses them);
// - "general.alignment" (uint32) is honoured when reading and, when given in the metadata, when
//   writing (gguf-tools looks for a misspelled key, so MLX always uses 32);
// - a file naming a tensor or a metadata key twice is refused (MLX keeps one silently);
// - tensors and metadata are written sorted by name, so equal inputs give identical files;
// - save_gguf writes `<file>.tmp` and renames it over `<file>`, as Loom's other writers do;
// - errors in the arguments of save_gguf are std::invalid_argument.
#pragma once

#include <string>
#include <unordered_map>
#include <utility>
#include <variant>
#include <vector>

#include "loom/core/array.h"

namespace loom {

/// A GGUF metadata value: a scalar (a 0-d array), a 1-d array of numbers or bools, a string, or a
/// list of strings. std::monostate is what a default-constructed value holds; it cannot be saved.
using GGUFMetaData = std::variant<std::monostate, array, std::string, std::vector<std::string>>;
using GGUFLoad = std::pair<std::unordered_map<std::string, array>, std::unordered_map<std::string, GGUFMetaData>>;

/// Loads every tensor and metadata value of a GGUF file (versions 2 and 3, little-endian).
/// Tensors of type F32, F16, BF16, F64, I8, I16, I32 and I64 load as arrays whose shape is the
/// GGUF dimensions reversed (GGUF lists the fastest-varying first). Tensors of type Q4_0, Q4_1
/// and Q8_0 load, as MLX does, as the triple of mlx's affine quantization with group size 32:
/// "<name>" (uint32, 8 (4-bit) or 4 (8-bit) values packed per word along the last axis),
/// "<prefix>.scales" and "<prefix>.biases" (float16, one per group), where <prefix> is <name>
/// without its ".weight" suffix; so that dequantize(w, scales, biases, 32, bits) gives the
/// tensor's values. Metadata scalars load as 0-d arrays (uint8 ... int64, float32, float64, bool),
/// arrays as 1-d arrays, strings as std::string and arrays of strings as std::vector<std::string>;
/// nested arrays are refused.
GGUFLoad load_gguf(const std::string& file);

/// Saves arrays (evaluated first; any layout) and metadata as a GGUF version 3 file, appending
/// ".gguf" to `file` when it does not end with it (as MLX). Arrays of float32, float16, bfloat16,
/// float64, int8, int16, int32 and int64 are written with their dimensions reversed (GGUF's order)
/// at 32-byte aligned offsets, or at the alignment the metadata gives as "general.alignment" (a 0-d
/// uint32 from 1 to 2^20). Metadata arrays must be 0-d (a scalar) or non-empty 1-d, of uint8 ...
/// int64, float32, float64 or bool. Throws std::invalid_argument for other dtypes, more than 8
/// dimensions, empty or multi-dimensional metadata arrays, and a std::monostate value.
void save_gguf(std::string file, const std::unordered_map<std::string, array>& array_map,
               const std::unordered_map<std::string, GGUFMetaData>& metadata = {});

}  // namespace loom
