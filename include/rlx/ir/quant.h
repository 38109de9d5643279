// ggml block-quantization formats: the format table (ggml type ids, block sizes, bytes per
// block), exact scalar dequantizers and llama.cpp-style reference quantizers.
//
// A quantized weight [N, K] is stored as ggml lays out a tensor row by row: row n holds its
// K / block_size blocks contiguously, so the packed tensor is u8 [N, quant_row_bytes(f, K)].
// Every multi-byte field is little-endian; "f16" is an IEEE binary16 scale. Block layouts
// (byte offsets inside one block, in the order ggml's block_* structs declare them):
//
//   F32    1 elem,    4 B: the f32 itself.
//   F16    1 elem,    2 B: the f16 itself.
//   BF16   1 elem,    2 B: the upper half of an f32.
//   Q4_0  32 elems,  18 B: d f16 | qs[16]: elem j = low nibble of qs[j], elem j+16 = high
//                          nibble; value = d * (q - 8).
//   Q4_1  32 elems,  20 B: d f16 | m f16 | qs[16] as Q4_0; value = d * q + m.
//   Q5_0  32 elems,  22 B: d f16 | qh u32 | qs[16]: q = nibble | (bit j of qh) << 4;
//                          value = d * (q - 16).
//   Q5_1  32 elems,  24 B: d f16 | m f16 | qh u32 | qs[16]; value = d * q + m.
//   Q8_0  32 elems,  34 B: d f16 | qs[32] i8; value = d * q.
//   Q2_K 256 elems,  84 B: scales[16] (low nibble: scale, high: min, per 16 elems) | qs[64]
//                          (2 bits; elem e: byte 32*(e/128) + e%32, shift 2*((e%128)/32)) |
//                          d f16 | dmin f16; value = d*sc * q - dmin*m.
//   Q3_K 256 elems, 110 B: hmask[32] (bit e/32 of hmask[e%32]) | qs[64] (2 low bits, as Q2_K) |
//                          scales[12] (16 6-bit scales, biased by 32) | d f16;
//                          value = d * (sc - 32) * (q_low - (hbit ? 0 : 4)).
//   Q4_K 256 elems, 144 B: d f16 | dmin f16 | scales[12] (8 6-bit scales + 8 6-bit mins, one
//                          per 32 elems, packed as ggml's get_scale_min_k4) | qs[128] (elem
//                          64c + l: low nibble of qs[32c + l], 64c + 32 + l: high nibble);
//                          value = d*sc * q - dmin*m.
//   Q5_K 256 elems, 176 B: d f16 | dmin f16 | scales[12] as Q4_K | qh[32] (bit e/32 of
//                          qh[e%32] is the 5th bit) | qs[128] as Q4_K; value = d*sc*q - dmin*m.
//   Q6_K 256 elems, 210 B: ql[128] | qh[64] | scales[16] i8 | d f16: elem 128h + 32j + l has
//                          its low 4 bits in ql[64h + 32(j%2) + l] (low nibble for j < 2) and
//                          its high 2 bits at shift 2j of qh[32h + l]; value = d*sc * (q - 32),
//                          sc = scales[e/16].
//   Q8_K 256 elems, 292 B: d f32 | qs[256] i8 | bsums[16] i16 (sums of 16 qs); value = d * q.
//   IQ4_NL 32 elems, 18 B: d f16 | qs[16] as Q4_0, nibble indexes kvalues_iq4nl (-127 ... 113);
//                          value = d * kvalues[q].
//
// Source: ggml's ggml-common.h (block structs) and ggml-quants.c (dequantize_row_*,
// quantize_row_*_ref); the dequantizers are checked bit for bit against gguf-py's numpy
// dequantizers (tests/ir/gen_quant_ref.py).
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

namespace rlx {

/// A ggml storage format; the values are ggml's type ids (enum ggml_type, GGUF's tensor type
/// field), so a GGUF type id casts to it once quant_format_from_ggml_type accepts it.
enum class QuantFormat : uint8_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ5_0 = 6,
  kQ5_1 = 7,
  kQ8_0 = 8,
  kQ2_K = 10,
  kQ3_K = 11,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
  kQ8_K = 15,
  kIQ4_NL = 20,
  kBF16 = 30,
};

/// One row of the format table.
struct QuantFormatInfo {
  QuantFormat format;
  std::string_view name;    ///< ggml's name: "q4_K", "f16", "iq4_nl", ...
  int ggml_type;            ///< ggml type id (== static_cast<int>(format))
  int64_t block_size;       ///< elements per block
  int64_t bytes_per_block;  ///< bytes per block
  bool has_quantizer;       ///< quantize_row supports it (IQ4_NL does not: dequantize only)
};

/// Every format rlx knows, in ggml type id order.
std::span<const QuantFormatInfo> quant_formats();
/// The table row of `f`; throws rlx::Error for a value outside the table.
const QuantFormatInfo& quant_format_info(QuantFormat f);
/// The format of ggml type id `id`; throws rlx::Error naming the id and the supported ids.
QuantFormat quant_format_from_ggml_type(int id);
/// The format named `name` (ggml's names, case-insensitive: "q4_k", "Q8_0", "bf16");
/// throws rlx::Error naming the known formats.
QuantFormat quant_format_from_name(std::string_view name);

/// Bytes of one packed row of `n` elements; throws rlx::Error when n is negative or not a
/// multiple of the block size ("q4_K: a row of 100 elements is not a multiple of the block
/// size 256").
int64_t quant_row_bytes(QuantFormat f, int64_t n);

/// Decodes n elements (a whole number of blocks, read from quant_row_bytes(f, n) bytes of
/// `src`) into f32 `dst`, exactly as ggml's dequantize_row_* (same f32 operations in the same
/// order, so bit-equal). Throws rlx::Error when n is not a multiple of the block size.
void dequantize_row(QuantFormat f, const uint8_t* src, float* dst, int64_t n);
/// Checked form: `src` must hold exactly quant_row_bytes(f, dst.size()) bytes (else an
/// rlx::Error naming both sizes).
void dequantize(QuantFormat f, std::span<const uint8_t> src, std::span<float> dst);

/// Encodes n f32 elements (a whole number of blocks) into quant_row_bytes(f, n) bytes of
/// `dst` with llama.cpp's reference quantizers (quantize_row_*_ref): Q4_0 / Q4_1 / Q5_0 /
/// Q5_1 / Q8_0 / Q8_K round to nearest with ggml's scale choice (bit-equal to gguf-py's numpy
/// quantizers where it has one); Q2_K..Q6_K search scales as make_qkx2_quants /
/// make_qx_quants / make_q3_quants; F16 / BF16 round to nearest even (BF16 quiets NaNs as
/// ggml_compute_fp32_to_bf16). Throws rlx::Error when n is not a multiple of the block size or
/// the format has no quantizer (IQ4_NL).
void quantize_row(QuantFormat f, const float* src, uint8_t* dst, int64_t n);
/// Checked form: `dst` must hold exactly quant_row_bytes(f, src.size()) bytes.
void quantize(QuantFormat f, std::span<const float> src, std::span<uint8_t> dst);

/// quant_matmul's act_quant = "int8" rounding of activations (the int8 activations of ggml's
/// vec_dot kernels, with an f32 rather than an f16 scale): each 32-element block of x becomes
/// d * q with d = max|x| / 127 and q = x * (1 / d) rounded half to even (q = 0 where d is below
/// the smallest normal f32, 0 included), all in f32, into `out` (which may alias x). A block
/// holding a NaN or an Inf becomes all NaN (d is NaN, or Inf with 1 / d = 0 and 0 * Inf = NaN), so
/// non-finite activations reach the product as NaN. Throws rlx::Error when n is not a multiple
/// of 32.
void round_activations_int8(const float* x, float* out, int64_t n);

/// The 16 values an IQ4_NL nibble indexes (ggml's kvalues_iq4nl).
inline constexpr int8_t kIQ4NLValues[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                            1,    13,   25,  38,  53,  69,  89,  113};

}  // namespace rlx
