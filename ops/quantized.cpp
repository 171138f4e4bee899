// Quantization (see ops/quantized.h): the op functions check their arguments as MLX's do, then record
// one of four primitives: Quantize, Dequantize, QuantizedMatmul (gather_qmm is its gathered form) and
// ConvertFP8.
//
// Bit-for-bit agreement with MLX needs each multiply and add rounded on its own: no FMA contraction
// in this file (GCC contracts across statements at -O2 unless told not to).
#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#include "loom/ops/quantized.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

#include "loom/core/copy.h"
#include "loom/core/loops.h"
#include "loom/core/parallel.h"
#include "loom/core/primitive.h"
#include "loom/core/serialize.h"
#include "loom/core/threads.h"
#include "loom/ops/batching.h"
#include "loom/ops/indexing.h"
#include "loom/kernels/gemm.h"
#include "loom/ops/ops.h"
#include "loom/ops/utils.h"

namespace loom {

using detail::msg;
using detail::shape_str;

namespace {

// The last axis split into groups of `gs`: (..., n) -> (..., n / gs, gs), as scales and biases see it.
array grouped(const array& x, int gs) {
  Shape s = x.shape();
  s.back() /= gs;
  s.push_back(gs);
  return reshape(x, s);
}

enum class QMode { affine, mxfp4, mxfp8, nvfp4 };

const char* mode_name(QMode m) {
  switch (m) {
    case QMode::affine: return "affine";
    case QMode::mxfp4: return "mxfp4";
    case QMode::mxfp8: return "mxfp8";
    default: return "nvfp4";
  }
}

QMode parse_mode(const std::string& mode, const char* op) {
  if (mode == "affine") return QMode::affine;
  if (mode == "mxfp4") return QMode::mxfp4;
  if (mode == "mxfp8") return QMode::mxfp8;
  if (mode == "nvfp4") return QMode::nvfp4;
  throw std::invalid_argument(
      msg("[", op, "] invalid quantization mode '", mode, "'; expected affine, mxfp4, mxfp8 or nvfp4"));
}

// MLX's defaults per mode (quantization_params_from_mode).
std::pair<int, int> params(QMode m, std::optional<int> gs, std::optional<int> bits) {
  int dg = 64, db = 4;
  if (m == QMode::nvfp4) dg = 16;
  if (m == QMode::mxfp4) dg = 32;
  if (m == QMode::mxfp8) dg = 32, db = 8;
  return {gs.value_or(dg), bits.value_or(db)};
}

// The group size and bits a mode allows (MLX's affine_quantize / fp_quantize checks).
void check_params(QMode m, int gs, int bits, const char* op) {
  if (m == QMode::affine) {
    if (gs != 32 && gs != 64 && gs != 128) {
      throw std::invalid_argument(msg("[", op, "] group_size ", gs, " is not supported; affine quantization supports ",
                                      "group sizes 32, 64 and 128"));
    }
    if (bits < 2 || bits > 8 || bits == 7) {
      throw std::invalid_argument(
          msg("[", op, "] bits ", bits, " is not supported; affine quantization supports 2, 3, 4, 5, 6 and 8 bits"));
    }
    return;
  }
  const int want_gs = m == QMode::nvfp4 ? 16 : 32, want_bits = m == QMode::mxfp8 ? 8 : 4;
  if (gs != want_gs) {
    throw std::invalid_argument(
        msg("[", op, "] ", mode_name(m), " quantization requires group_size ", want_gs, " but got ", gs));
  }
  if (bits != want_bits) {
    throw std::invalid_argument(
        msg("[", op, "] ", mode_name(m), " quantization requires bits ", want_bits, " but got ", bits));
  }
}

void check_global_scale(QMode m, const std::optional<array>& g, const char* op) {
  if (!g) return;
  if (m != QMode::nvfp4) {
    throw std::invalid_argument(msg("[", op, "] a global scale is only supported for 'nvfp4' quantization, not '",
                                    mode_name(m), "'"));
  }
  if (g->size() != 1) {
    throw std::invalid_argument(msg("[", op, "] the global scale must be a scalar; got shape ", shape_str(g->shape())));
  }
  if (g->dtype() != float32) {
    throw std::invalid_argument(msg("[", op, "] the global scale must be float32; got ", g->dtype()));
  }
}

// ---- scalar formats ----

uint32_t f2u(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
float u2f(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// float -> E4M3 as MLX's CPU ToFP8: round to nearest even (subnormals by adding 2^14 and reading the
// low bits), magnitudes >= 448 (inf and NaN too) saturate to 448.
uint8_t to_e4m3(float f) {
  uint32_t b = f2u(f);
  const uint32_t sign = b & 0x80000000u;
  b ^= sign;
  uint8_t r;
  if (b >= (543u << 21)) {
    r = 0x7E;
  } else if (b < (121u << 23)) {
    const uint32_t denorm = 141u << 23;
    r = static_cast<uint8_t>(f2u(u2f(b) + u2f(denorm)) - denorm);
  } else {
    uint32_t hi = b + (static_cast<uint32_t>(7 - 127) << 23) + 0x7FFFFu;
    hi += (b >> 20) & 1u;
    r = static_cast<uint8_t>(hi >> 20);
  }
  return static_cast<uint8_t>(r | (sign >> 24));
}

// E4M3 -> float as MLX: the low 7 bits are a float16's top bits (times 2^8); 0x7F gives 480.
float from_e4m3(uint8_t x) {
  const float v = float16_t::to_float(static_cast<uint16_t>((x & 127) << 7)) * 256.0f;
  return (x & 128) ? -v : v;
}

constexpr float kFp4[16] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f,
                            -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};

// An E8M0 scale: 2^(s - 127).
float from_e8m0(uint8_t s) { return std::ldexp(1.0f, int(s) - 127); }

// v rounded to storage type T and back (the rounding an MLX op in dtype T applies to its result).
template <typename T>
float rt(float v) {
  return static_cast<float>(static_cast<T>(v));
}

template <typename F>
void dispatch_float(Dtype d, F&& f) {
  if (d == float32) {
    f(float{});
  } else if (d == float16) {
    f(float16_t{});
  } else if (d == bfloat16) {
    f(bfloat16_t{});
  } else if (d == float64) {
    f(double{});
  } else {
    throw std::invalid_argument(msg("[quantize] unsupported dtype ", d));
  }
}

// ---- packing: a row's codes are one little-endian bit stream in uint32 words ----

// Writes `n` codes into the words at `out` (n * bits a multiple of 32).
void pack_codes(const uint32_t* codes, int n, int bits, uint32_t* out) {
  uint64_t acc = 0;
  int have = 0;
  for (int i = 0; i < n; ++i) {
    acc |= uint64_t(codes[i]) << have;
    have += bits;
    if (have >= 32) {
      *out++ = static_cast<uint32_t>(acc);
      acc >>= 32;
      have -= 32;
    }
  }
}

// Reads `n` codes of `bits` bits from the words at `w`, calling f(i, code).
template <int bits, typename F>
inline void unpack_codes(const uint32_t* w, int n, F&& f) {
  constexpr uint32_t mask = (1u << bits) - 1u;
  if constexpr (32 % bits == 0) {
    constexpr int per = 32 / bits;
    for (int j = 0; j < n / per; ++j) {
      const uint32_t v = w[j];
      for (int k = 0; k < per; ++k) f(j * per + k, (v >> (k * bits)) & mask);
    }
  } else {
    uint64_t acc = 0;
    int have = 0;
    for (int i = 0; i < n; ++i) {
      if (have < bits) {
        acc |= uint64_t(*w++) << have;
        have += 32;
      }
      f(i, static_cast<uint32_t>(acc & mask));
      acc >>= bits;
      have -= bits;
    }
  }
}

template <typename F>
void with_bits(int bits, F&& f) {
  switch (bits) {
    case 2: f(std::integral_constant<int, 2>{}); break;
    case 3: f(std::integral_constant<int, 3>{}); break;
    case 4: f(std::integral_constant<int, 4>{}); break;
    case 5: f(std::integral_constant<int, 5>{}); break;
    case 6: f(std::integral_constant<int, 6>{}); break;
    case 8: f(std::integral_constant<int, 8>{}); break;
    default: throw std::invalid_argument(msg("[quantize] unsupported bits ", bits));
  }
}

// Writes the `n` values of a group: out[i] = value(code_i). For 3, 5 and 6 bits the values of the
// 2^bits codes are computed once per group into a table (bit for bit what value() gives).
template <int bits, typename Out, typename V>
inline void decode_group(const uint32_t* w, int n, Out* out, V&& value) {
  if constexpr (32 % bits == 0) {
    // Shifts and masks of whole words: the compiler vectorizes this (a table lookup measured 3x slower).
    unpack_codes<bits>(w, n, [&](int i, uint32_t q) { out[i] = value(q); });
  } else {
    Out lut[1 << bits];
    for (uint32_t q = 0; q < (1u << bits); ++q) lut[q] = value(q);
    unpack_codes<bits>(w, n, [&](int i, uint32_t q) { out[i] = lut[q]; });
  }
}

// E4M3 code -> float, for every code.
const float* e4m3_table() {
  static const auto table = [] {
    std::array<float, 256> t{};
    for (int i = 0; i < 256; ++i) t[i] = from_e4m3(uint8_t(i));
    return t;
  }();
  return table.data();
}

// ---- quantize kernels (one group at a time; w row-contiguous) ----

// MLX's CPU affine kernel: the scale spans [min, max] and is nudged so that the edge of larger
// magnitude is exactly representable (q0 * scale == edge).
template <typename T>
void affine_quantize_group(const T* w, int gs, int bits, uint32_t* out, T* scale_out, T* bias_out) {
  const float n_bins = float((1 << bits) - 1), eps = 1e-7f;
  float w_min = std::numeric_limits<float>::infinity(), w_max = -w_min;
  for (int j = 0; j < gs; ++j) {
    const float v = static_cast<float>(w[j]);
    w_max = std::max(w_max, v);
    w_min = std::min(w_min, v);
  }
  const bool mask = std::abs(w_min) > std::abs(w_max);
  float scale = std::max((w_max - w_min) / n_bins, eps);
  scale = mask ? scale : -scale;
  const float edge = mask ? w_min : w_max;
  const float q0 = std::rint(edge / scale);
  float bias = 0;
  if (q0 != 0) {
    scale = edge / q0;
    bias = edge;
  }
  uint32_t codes[128];
  for (int j = 0; j < gs; ++j) {
    float q = std::rint((static_cast<float>(w[j]) - bias) / scale);
    q = std::min(std::max(q, 0.0f), n_bins);
    codes[j] = static_cast<uint32_t>(q);
  }
  pack_codes(codes, gs, bits, out);
  *scale_out = static_cast<T>(scale);
  *bias_out = static_cast<T>(bias);
}

// The index of the first nearest FP4 value to v (MLX's argmin over |v - lut|, in type C).
template <typename C>
uint32_t nearest_fp4(float v) {
  uint32_t best = 0;
  float best_d = 0;
  for (uint32_t i = 0; i < 16; ++i) {
    const float d = std::abs(rt<C>(v - kFp4[i]));
    if (i == 0 || d < best_d) {
      best = i;
      best_d = d;
    }
  }
  return best;
}

// MLX's fp_quantize fallback, step by step in w's dtype T (nvfp4's scaled values are float32 there).
template <typename T>
void fp_quantize_group(const T* w, QMode m, float global, bool has_global, uint32_t* out, uint8_t* scale_out) {
  const int gs = m == QMode::nvfp4 ? 16 : 32, bits = m == QMode::mxfp8 ? 8 : 4;
  const float maxval = bits == 4 ? 6.0f : 448.0f;
  float amax = 0;
  for (int j = 0; j < gs; ++j) amax = std::max(amax, std::abs(static_cast<float>(w[j])));
  const float scale = rt<T>(amax / maxval);
  float wq[32];
  if (m == QMode::nvfp4) {
    const float enc = has_global ? (448.0f * 6.0f) / global : 1.0f;
    const uint8_t s8 = to_e4m3(scale * enc);
    *scale_out = s8;
    const float s = rt<T>(from_e4m3(s8));
    for (int j = 0; j < gs; ++j) wq[j] = rt<T>(static_cast<float>(w[j]) / s) * enc;
  } else {
    float e = 0;
    if (scale != 0) e = static_cast<float>(static_cast<int32_t>(rt<T>(std::rint(rt<T>(std::log2(scale))))));
    const float p = rt<T>(std::pow(2.0f, e));
    for (int j = 0; j < gs; ++j) wq[j] = rt<T>(static_cast<float>(w[j]) / p);
    *scale_out = static_cast<uint8_t>(static_cast<int>(e) + 127);
  }
  uint32_t codes[32];
  for (int j = 0; j < gs; ++j) {
    if (bits == 8) {
      codes[j] = to_e4m3(wq[j]);
    } else if (m == QMode::nvfp4) {
      codes[j] = nearest_fp4<float>(wq[j]);
    } else {
      codes[j] = nearest_fp4<T>(wq[j]);
    }
  }
  pack_codes(codes, gs, bits, out);
}

// The batching rule of Quantize and Dequantize: groups run along the last axis, so a batch is more
// leading rows; `arrays` (the weights, scales, biases) get the batch first, a global scale (0-d, after
// them) cannot vary along it.
std::pair<std::vector<array>, std::vector<int>> vmap_rows(const char* op, size_t arrays, const std::vector<array>& in,
                                                          const std::vector<int>& axes, const std::vector<array>& outs) {
  for (size_t i = arrays; i < in.size(); ++i) {
    if (axes[i] >= 0) throw std::invalid_argument(msg("[vmap] ", op, " with a global scale that varies along the batch"));
  }
  const int n = loom::detail::vmap_size(in, axes);
  std::vector<array> x(in.begin(), in.end());
  for (size_t i = 0; i < arrays; ++i) x[i] = loom::detail::batch_first_broadcast(in[i], axes[i], n);
  return loom::detail::same_op_batch_first(std::move(x), outs, n);
}

// Outputs: w_q, scales[, biases]. Inputs: w[, global_scale].
class Quantize : public Primitive {
 public:
  Quantize(int gs, int bits, QMode m) : gs_(gs), bits_(bits), mode_(m) {}
  void save(detail::Writer& w) const override { w.put(gs_, bits_, mode_); }
  void eval_cpu(const std::vector<array>& in, std::vector<array>& out) override {
    array w = kernels::row_contiguous(in[0]);
    for (auto& o : out) o.alloc();
    const int64_t groups = int64_t(w.size() / size_t(gs_));
    const int words = gs_ * bits_ / 32;
    uint32_t* wq = kernels::ptr<uint32_t>(out[0]);
    float global = 1.0f;
    if (in.size() > 1) global = kernels::row_contiguous(in[1]).data<float>()[0];
    const bool has_global = in.size() > 1;
    dispatch_float(w.dtype(), [&](auto tag) {
      using T = decltype(tag);
      const T* wp = kernels::ptr<T>(w);
      auto body = [&](size_t b, size_t e) {
        for (size_t g = b; g < e; ++g) {
          if (mode_ == QMode::affine) {
            affine_quantize_group<T>(wp + g * gs_, gs_, bits_, wq + g * words, kernels::ptr<T>(out[1]) + g,
                                     kernels::ptr<T>(out[2]) + g);
          } else {
            fp_quantize_group<T>(wp + g * gs_, mode_, global, has_global, wq + g * words,
                                 kernels::ptr<uint8_t>(out[1]) + g);
          }
        }
      };
      const int nt = groups * gs_ < (1 << 16) ? 1 : get_num_threads();
      loom::detail::run_parts(size_t(groups), loom::detail::parts_for(groups, nt), nt, body);
    });
  }
  bool is_differentiable() const override { return false; }
  std::pair<std::vector<array>, std::vector<int>> vmap(const std::vector<array>& in, const std::vector<int>& axes,
                                                       const std::vector<array>& outs) override {
    return vmap_rows("quantize", 1, in, axes, outs);
  }
  const char* name() const override { return "Quantize"; }

 private:
  int gs_, bits_;
  QMode mode_;
};
const bool kQuantizeLoads = detail::register_primitive("Quantize", [](detail::Reader& r) -> std::shared_ptr<Primitive> {
  int gs, bits;
  QMode m;
  r.get(gs, bits, m);
  if (m < QMode::affine || m > QMode::nvfp4) r.fail("not a quantization mode");
  return std::make_shared<Quantize>(gs, bits, m);
});

// ---- dequantize ----

// Inputs: w, scales[, biases (affine)][, global_scale (nvfp4)]; the affine scales and biases share
// the output's dtype. Per element, as MLX's composition: q * scale rounded to the dtype, then + bias
// rounded again (fp modes: the code's value times the decoded scale, rounded once).
class Dequantize : public UnaryPrimitive {
 public:
  Dequantize(int gs, int bits, QMode m) : gs_(gs), bits_(bits), mode_(m) {}
  void save(detail::Writer& w) const override { w.put(gs_, bits_, mode_); }
  void eval_cpu(const std::vector<array>& in, array& out) override {
    array w = kernels::row_contiguous(in[0]);
    array s = kernels::row_contiguous(in[1]);
    const bool affine = mode_ == QMode::affine;
    array b = affine ? kernels::row_contiguous(in[2]) : array(0.0f);
    float global = 0;
    const bool has_global = !affine && in.size() > 2;
    if (has_global) global = kernels::row_contiguous(in[2]).data<float>()[0];
    out.alloc();
    const int64_t groups = int64_t(out.size() / size_t(gs_));
    const int words = gs_ * bits_ / 32;
    const uint32_t* wp = kernels::ptr<uint32_t>(w);
    dispatch_float(out.dtype(), [&](auto tag) {
      using T = decltype(tag);
      using A = std::conditional_t<std::is_same_v<T, double>, double, float>;
      T* op = kernels::ptr<T>(out);
      auto body = [&](size_t gb, size_t ge) {
        for (size_t g = gb; g < ge; ++g) {
          T* o = op + g * gs_;
          const uint32_t* wg = wp + g * words;
          if (affine) {
            const A sc = static_cast<A>(kernels::ptr<T>(s)[g]), bi = static_cast<A>(kernels::ptr<T>(b)[g]);
            with_bits(bits_, [&](auto bc) {
              decode_group<decltype(bc)::value>(wg, gs_, o, [&](uint32_t q) {
                const A p = static_cast<A>(static_cast<T>(static_cast<A>(q) * sc));
                return static_cast<T>(p + bi);
              });
            });
          } else {
            const uint8_t s8 = kernels::ptr<uint8_t>(s)[g];
            float sc;
            if (mode_ == QMode::nvfp4) {
              sc = has_global ? from_e4m3(s8) * (global / (448.0f * 6.0f)) : rt<T>(from_e4m3(s8));
            } else {
              sc = rt<T>(from_e8m0(s8));
            }
            if (bits_ == 8) {
              const float* e4 = e4m3_table();
              decode_group<8>(wg, gs_, o, [&](uint32_t q) { return static_cast<T>(rt<T>(e4[q]) * sc); });
            } else {
              decode_group<4>(wg, gs_, o, [&](uint32_t q) { return static_cast<T>(kFp4[q] * sc); });
            }
          }
        }
      };
      const int nt = out.size() < (1u << 16) ? 1 : get_num_threads();
      loom::detail::run_parts(size_t(groups), loom::detail::parts_for(groups, nt), nt, body);
    });
  }
  // out = q * s + b per group: linear in (s, b).
  std::vector<array> vjp(const std::vector<array>& p, const std::vector<array>& cot, const std::vector<int>& argnums,
                         const std::vector<array>&) override {
    std::vector<array> r;
    for (int a : argnums) {
      if (a == 0) throw std::invalid_argument("[dequantize] no gradient with respect to the packed weights w (uint32)");
      if (mode_ != QMode::affine || a > 2) {
        throw std::invalid_argument(msg("[dequantize] no gradient with respect to the scales of ", mode_name(mode_),
                                        " quantization"));
      }
      array c = grouped(cot[0], gs_);
      if (a == 2) {
        r.push_back(sum(c, -1));
      } else {
        array q = grouped(dequantize(p[0], ones_like(p[1]), zeros_like(p[2]), gs_, bits_, "affine", std::nullopt,
                                     cot[0].dtype()), gs_);
        r.push_back(sum(multiply(c, q), -1));
      }
    }
    return r;
  }
  std::vector<array> jvp(const std::vector<array>& p, const std::vector<array>& t,
                         const std::vector<int>& argnums) override {
    if (mode_ != QMode::affine) {
      throw std::invalid_argument(msg("[dequantize] no jvp for ", mode_name(mode_), " quantization"));
    }
    std::optional<array> ts, tb;
    for (size_t i = 0; i < argnums.size(); ++i) {
      if (argnums[i] == 0) throw std::invalid_argument("[dequantize] no jvp with respect to the packed weights w");
      (argnums[i] == 1 ? ts : tb) = t[i];
    }
    return {dequantize(p[0], ts ? *ts : zeros_like(p[1]), tb ? *tb : zeros_like(p[2]), gs_, bits_, "affine")};
  }
  std::pair<std::vector<array>, std::vector<int>> vmap(const std::vector<array>& in, const std::vector<int>& axes,
                                                       const std::vector<array>& outs) override {
    return vmap_rows("dequantize", mode_ == QMode::affine ? 3 : 2, in, axes, outs);
  }
  const char* name() const override { return "Dequantize"; }

 private:
  int gs_, bits_;
  QMode mode_;
};
const bool kDequantizeLoads =
    detail::register_primitive("Dequantize", [](detail::Reader& r) -> std::shared_ptr<Primitive> {
      int gs, bits;
      QMode m;
      r.get(gs, bits, m);
      if (m < QMode::affine || m > QMode::nvfp4) r.fail("not a quantization mode");
      return std::make_shared<Dequantize>(gs, bits, m);
    });

// ---- quantized matmul ----

// Dequantizes columns [c0, c1) (multiples of the group size) of rows [r0, r1) of a packed matrix
// with `cols` columns into `dst` (row stride ld), as T (float, double, or a half type: decoded in
// float and rounded once).
struct Packed {
  const uint32_t* w;
  const void* scales;  // T (affine) or uint8
  const void* biases;
  int cols, gs, bits;
  QMode mode;
};

template <typename T>
void dequant_block(const Packed& P, int r0, int r1, int c0, int c1, T* dst, int64_t ld) {
  using C = compute_t<T>;
  const int64_t words_row = int64_t(P.cols) * P.bits / 32, groups_row = P.cols / P.gs;
  const int gwords = P.gs * P.bits / 32;
  for (int r = r0; r < r1; ++r) {
    T* d = dst + (r - r0) * ld;
    for (int c = c0; c < c1; c += P.gs) {
      const int64_t g = int64_t(r) * groups_row + c / P.gs;
      const uint32_t* wg = P.w + int64_t(r) * words_row + int64_t(c / P.gs) * gwords;
      T* o = d + (c - c0);
      if (P.mode == QMode::affine) {
        const C sc = C(static_cast<const T*>(P.scales)[g]), bi = C(static_cast<const T*>(P.biases)[g]);
        with_bits(P.bits, [&](auto bc) {
          decode_group<decltype(bc)::value>(wg, P.gs, o, [&](uint32_t q) { return T(C(q) * sc + bi); });
        });
      } else {
        const uint8_t s8 = static_cast<const uint8_t*>(P.scales)[g];
        const C sc = P.mode == QMode::nvfp4 ? from_e4m3(s8) : from_e8m0(s8);
        if (P.bits == 8) {
          const float* e4 = e4m3_table();
          decode_group<8>(wg, P.gs, o, [&](uint32_t q) { return T(C(e4[q]) * sc); });
        } else {
          decode_group<4>(wg, P.gs, o, [&](uint32_t q) { return T(C(kFp4[q]) * sc); });
        }
      }
    }
  }
}

// out (M, N) = x (M, K) @ W.T (transpose: W is (N, K) packed along K) or x @ W (W is (K, N) packed
// along N). Column blocks of the output are independent: each dequantizes its slab of W into a
// buffer of T of about 512 KB and runs one GEMM (a half T: on the seam's half kernels); the blocks
// run on Loom's threads.
template <typename T>
void qmm_matrix(const T* x, int M, int K, int N, const Packed& P, bool transpose, T* out) {
  if (M == 0 || N == 0) return;
  if (K == 0) {
    std::fill(out, out + int64_t(M) * N, T(0));
    return;
  }
  // 512 KB of buffer: 128K-512K elements measured alike (4096^2, 4 bits); 32K and 2M were 25% slower.
  const int64_t target = (int64_t(1) << 19) / sizeof(T);  // elements per buffer
  int nb;
  if (transpose) {
    nb = int(std::max<int64_t>(8, target / K));
  } else {
    nb = int(std::max<int64_t>(P.gs, (target / K) / P.gs * P.gs));  // whole groups of a packed row
  }
  nb = std::min(nb, N);
  const int64_t blocks = (N + nb - 1) / nb;
  const int64_t work = int64_t(M) * N * K + int64_t(N) * K * 4;
  const int nt = loom::detail::in_parallel() || work < kernels::kGemmSplitMacs ? 1 : get_num_threads();
  // Contiguous runs of blocks per part: each part faults in its buffer once and reuses it.
  const int64_t parts = nt == 1 ? 1 : loom::detail::parts_for(blocks, nt);
  loom::detail::run_parts(size_t(blocks), parts, nt, [&](size_t b0, size_t b1) {
    std::vector<T> buf(size_t(nb) * K);
    for (size_t bi = b0; bi < b1; ++bi) {
      const int n0 = int(bi) * nb, n1 = std::min(N, n0 + nb), w = n1 - n0;
      if (transpose) {
        dequant_block(P, n0, n1, 0, K, buf.data(), K);  // (w, K)
        kernels::gemm<T>(false, true, M, w, K, T(1), x, K, buf.data(), K, T(0), out + n0, N);
      } else {
        dequant_block(P, 0, K, n0, n1, buf.data(), w);  // (K, w)
        kernels::gemm<T>(false, false, M, w, K, T(1), x, K, buf.data(), w, T(0), out + n0, N);
      }
    }
  });
}

// The element offset of matrix `i` (row-major over the axes before the last two) of `a`.
int64_t matrix_offset(const array& a, int64_t i) {
  int64_t off = 0;
  for (int d = int(a.ndim()) - 3; d >= 0; --d) {
    const int n = a.shape()[d];
    off += (i % n) * a.strides()[d];
    i /= n;
  }
  return off;
}

// `a` with its last two axes row-major (stride 1 and the row length), other axes as they are.
array matrices_contiguous(const array& a) {
  const int nd = int(a.ndim());
  if (nd >= 2 && (a.strides()[nd - 1] == 1 || a.shape()[nd - 1] == 1) &&
      (a.strides()[nd - 2] == a.shape()[nd - 1] || a.shape()[nd - 2] == 1)) {
    return a;
  }
  return kernels::row_contiguous(a);
}

int64_t batch_count(const array& a) {
  int64_t n = 1;
  for (size_t d = 0; d + 2 < a.ndim(); ++d) n *= a.shape()[d];
  return n;
}

// Inputs: x (float32, float64, or bfloat16 / float16 where the GEMM seam reads them), w, scales[,
// biases] (x's dtype for affine; uint8 otherwise)[, lhs,
// rhs indices (int32) for the gathered form]. The output has x's dtype.
class QuantizedMatmul : public UnaryPrimitive {
 public:
  QuantizedMatmul(int gs, int bits, QMode m, bool transpose, bool gather)
      : gs_(gs), bits_(bits), mode_(m), transpose_(transpose), gather_(gather) {}
  void save(detail::Writer& w) const override { w.put(gs_, bits_, mode_, transpose_, gather_); }

  // A shapeless call: x's rows follow the call (without gather: x's leading axes; with gather: the
  // indices' shape); the output's columns are w's.
  std::vector<Shape> output_shapes(const std::vector<Shape>& in) const override {
    const Shape &x = in.at(0), &w = in.at(1);
    const int unpacked = int(int64_t(w.back()) * 32 / bits_);
    const int inner = transpose_ ? unpacked : w[w.size() - 2], outer = transpose_ ? w[w.size() - 2] : unpacked;
    if (x.back() != inner) {
      throw std::invalid_argument(msg("[compile] QuantizedMatmul cannot take x of shape ", shape_str(x), " against w of shape ",
                                      shape_str(w), " (", inner, " inputs)"));
    }
    if (gather_) {
      Shape out = in.back();
      out.push_back(x[x.size() - 2]);
      out.push_back(outer);
      return {out};
    }
    Shape out = x;
    out.back() = outer;
    return {out};
  }

  void eval_cpu(const std::vector<array>& in, array& out) override {
    if (out.dtype() == float64) {
      run<double>(in, out);
    } else if (out.dtype() == bfloat16) {
      run<bfloat16_t>(in, out);
    } else if (out.dtype() == float16) {
      run<float16_t>(in, out);
    } else {
      run<float>(in, out);
    }
  }
  template <typename T>
  void run(const std::vector<array>& in, array& out) {
    const bool affine = mode_ == QMode::affine;
    array x = matrices_contiguous(in[0]), w = matrices_contiguous(in[1]), s = matrices_contiguous(in[2]);
    array b = affine ? matrices_contiguous(in[3]) : array(0.0f);
    out.alloc();
    T* op = kernels::ptr<T>(out);
    const int K = x.shape(-1), N = out.shape(-1);
    const int M = x.ndim() > 1 ? x.shape(-2) : 1;
    const int cols = transpose_ ? K : N;
    const uint32_t* wp = kernels::ptr<uint32_t>(w);
    auto packed = [&](int64_t wi) {
      Packed P{wp + matrix_offset(w, wi), nullptr, nullptr, cols, gs_, bits_, mode_};
      if (affine) {
        P.scales = kernels::ptr<T>(s) + matrix_offset(s, wi);
        P.biases = kernels::ptr<T>(b) + matrix_offset(b, wi);
      } else {
        P.scales = kernels::ptr<uint8_t>(s) + matrix_offset(s, wi);
      }
      return P;
    };
    const T* xp = kernels::ptr<T>(x);
    if (gather_) {
      array li = kernels::row_contiguous(in[in.size() - 2], int32), ri = kernels::row_contiguous(in[in.size() - 1], int32);
      const int32_t* lp = kernels::ptr<int32_t>(li);
      const int32_t* rp = kernels::ptr<int32_t>(ri);
      const int64_t nx = batch_count(x), nw = batch_count(w);
      for (size_t i = 0; i < li.size(); ++i) {
        if (lp[i] < 0 || lp[i] >= nx || rp[i] < 0 || rp[i] >= nw) {
          throw std::out_of_range(msg("[gather_qmm] index pair (", lp[i], ", ", rp[i], ") is out of range for ", nx,
                                      " matrices of x and ", nw, " of w"));
        }
        qmm_matrix(xp + matrix_offset(x, lp[i]), M, K, N, packed(rp[i]), transpose_, op + i * size_t(M) * N);
      }
      return;
    }
    if (w.ndim() == 2) {  // one W: every row of x at once
      const int rows = int(x.size() / std::max<size_t>(size_t(K), 1));
      if (x.flags().row_contiguous) {
        qmm_matrix(xp, rows, K, N, packed(0), transpose_, op);
        return;
      }
    }
    const int64_t batch = batch_count(out);
    for (int64_t i = 0; i < batch; ++i) {
      qmm_matrix(xp + matrix_offset(x, i), M, K, N, packed(w.ndim() == 2 ? 0 : i), transpose_, op + i * int64_t(M) * N);
    }
  }

  std::vector<array> vjp(const std::vector<array>& p, const std::vector<array>& cot, const std::vector<int>& argnums,
                         const std::vector<array>&) override {
    const char* op = gather_ ? "gather_qmm" : "quantized_matmul";
    const bool affine = mode_ == QMode::affine;
    std::optional<array> biases = affine ? std::optional<array>(p[3]) : std::nullopt;
    std::vector<array> r;
    std::optional<array> dsb;  // d out / d (dequantized w), grouped: (..., rows, groups, gs)
    for (int a : argnums) {
      if (a == 0) {
        if (!gather_) {
          r.push_back(quantized_matmul(cot[0], p[1], p[2], biases, !transpose_, gs_, bits_, mode_name(mode_)));
        } else {
          // Per output matrix, then added into the x matrix it came from.
          const array& x = p[0];
          const array& li = p[p.size() - 2];
          array g = gather_qmm(cot[0], p[1], p[2], biases, std::nullopt, p[p.size() - 1], !transpose_, gs_, bits_,
                               mode_name(mode_));
          const int M = x.shape(-2), K = x.shape(-1);
          array flat = zeros({int(batch_count(x)), M, K}, x.dtype());
          array upd = reshape(g, {int(li.size()), M, K});
          r.push_back(reshape(scatter_add_take(flat, flatten(li), upd, 0), x.shape()));
        }
      } else if (a == 1) {
        throw std::runtime_error(msg("[", op, "] no gradient with respect to the quantized weights w (as in MLX); ",
                                     "differentiate with respect to x, scales or biases"));
      } else if (gather_ && a >= int(p.size()) - 2) {
        throw std::runtime_error(msg("[", op, "] no gradient with respect to the indices"));
      } else {
        if (!affine) {
          throw std::invalid_argument(
              msg("[", op, "] no gradient with respect to the scales in ", mode_name(mode_), " quantization"));
        }
        if (!dsb) dsb = grouped(weight_grad(p, cot[0]), gs_);
        if (a == 3) {
          r.push_back(sum(*dsb, -1));
        } else {
          array q = dequantize(p[1], ones_like(p[2]), zeros_like(p[3]), gs_, bits_, "affine", std::nullopt, p[2].dtype());
          r.push_back(sum(multiply(*dsb, grouped(q, gs_)), -1));
        }
      }
    }
    return r;
  }

  // Linear in x and, jointly, in (scales, biases).
  std::vector<array> jvp(const std::vector<array>& p, const std::vector<array>& t,
                         const std::vector<int>& argnums) override {
    const char* op = gather_ ? "gather_qmm" : "quantized_matmul";
    const bool affine = mode_ == QMode::affine;
    std::optional<array> tx, ts, tb;
    for (size_t i = 0; i < argnums.size(); ++i) {
      const int a = argnums[i];
      if (a == 0) {
        tx = t[i];
      } else if (a == 1 || (gather_ && a >= int(p.size()) - 2)) {
        throw std::runtime_error(msg("[", op, "] no jvp with respect to ", a == 1 ? "the quantized weights w" : "the indices"));
      } else if (!affine) {
        throw std::invalid_argument(msg("[", op, "] no jvp with respect to the scales in ", mode_name(mode_), " quantization"));
      } else {
        (a == 2 ? ts : tb) = t[i];
      }
    }
    std::optional<array> acc;
    auto add_term = [&](const array& term) { acc = acc ? add(*acc, term) : term; };
    std::optional<array> biases = affine ? std::optional<array>(p[3]) : std::nullopt;
    if (tx) add_term(apply(*tx, p[1], p[2], biases, p));
    if (ts || tb) add_term(apply(p[0], p[1], ts ? *ts : zeros_like(p[2]), tb ? *tb : zeros_like(p[3]), p));
    return {*acc};
  }
  std::pair<std::vector<array>, std::vector<int>> vmap(const std::vector<array>& in, const std::vector<int>& axes,
                                                       const std::vector<array>& outs) override {
    if (gather_) return vmap_gather(in, axes);
    const int n = loom::detail::vmap_size(in, axes);
    const Shape& out = outs[0].shape();
    bool w_batched = false;
    for (size_t i = 1; i < in.size(); ++i) w_batched |= axes[i] >= 0;
    if (!w_batched && in[1].ndim() == 2) {
      // One weight matrix for the whole batch: the batch is more rows of x.
      std::vector<array> x = in;
      x[0] = loom::detail::batch_first(in[0], axes[0]);
      return loom::detail::same_op_batch_first(std::move(x), outs, n);
    }
    // Weights per batch entry: a stack of matrices, x's rows (all of its leading axes) against each.
    std::vector<array> b = loom::detail::all_batch_first(in, axes);
    const int K = b[0].shape(-1), M = static_cast<int>(b[0].size() / (size_t(n) * K));
    const size_t w_ndim = in[1].ndim() - (axes[1] >= 0 ? 1 : 0);  // the unbatched w's
    if (w_ndim == 2) b[0] = reshape(b[0], {n, M, K});  // one matrix per entry: x's leading axes merged
    Shape flat = b[0].shape();
    flat.back() = out.back();
    array r(std::move(flat), outs[0].dtype(), outs[0].primitive_ptr(), std::move(b));
    return {{reshape(r, loom::detail::insert_axis(out, 0, n))}, {0}};
  }
  const char* name() const override { return gather_ ? "GatherQMM" : "QuantizedMatmul"; }

 private:
  array apply(const array& x, const array& w, const array& s, const std::optional<array>& b,
              const std::vector<array>& p) const {
    if (!gather_) return quantized_matmul(x, w, s, b, transpose_, gs_, bits_, mode_name(mode_));
    return gather_qmm(x, w, s, b, p[p.size() - 2], p[p.size() - 1], transpose_, gs_, bits_, mode_name(mode_));
  }
  // d out / d W for the dequantized W, shaped as W: (..., N, K) when transposed, (..., K, N) otherwise.
  array weight_grad(const std::vector<array>& p, const array& cot) const {
    const array& x = p[0];
    const array& w = p[1];
    if (!gather_) {
      if (w.ndim() == 2) {
        array fc = reshape(cot, {-1, cot.shape(-1)}), fx = reshape(x, {-1, x.shape(-1)});
        return transpose_ ? matmul(transpose(fc), fx) : matmul(transpose(fx), fc);
      }
      return transpose_ ? matmul(swapaxes(cot, -1, -2), x) : matmul(swapaxes(x, -1, -2), cot);
    }
    // One product per output matrix, added into the W matrix it used.
    const array& li = p[p.size() - 2];
    const array& ri = p[p.size() - 1];
    const int M = x.shape(-2), K = x.shape(-1), N = cot.shape(-1);
    array xs = take(reshape(x, {int(batch_count(x)), M, K}), flatten(li), 0);  // (I, M, K)
    array cs = reshape(cot, {int(li.size()), M, N});
    array per = transpose_ ? matmul(swapaxes(cs, -1, -2), xs) : matmul(swapaxes(xs, -1, -2), cs);
    Shape ws{int(batch_count(w)), per.shape(1), per.shape(2)};
    array acc = scatter_add_take(zeros(ws, per.dtype()), flatten(ri), per, 0);
    Shape full(w.shape().begin(), w.shape().end() - 2);
    full.push_back(per.shape(1));
    full.push_back(per.shape(2));
    return reshape(acc, full);
  }
  // gather_qmm: a batched x (or w) is one more leading axis of the matrices it holds, so entry b's
  // matrices are numbers b * count + i of the stack; its indices are offset to them. Batched indices
  // are more index pairs. One gather_qmm for the whole batch.
  std::pair<std::vector<array>, std::vector<int>> vmap_gather(const std::vector<array>& in,
                                                              const std::vector<int>& axes) const {
    const int n = loom::detail::vmap_size(in, axes);
    const size_t nw_in = in.size() - 3;  // w, scales[, biases]
    bool w_batched = false;
    for (size_t i = 1; i <= nw_in; ++i) w_batched |= axes[i] >= 0;
    std::vector<array> ops(in.begin(), in.end() - 2);
    ops[0] = loom::detail::batch_first(in[0], axes[0]);
    for (size_t i = 1; i <= nw_in && w_batched; ++i) ops[i] = loom::detail::batch_first_broadcast(in[i], axes[i], n);
    auto indices = [&](size_t k, bool operand_batched, const array& operand) {
      array idx = loom::detail::batch_first_broadcast(in[k], axes[k], n);
      if (!operand_batched) return idx;
      const int count = static_cast<int>(batch_count(operand) / n);  // matrices per entry
      Shape ones(idx.ndim(), 1);
      ones[0] = n;
      return add(idx, reshape(multiply(arange(0, n, 1, int32), array(count, int32)), ones));
    };
    array li = indices(in.size() - 2, axes[0] >= 0, ops[0]), ri = indices(in.size() - 1, w_batched, ops[1]);
    std::optional<array> biases = mode_ == QMode::affine ? std::optional<array>(ops[3]) : std::nullopt;
    return {{gather_qmm(ops[0], ops[1], ops[2], biases, li, ri, transpose_, gs_, bits_, mode_name(mode_))}, {0}};
  }

  int gs_, bits_;
  QMode mode_;
  bool transpose_, gather_;
};
// One class under two names: `gather` saved picks the name back.
std::shared_ptr<Primitive> load_quantized_matmul(detail::Reader& r) {
  int gs, bits;
  QMode m;
  bool transpose, gather;
  r.get(gs, bits, m, transpose, gather);
  if (m < QMode::affine || m > QMode::nvfp4) r.fail("not a quantization mode");
  return std::make_shared<QuantizedMatmul>(gs, bits, m, transpose, gather);
}
const bool kQuantizedMatmulLoads = detail::register_primitive("QuantizedMatmul", load_quantized_matmul) &&
                                   detail::register_primitive("GatherQMM", load_quantized_matmul);

// ---- float8 ----

class ConvertFP8 : public UnaryPrimitive {
 public:
  explicit ConvertFP8(bool to) : to_(to) {}
  void save(detail::Writer& w) const override { w.put(to_); }
  void eval_cpu(const std::vector<array>& in, array& out) override {
    array x = kernels::row_contiguous(in[0]);
    out.alloc();
    const size_t n = out.size();
    if (to_) {
      uint8_t* o = kernels::ptr<uint8_t>(out);
      dispatch_float(x.dtype(), [&](auto tag) {
        using T = decltype(tag);
        const T* xp = kernels::ptr<T>(x);
        for (size_t i = 0; i < n; ++i) o[i] = to_e4m3(static_cast<float>(xp[i]));
      });
    } else {
      const uint8_t* xp = kernels::ptr<uint8_t>(x);
      dispatch_float(out.dtype(), [&](auto tag) {
        using T = decltype(tag);
        T* o = kernels::ptr<T>(out);
        for (size_t i = 0; i < n; ++i) o[i] = static_cast<T>(from_e4m3(xp[i]));
      });
    }
  }
  bool is_differentiable() const override { return false; }
  std::pair<std::vector<array>, std::vector<int>> vmap(const std::vector<array>& in, const std::vector<int>& axes,
                                                       const std::vector<array>& outs) override {
    return loom::detail::vmap_elementwise(in, axes, outs);
  }
  const char* name() const override { return to_ ? "ToFP8" : "FromFP8"; }

 private:
  bool to_;
};
std::shared_ptr<Primitive> load_convert_fp8(detail::Reader& r) { return std::make_shared<ConvertFP8>(r.get<bool>()); }
const bool kConvertFP8Loads =
    detail::register_primitive("ToFP8", load_convert_fp8) && detail::register_primitive("FromFP8", load_convert_fp8);

// ---- argument checks shared by quantized_matmul and gather_qmm (MLX's validate_* helpers) ----

// The result dtype for the scales (and biases) of `mode`; checks their dtypes.
Dtype scales_dtype(QMode m, const array& scales, const std::optional<array>& biases, const char* op) {
  if (m == QMode::affine) {
    if (!biases) throw std::invalid_argument(msg("[", op, "] biases must be given for affine quantization"));
    const Dtype d = promote_types(scales.dtype(), biases->dtype());
    if (!is_floating_point(d)) {
      throw std::invalid_argument(msg("[", op, "] scales and biases must be floating; got ", scales.dtype(), " and ",
                                      biases->dtype()));
    }
    return d;
  }
  if (scales.dtype() != uint8) {
    throw std::invalid_argument(msg("[", op, "] ", mode_name(m), " scales must be uint8; got ", scales.dtype()));
  }
  if (biases) throw std::invalid_argument(msg("[", op, "] biases must not be given for ", mode_name(m), " quantization"));
  return bfloat16;
}

// w, scales and biases agree with each other and with x's last axis; returns w's outer dimension.
int check_qmm_shapes(const array& x, const array& w, const array& scales, const std::optional<array>& biases,
                     bool transpose, int gs, int bits, const char* op) {
  if (w.dtype() != uint32) throw std::invalid_argument(msg("[", op, "] the packed weights w must be uint32; got ", w.dtype()));
  if (w.ndim() < 2 || scales.ndim() != w.ndim()) {
    throw std::invalid_argument(msg("[", op, "] w must have at least 2 dimensions and scales as many; got w ",
                                    shape_str(w.shape()), " and scales ", shape_str(scales.shape())));
  }
  if (biases && biases->shape() != scales.shape()) {
    throw std::invalid_argument(msg("[", op, "] scales ", shape_str(scales.shape()), " and biases ",
                                    shape_str(biases->shape()), " must have the same shape"));
  }
  if (!std::equal(w.shape().begin(), w.shape().end() - 1, scales.shape().begin()) ||
      int64_t(w.shape(-1)) * 32 / bits != int64_t(scales.shape(-1)) * gs) {
    throw std::invalid_argument(msg("[", op, "] w ", shape_str(w.shape()), " and scales ", shape_str(scales.shape()),
                                    " do not match with group_size=", gs, " and bits=", bits));
  }
  if (x.ndim() < 1) throw std::invalid_argument(msg("[", op, "] x must have at least 1 dimension"));
  const int unpacked = int(int64_t(w.shape(-1)) * 32 / bits);
  const int inner = transpose ? unpacked : w.shape(-2), outer = transpose ? w.shape(-2) : unpacked;
  if (x.shape(-1) != inner) {
    throw std::invalid_argument(msg("[", op, "] the last dimension of x ", shape_str(x.shape()),
                                    " does not match the dequantized w (", inner, ", ", outer, ") from w ",
                                    shape_str(w.shape()), " with group_size=", gs, ", bits=", bits,
                                    " and transpose=", transpose ? "true" : "false"));
  }
  return outer;
}

// The result dtype (x promoted with the scales, as MLX). x, scales and biases are cast to it first (as
// MLX casts them), then to the kernel's dtype (compute_dtype).
Dtype qmm_dtype(QMode m, const array& x, Dtype sdt, const char* op) {
  const Dtype d = m == QMode::affine ? promote_types(x.dtype(), sdt) : x.dtype();
  if (!is_floating_point(d)) {
    throw std::invalid_argument(msg("[", op, "] only floating x is supported; got x of dtype ", x.dtype()));
  }
  return d;
}

// The kernel's dtype: float64 stays; a half type stays where the GEMM seam reads it as it is (the
// weights dequantized into half panels, half products on oneDNN's kernels: on AMX several times
// float32's rate); the rest compute in float32.
Dtype compute_dtype(Dtype d) {
  if (d == float64) return float64;
  if ((d == bfloat16 || d == float16) && kernels::gemm_reads_half(d)) return d;
  return float32;
}
array as_compute(const array& a, Dtype d) { return astype(astype(a, d), compute_dtype(d)); }

}  // namespace

std::vector<array> quantize(const array& w, std::optional<int> group_size, std::optional<int> bits,
                            const std::string& mode, const std::optional<array>& global_scale, StreamOrDevice s) {
  OnStream on(s);
  const QMode m = parse_mode(mode, "quantize");
  const auto [gs, nbits] = params(m, group_size, bits);
  if (!is_floating_point(w.dtype())) {
    throw std::invalid_argument(msg("[quantize] only floating arrays can be quantized; got w of dtype ", w.dtype()));
  }
  if (w.ndim() < 2) {
    throw std::invalid_argument(msg("[quantize] w must have at least 2 dimensions; got shape ", shape_str(w.shape())));
  }
  check_params(m, gs, nbits, "quantize");
  if (w.shape(-1) % gs != 0) {
    throw std::invalid_argument(msg("[quantize] the last dimension of w ", shape_str(w.shape()),
                                    " must be divisible by the group size ", gs));
  }
  check_global_scale(m, global_scale, "quantize");
  Shape wq = w.shape(), ss = w.shape();
  wq.back() = int(int64_t(w.shape(-1)) * nbits / 32);
  ss.back() = w.shape(-1) / gs;
  auto prim = std::make_shared<Quantize>(gs, nbits, m);
  if (m == QMode::affine) return array::make_arrays({wq, ss, ss}, {uint32, w.dtype(), w.dtype()}, prim, {w});
  std::vector<array> in{w};
  if (global_scale) in.push_back(*global_scale);
  return array::make_arrays({wq, ss}, {uint32, uint8}, prim, std::move(in));
}

array dequantize(const array& w, const array& scales, const std::optional<array>& biases, std::optional<int> group_size,
                 std::optional<int> bits, const std::string& mode, const std::optional<array>& global_scale,
                 std::optional<Dtype> dtype, StreamOrDevice s) {
  OnStream on(s);
  const QMode m = parse_mode(mode, "dequantize");
  if (dtype && !is_floating_point(*dtype)) {
    throw std::invalid_argument(msg("[dequantize] the output dtype must be floating; got ", *dtype));
  }
  const Dtype sdt = scales_dtype(m, scales, biases, "dequantize");
  const auto [gs, nbits] = params(m, group_size, bits);
  if (w.dtype() != uint32) {
    throw std::invalid_argument(msg("[dequantize] the packed weights w must be uint32; got ", w.dtype()));
  }
  if (w.ndim() < 2) {
    throw std::invalid_argument(msg("[dequantize] w must have at least 2 dimensions; got shape ", shape_str(w.shape())));
  }
  check_params(m, gs, nbits, "dequantize");
  check_global_scale(m, global_scale, "dequantize");
  const bool same = scales.ndim() == w.ndim() && (!biases || biases->shape() == scales.shape()) &&
                    std::equal(w.shape().begin(), w.shape().end() - 1, scales.shape().begin());
  if (!same || int64_t(w.shape(-1)) * 32 / nbits != int64_t(scales.shape(-1)) * gs) {
    throw std::invalid_argument(msg("[dequantize] w ", shape_str(w.shape()), " and scales ", shape_str(scales.shape()),
                                    biases ? " / biases " + shape_str(biases->shape()) : std::string(),
                                    " do not match with group_size=", gs, " and bits=", nbits));
  }
  Shape out = w.shape();
  out.back() = int(int64_t(w.shape(-1)) * 32 / nbits);
  auto prim = std::make_shared<Dequantize>(gs, nbits, m);
  if (m == QMode::affine) {
    array r(out, sdt, prim, {w, astype(scales, sdt), astype(*biases, sdt)});
    return dtype && *dtype != sdt ? astype(r, *dtype) : r;
  }
  std::vector<array> in{w, scales};
  if (global_scale) in.push_back(reshape(*global_scale, {}));
  return array(out, dtype.value_or(sdt), prim, std::move(in));
}

array quantized_matmul(const array& x, const array& w, const array& scales, const std::optional<array>& biases,
                       bool transpose, std::optional<int> group_size, std::optional<int> bits,
                       const std::string& mode, StreamOrDevice stream) {
  OnStream on(stream);
  const char* op = "quantized_matmul";
  const QMode m = parse_mode(mode, op);
  const Dtype sdt = scales_dtype(m, scales, biases, op);
  const auto [gs, nbits] = params(m, group_size, bits);
  check_params(m, gs, nbits, op);
  const int outer = check_qmm_shapes(x, w, scales, biases, transpose, gs, nbits, op);
  const Dtype d = qmm_dtype(m, x, sdt, op);
  const bool affine = m == QMode::affine;
  std::vector<array> in{as_compute(x, d), w, affine ? as_compute(scales, d) : scales};
  if (affine) in.push_back(as_compute(*biases, d));
  if (x.ndim() > 2 && w.ndim() > 2) {  // broadcast the batch axes (MLX's broadcast_arrays over all but the last two)
    Shape batch(x.shape().begin(), x.shape().end() - 2);
    try {
      batch = broadcast_shapes(batch, Shape(w.shape().begin(), w.shape().end() - 2));
    } catch (const std::invalid_argument&) {
      throw std::invalid_argument(msg("[", op, "] the batch dimensions of x ", shape_str(x.shape()), " and w ",
                                      shape_str(w.shape()), " do not broadcast"));
    }
    for (auto& a : in) {
      Shape s = batch;
      s.push_back(a.shape(-2));
      s.push_back(a.shape(-1));
      a = broadcast_to(a, s);
    }
  } else if (w.ndim() > 2) {
    // x of 1 or 2 dimensions against a stack of matrices: x is broadcast to the stack.
    Shape s(w.shape().begin(), w.shape().end() - 2);
    s.push_back(x.ndim() > 1 ? x.shape(-2) : 1);
    s.push_back(x.shape(-1));
    in[0] = broadcast_to(x.ndim() > 1 ? in[0] : reshape(in[0], {1, x.shape(-1)}), s);
  }
  Shape out = in[0].shape();
  out.back() = outer;
  array r(out, compute_dtype(d), std::make_shared<QuantizedMatmul>(gs, nbits, m, transpose, false), std::move(in));
  if (x.ndim() == 1 && w.ndim() > 2) r = squeeze(r, -2);
  return r.dtype() == d ? r : astype(r, d);
}

array gather_qmm(const array& x, const array& w, const array& scales, const std::optional<array>& biases,
                 std::optional<array> lhs_indices, std::optional<array> rhs_indices, bool transpose,
                 std::optional<int> group_size, std::optional<int> bits, const std::string& mode,
                 bool /*sorted_indices*/, StreamOrDevice s) {
  OnStream on(s);
  if (!lhs_indices && !rhs_indices) {
    return quantized_matmul(x, w, scales, biases, transpose, group_size, bits, mode);
  }
  const char* op = "gather_qmm";
  const QMode m = parse_mode(mode, op);
  const Dtype sdt = scales_dtype(m, scales, biases, op);
  const auto [gs, nbits] = params(m, group_size, bits);
  check_params(m, gs, nbits, op);
  const int outer = check_qmm_shapes(x, w, scales, biases, transpose, gs, nbits, op);
  const Dtype d = qmm_dtype(m, x, sdt, op);
  if (x.ndim() < 2) {
    throw std::invalid_argument(msg("[", op, "] x must have at least 2 dimensions; got shape ", shape_str(x.shape())));
  }
  auto indices = [&](const std::optional<array>& given, const array& a, const char* which) {
    if (given) {
      if (!is_integral(given->dtype())) {
        throw std::invalid_argument(msg("[", op, "] ", which, " must have an integer dtype; got ", given->dtype()));
      }
      return astype(*given, int32);
    }
    Shape batch(a.shape().begin(), a.shape().end() - 2);
    return reshape(arange(0, int(batch_count(a))), batch);
  };
  array li = indices(lhs_indices, x, "lhs_indices"), ri = indices(rhs_indices, w, "rhs_indices");
  Shape ishape;
  try {
    ishape = broadcast_shapes(li.shape(), ri.shape());
  } catch (const std::invalid_argument&) {
    throw std::invalid_argument(msg("[", op, "] lhs_indices ", shape_str(li.shape()), " and rhs_indices ",
                                    shape_str(ri.shape()), " do not broadcast"));
  }
  li = broadcast_to(li, ishape);
  ri = broadcast_to(ri, ishape);
  const bool affine = m == QMode::affine;
  std::vector<array> in{as_compute(x, d), w, affine ? as_compute(scales, d) : scales};
  if (affine) in.push_back(as_compute(*biases, d));
  in.push_back(li);
  in.push_back(ri);
  Shape out = ishape;
  out.push_back(x.shape(-2));
  out.push_back(outer);
  array r(out, compute_dtype(d), std::make_shared<QuantizedMatmul>(gs, nbits, m, transpose, true), std::move(in));
  return r.dtype() == d ? r : astype(r, d);
}

array to_fp8(array x, StreamOrDevice s) {
  OnStream on(s);
  if (!is_floating_point(x.dtype())) {
    throw std::invalid_argument(msg("[to_fp8] only floating arrays are supported; got x of dtype ", x.dtype()));
  }
  return array(x.shape(), uint8, std::make_shared<ConvertFP8>(true), {x});
}

array from_fp8(array x, Dtype dtype, StreamOrDevice s) {
  OnStream on(s);
  if (x.dtype() != uint8) {
    throw std::invalid_argument(msg("[from_fp8] x must be uint8 E4M3 codes; got x of dtype ", x.dtype()));
  }
  if (!is_floating_point(dtype)) {
    throw std::invalid_argument(msg("[from_fp8] the dtype must be floating; got ", dtype));
  }
  return array(x.shape(), dtype, std::make_shared<ConvertFP8>(false), {x});
}

}  // namespace loom
