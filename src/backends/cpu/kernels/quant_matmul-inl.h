// The quantized matmul kernel body, compiled once per target: quant_matmul.cc includes it
// three times, inside a namespace of its own and under `#pragma GCC target`, with
// RLX_QM_LEVEL 0 (scalar), 1 (AVX2 + FMA + F16C) or 2 (AVX-512 VL/BW + VNNI). No include
// guard on purpose.
//
// Activations: every row of x as int8 q[K], one f32 scale d per 32 (Q8_0-style) and the sums
// s = d * sum q of each 32 and each 16 elements, the arrays padded with zeros to a whole
// number of 8-block groups (ActRows). Weight value k = scale * q[k] (+ an offset coefficient
// for the unsigned formats), a scale and coefficient per 32 elements or, for Q2_K / Q3_K /
// Q6_K, per 16, so
//   y = sum_sub-blocks scale * d * idot(q_w, q_x) + sum coef * s.

// NOLINTBEGIN(readability-function-size)

// Complete unrolling of the loops over a tile's rows and accumulators, which -O2 leaves as loops
// (the accumulators then live in memory instead of registers).
#ifndef RLX_QM_UNROLL
#define RLX_QM_UNROLL _Pragma("GCC unroll 16")
#endif

// ---- f16 scale loads
inline float ld_f16(const uint8_t* p) {
#if RLX_QM_LEVEL >= 1
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);
#else
  return f16_to_float(f16{uint16_t(p[0] | (p[1] << 8))});
#endif
}

inline uint32_t ld_u32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// ---- weight formats
// One struct per block format: kSub 32-element sub-blocks per block of kBytes bytes; kSigned: the
// sub-block bytes are the int8 weights (weight = scale * q), else u8 with weight = scale * q +
// coef, the coefficient times the activation sums accounting for the zero point or min; kPer16:
// the two 16-element halves of a sub-block have scales of their own. Every target has
// scales(b, sc, cf), the block's kScales scales and coefficients (per sub-block, or per 16
// elements with kPer16) decoded as floats, and elem(b, s, i), byte i of sub-block s (the scalar
// reference); the SIMD targets add sub(b, s), the same 32 bytes in a register, and
// group_scales(g, nsub, sc, cf), the scales and coefficients of the 8 sub-blocks of a group
// (8 blocks of a 32-element format, of which the first nsub exist, or one 256-element block)
// as vectors: lane j = sub-block j, or with kPer16 two vectors of 8 halves each.
#if RLX_QM_LEVEL >= 1
inline __m256i ld(const uint8_t* p) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}
inline void st(uint8_t* p, __m256i v) { _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), v); }
// Bits moved from bit `from` to bit `to` of every byte (16-bit shifts: the mask drops what
// crossed a byte boundary), masked with `mask` (given at `to`).
inline __m256i bits(__m256i v, int from, int to, int mask) {
  const __m256i m = _mm256_set1_epi8(char(mask));
  if (to >= from) return _mm256_and_si256(_mm256_slli_epi16(v, to - from), m);
  return _mm256_and_si256(_mm256_srli_epi16(v, from - to), m);
}
// 16 bytes of nibbles -> 32 bytes: low nibbles first, then high nibbles.
inline __m256i nibbles(const uint8_t* qs) {
  const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(v, 4), v), _mm256_set1_epi8(0x0F));
}
// Byte i = 0x10 where bit i of qh is set (Q5_0 / Q5_1 fifth bits).
inline __m256i fifth_bits(uint32_t qh) {
#if RLX_QM_LEVEL == 2
  return _mm256_maskz_mov_epi8(__mmask32(qh), _mm256_set1_epi8(0x10));
#else  // ggml's bytes_from_bits_32: byte i holds byte i / 8 of qh, all ones but bit i % 8
  const __m256i shuf = _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101,
                                         0x0000000000000000);
  __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32(int(qh)), shuf);
  v = _mm256_or_si256(v, _mm256_set1_epi64x(0x7fbfdfeff7fbfdfe));
  return _mm256_and_si256(_mm256_cmpeq_epi8(v, _mm256_set1_epi64x(-1)), _mm256_set1_epi8(0x10));
#endif
}
// The f16 pairs at the start of the first nsub of 8 blocks kStride bytes apart: lo = the first
// f16 of each block, hi = the second (0 in lanes from nsub on); with kEvenOdd the lanes hold
// blocks 0, 2, 4, 6, 1, 3, 5, 7 (the order of the paired GEMV's sums, kPairedAct). Scalar loads
// paired into 64-bit words on the integer pipes, then 4 vector ops: on Zen 4 a vpgatherdd of 8
// costs ~11 cycles of throughput, more than the integer dots of a block's row.
#if RLX_QM_LEVEL == 2
// The 18- and 20-byte formats (Q4_0, IQ4_NL, Q4_1) on AVX-512 BW: the group's words from bytes
// 0..63 and kSecond..kSecond + 63 (four 32-byte loads, masked past the first nsub blocks, which
// also suppresses faults there), the 16 f16 picked by two vpermt2w: ~9 ops instead of ~35.
template <int kStride, bool kEvenOdd>
struct F16PairWords {
  static_assert(kStride == 18 || kStride == 20);
  static constexpr int kSecond = kStride == 18 ? 64 : 80;
  static constexpr int block(int lane) {
    return kEvenOdd ? (lane < 4 ? 2 * lane : 2 * lane - 7) : lane;
  }
  // Word index (0..31 in bytes 0..63, 32..63 in bytes kSecond..) of f16 h (0, 1) of block b.
  static constexpr int word(int b, int h) {
    return b * kStride + 4 <= 64 ? b * kStride / 2 + h : 32 + (b * kStride - kSecond) / 2 + h;
  }
  // Output word t: f16 0 of the block of lane t (t < 8), else f16 1 of lane t - 8.
  static constexpr int source(int t) { return word(block(t % 8), t / 8); }
  struct Index {
    alignas(32) int16_t w[16];
  };
  static constexpr Index kIndex = [] {
    Index ix{};
    for (int t = 0; t < 16; ++t) ix.w[t] = int16_t(source(t) % 32);
    return ix;
  }();
  static constexpr __mmask16 kFirst = [] {
    int m = 0;
    for (int t = 0; t < 16; ++t) m |= source(t) < 32 ? 1 << t : 0;
    return __mmask16(m);
  }();
};
#endif
// The f16 pairs at p[0..7] (lane j from p[j], zero where p[j] is null): lo = the first f16 of
// each, hi = the second. Scalar loads paired into 64-bit words on the integer pipes (the words
// stay in registers: no array, whose stores a vector load could not forward from), then 4 vector
// ops.
__attribute__((always_inline)) inline void f16_pairs_at(const uint8_t* const* p, __m256& lo,
                                                        __m256& hi) {
  auto pair = [&](int j) {
    const uint64_t a = p[j] != nullptr ? ld_u32(p[j]) : 0;
    const uint64_t b = p[j + 1] != nullptr ? ld_u32(p[j + 1]) : 0;
    return int64_t(a | b << 32);
  };
  const __m256i v = _mm256_setr_epi64x(pair(0), pair(2), pair(4), pair(6));
  // lane 0: lo 0..3 hi 0..3 | lane 1: lo 4..7 hi 4..7, then lo 0..7 | hi 0..7
  __m256i r =
      _mm256_packus_epi32(_mm256_and_si256(v, _mm256_set1_epi32(0xFFFF)), _mm256_srli_epi32(v, 16));
  r = _mm256_permute4x64_epi64(r, 0xD8);
  lo = _mm256_cvtph_ps(_mm256_castsi256_si128(r));
  hi = _mm256_cvtph_ps(_mm256_extracti128_si256(r, 1));
}
// (always inlined: a group's nsub is then most often a constant, and the masks with it)
template <int kStride, bool kEvenOdd = false>
__attribute__((always_inline)) inline void gather_f16_pairs(const uint8_t* g, int nsub, __m256& lo,
                                                            __m256& hi) {
#if RLX_QM_LEVEL == 2
  if constexpr (kStride == 18 || kStride == 20) {
    using P = F16PairWords<kStride, kEvenOdd>;
    const int bytes = nsub * kStride;
    // the 32-byte vector at byte offset `at` of the group, words past `bytes` zero
    auto load = [&](int at) {
      const int words = std::clamp((bytes - at) / 2, 0, 16);
      return _mm256_maskz_loadu_epi16(__mmask16((1u << words) - 1), g + at);
    };
    const __m256i ix = _mm256_load_si256(reinterpret_cast<const __m256i*>(P::kIndex.w));
    const __m256i r =
        _mm256_or_si256(_mm256_maskz_permutex2var_epi16(P::kFirst, load(0), ix, load(32)),
                        _mm256_maskz_permutex2var_epi16(__mmask16(~P::kFirst), load(P::kSecond), ix,
                                                        load(P::kSecond + 32)));
    lo = _mm256_cvtph_ps(_mm256_castsi256_si128(r));
    hi = _mm256_cvtph_ps(_mm256_extracti128_si256(r, 1));
    return;
  }
#endif
  const uint8_t* p[8];
  for (int lane = 0; lane < 8; ++lane) {
    const int b = kEvenOdd ? (lane < 4 ? 2 * lane : 2 * lane - 7) : lane;
    p[lane] = b < nsub ? g + b * kStride : nullptr;
  }
  f16_pairs_at(p, lo, hi);
}
// 8 bytes (byte j = an integer field of sub-block j) as f32 lanes.
inline __m256 bytes_to_ps(uint64_t v) {
  return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128(int64_t(v))));
}
#endif
inline uint8_t nibble(const uint8_t* qs, int i) { return i < 16 ? qs[i] & 0xF : qs[i - 16] >> 4; }

// Q4_0 / Q4_1 / Q5_0 / Q5_1: d f16 | m f16 (kMin) | qh u32 (kFifth) | qs[16] nibbles;
// weight = d * q + m, or without a min d * (q - 8) (Q4_0) / d * (q - 16) (Q5_0).
template <bool kMin, bool kFifth>
struct FmtQ45 {
  static constexpr int kQh = kMin ? 4 : 2, kQs = kQh + (kFifth ? 4 : 0);
  static constexpr int kSub = 1, kBytes = kQs + 16;
  static constexpr bool kSigned = false, kPer16 = false;
  static constexpr float kZero = kFifth ? 16.0f : 8.0f;  // the zero point without a min
  static void scales(const uint8_t* b, float* sc, float* cf) {
    sc[0] = ld_f16(b);
    cf[0] = kMin ? ld_f16(b + 2) : -kZero * sc[0];
  }
  static uint8_t elem(const uint8_t* b, int, int i) {
    const uint8_t q = nibble(b + kQs, i);
    return kFifth ? uint8_t(q | (((ld_u32(b + kQh) >> i) & 1) << 4)) : q;
  }
#if RLX_QM_LEVEL >= 1
  static __m256i sub(const uint8_t* b, int) {
    const __m256i q = nibbles(b + kQs);
    if constexpr (kFifth) return _mm256_or_si256(q, fifth_bits(ld_u32(b + kQh)));
    return q;
  }
  template <bool kEvenOdd = false>
  __attribute__((always_inline)) static void group_scales(const uint8_t* g, int nsub, __m256* sc,
                                                          __m256* cf) {
    __m256 d, m;
    gather_f16_pairs<kBytes, kEvenOdd>(g, nsub, d, m);
    sc[0] = d;
    cf[0] = coefs(d, m);
  }
  // The offset coefficients of blocks with scales d and second f16 m (the min, if any).
  static __m256 coefs(__m256 d, __m256 m) {
    return kMin ? m : _mm256_mul_ps(_mm256_set1_ps(-kZero), d);
  }
#endif
#if RLX_QM_LEVEL == 2
  // The GEMV reads Q4_0 / Q4_1 high nibbles in place (byte & 0xF0 = 16 q: one AND instead of a
  // shift, an insert and an AND): the dot's lanes 4..7 (elements 16..31) then hold 16 times
  // their value (vpdpbusd does not saturate; vpmaddubsw would), which it undoes (kHighX16).
  static constexpr bool kHighX16 = !kFifth;
  // Q4_0 / Q4_1 run the paired GEMV for one activation row (paired_gemv_chunk).
  static constexpr bool kPairedGemv = !kFifth;
  // Without a min the zero point is an integer: the paired GEMV subtracts kZero times the
  // activation block sums from the integer dots (exact) instead of adding f32 offset terms.
  static constexpr bool kIntZero = !kMin;
  static __m256i gemv_sub(const uint8_t* b, int s) {
    if constexpr (kFifth) return sub(b, s);
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + kQs));
    return _mm256_and_si256(
        _mm256_broadcastsi128_si256(v),
        _mm256_set_epi64x(int64_t(0xF0F0F0F0F0F0F0F0), int64_t(0xF0F0F0F0F0F0F0F0),
                          0x0F0F0F0F0F0F0F0F, 0x0F0F0F0F0F0F0F0F));
  }
#endif
};
using FmtQ4_0 = FmtQ45<false, false>;
using FmtQ4_1 = FmtQ45<true, false>;
using FmtQ5_0 = FmtQ45<false, true>;
using FmtQ5_1 = FmtQ45<true, true>;
// Q8_0 (d f16 | qs[32] i8) and IQ4_NL (d f16 | qs[16] nibbles indexing kIQ4NLValues): signed,
// one f16 scale per block.
template <int kBlockBytes>
struct FmtSigned32 {
  static constexpr int kSub = 1, kBytes = kBlockBytes;
  static constexpr bool kSigned = true, kPer16 = false;
  static void scales(const uint8_t* b, float* sc, float* cf) {
    sc[0] = ld_f16(b);
    cf[0] = 0;
  }
  static uint8_t elem(const uint8_t* b, int, int i) {
    if constexpr (kBytes == 34) return b[2 + i];
    return uint8_t(kIQ4NLValues[nibble(b + 2, i)]);
  }
#if RLX_QM_LEVEL >= 1
  static __m256i sub(const uint8_t* b, int) {
    if constexpr (kBytes == 34) return ld(b + 2);
    // vpshufb: the nibbles index the 16 values
    const __m128i t = _mm_loadu_si128(reinterpret_cast<const __m128i*>(kIQ4NLValues));
    return _mm256_shuffle_epi8(_mm256_broadcastsi128_si256(t), nibbles(b + 2));
  }
  static void group_scales(const uint8_t* g, int nsub, __m256* sc, __m256*) {
    __m256 unused;
    gather_f16_pairs<kBytes>(g, nsub, sc[0], unused);
  }
#endif
};
using FmtQ8_0 = FmtSigned32<34>;
using FmtIQ4_NL = FmtSigned32<18>;
// Q2_K / Q3_K low bits: sub-block 4h + j is bits 2j..2j+1 of qs[32h ...].
inline uint8_t two_bits(const uint8_t* qs, int s, int i) {
  return (qs[32 * (s / 4) + i] >> (2 * (s % 4))) & 3;
}
struct FmtQ2_K {
  static constexpr int kSub = 8, kBytes = 84;
  static constexpr bool kSigned = false, kPer16 = true;
  static void scales(const uint8_t* b, float* sc, float* cf) {
    const float d = ld_f16(b + 80), dmin = ld_f16(b + 82);
    for (int g = 0; g < 16; ++g) {
      sc[g] = d * float(b[g] & 0xF);
      cf[g] = -(dmin * float(b[g] >> 4));
    }
  }
  static uint8_t elem(const uint8_t* b, int s, int i) { return two_bits(b + 16, s, i); }
#if RLX_QM_LEVEL >= 1
  static __m256i sub(const uint8_t* b, int s) {
    return bits(ld(b + 16 + 32 * (s / 4)), 2 * (s % 4), 0, 3);
  }
  static void group_scales(const uint8_t* b, int, __m256* sc, __m256* cf) {
    const __m256 d = _mm256_set1_ps(ld_f16(b + 80)), dmin = _mm256_set1_ps(ld_f16(b + 82));
    for (int h = 0; h < 2; ++h) {
      uint64_t v;
      std::memcpy(&v, b + 8 * h, 8);
      sc[h] = _mm256_mul_ps(d, bytes_to_ps(v & 0x0F0F0F0F0F0F0F0F));
      cf[h] = _mm256_mul_ps(_mm256_set1_ps(-1.0f),
                            _mm256_mul_ps(dmin, bytes_to_ps((v >> 4) & 0x0F0F0F0F0F0F0F0F)));
    }
  }
#endif
};
// Q3_K: the 16 6-bit scales (ggml's kmask unpacking of scales[12]: low nibbles, then 2 high
// bits), biased by 32, as bytes: scales 0..7 in lo, 8..15 in hi (in registers: no byte array,
// whose stores a vector load could not forward from).
inline void q3k_scale_bytes(const uint8_t* b, uint64_t& lo, uint64_t& hi) {
  const uint32_t a0 = ld_u32(b + 96), a1 = ld_u32(b + 100), tmp = ld_u32(b + 104);
  const uint32_t m4 = 0x0f0f0f0f, m2 = 0x03030303;
  lo = ((a0 & m4) | ((tmp & m2) << 4)) | uint64_t((a1 & m4) | (((tmp >> 2) & m2) << 4)) << 32;
  hi = (((a0 >> 4) & m4) | (((tmp >> 4) & m2) << 4)) |
       uint64_t(((a1 >> 4) & m4) | (((tmp >> 6) & m2) << 4)) << 32;
}
struct FmtQ3_K {
  static constexpr int kSub = 8, kBytes = 110;
  static constexpr bool kSigned = false, kPer16 = true;
  static void scales(const uint8_t* b, float* sc, float* cf) {
    const float d = ld_f16(b + 108);
    uint64_t v[2];
    q3k_scale_bytes(b, v[0], v[1]);
    for (int g = 0; g < 16; ++g) {
      sc[g] = d * float(int((v[g / 8] >> 8 * (g % 8)) & 0xFF) - 32);
      cf[g] = -4 * sc[g];
    }
  }
  static uint8_t elem(const uint8_t* b, int s, int i) {
    return uint8_t(two_bits(b + 32, s, i) | (((b[i] >> s) & 1) << 2));
  }
#if RLX_QM_LEVEL >= 1
  static __m256i sub(const uint8_t* b, int s) {
    return _mm256_or_si256(bits(ld(b + 32 + 32 * (s / 4)), 2 * (s % 4), 0, 3),
                           bits(ld(b), s, 2, 4));
  }
  static void group_scales(const uint8_t* b, int, __m256* sc, __m256* cf) {
    const __m256 d = _mm256_set1_ps(ld_f16(b + 108));
    uint64_t v[2];
    q3k_scale_bytes(b, v[0], v[1]);
    for (int h = 0; h < 2; ++h) {
      sc[h] = _mm256_mul_ps(d, _mm256_sub_ps(bytes_to_ps(v[h]), _mm256_set1_ps(32.0f)));
      cf[h] = _mm256_mul_ps(_mm256_set1_ps(-4.0f), sc[h]);
    }
  }
#endif
};
// Q4_K / Q5_K: the 8 6-bit scales and 8 6-bit mins of scales[12], one per sub-block, as bytes
// (ggml's get_scale_min_k4 on 32-bit words: j < 4 the low 6 bits of bytes j / j + 4; j >= 4 a
// nibble of byte j + 4 and the top 2 bits of byte j - 4 / j).
inline void k4_scale_min_bytes(const uint8_t* s, uint64_t& sc, uint64_t& mn) {
  uint32_t u[3];
  std::memcpy(u, s, 12);
  const uint32_t m6 = 0x3f3f3f3f, m4 = 0x0f0f0f0f, m2 = 0x03030303;
  sc = (u[0] & m6) | uint64_t((u[2] & m4) | (((u[0] >> 6) & m2) << 4)) << 32;
  mn = (u[1] & m6) | uint64_t(((u[2] >> 4) & m4) | (((u[1] >> 6) & m2) << 4)) << 32;
}
// Q4_K / Q5_K low bits: sub-block 2c + h is nibble h of qs[32c ...].
inline uint8_t k4_nibble(const uint8_t* qs, int s, int i) {
  return (qs[32 * (s / 2) + i] >> (4 * (s % 2))) & 0xF;
}
// Q4_K / Q5_K: d f16 | dmin f16 | scales[12] | qh[32] (kFifth) | qs[128].
template <bool kFifth>
struct FmtQ45_K {
  static constexpr int kQs = kFifth ? 48 : 16;
  static constexpr int kSub = 8, kBytes = kQs + 128;
  static constexpr bool kSigned = false, kPer16 = false;
  static void scales(const uint8_t* b, float* sc, float* cf) {
    const float d = ld_f16(b), dmin = ld_f16(b + 2);
    uint64_t s, m;
    k4_scale_min_bytes(b + 4, s, m);
    for (int j = 0; j < 8; ++j) {
      sc[j] = d * float((s >> 8 * j) & 0xFF);
      cf[j] = -(dmin * float((m >> 8 * j) & 0xFF));
    }
  }
  static uint8_t elem(const uint8_t* b, int s, int i) {
    const uint8_t q = k4_nibble(b + kQs, s, i);
    return kFifth ? uint8_t(q | (((b[16 + i] >> s) & 1) << 4)) : q;
  }
#if RLX_QM_LEVEL >= 1
  static __m256i sub(const uint8_t* b, int s) {
    const __m256i q = bits(ld(b + kQs + 32 * (s / 2)), 4 * (s % 2), 0, 0xF);
    if constexpr (kFifth) return _mm256_or_si256(q, bits(ld(b + 16), s, 4, 0x10));
    return q;
  }
  static void group_scales(const uint8_t* b, int, __m256* sc, __m256* cf) {
    uint64_t s, m;
    k4_scale_min_bytes(b + 4, s, m);
    sc[0] = _mm256_mul_ps(_mm256_set1_ps(ld_f16(b)), bytes_to_ps(s));
    cf[0] = _mm256_mul_ps(_mm256_set1_ps(-1.0f),
                          _mm256_mul_ps(_mm256_set1_ps(ld_f16(b + 2)), bytes_to_ps(m)));
  }
#endif
#if RLX_QM_LEVEL == 2
  // Q4_K on VNNI: the GEMV reads the high nibbles in place (byte & 0xF0 = 16 q, no shift) and
  // scales those sub-blocks by 1/16 (exact: the products and sums are those of q, scaled by 16).
  static __m256i gemv_sub(const uint8_t* b, int s) {
    if constexpr (kFifth) return sub(b, s);
    return _mm256_and_si256(ld(b + kQs + 32 * (s / 2)),
                            _mm256_set1_epi8(char(s % 2 ? 0xF0 : 0x0F)));
  }
  static void gemv_group_scales(const uint8_t* b, int nsub, __m256* sc, __m256* cf) {
    group_scales(b, nsub, sc, cf);
    if constexpr (!kFifth)
      sc[0] = _mm256_mul_ps(sc[0], _mm256_setr_ps(1, 0.0625f, 1, 0.0625f, 1, 0.0625f, 1, 0.0625f));
  }
#endif
};
using FmtQ4_K = FmtQ45_K<false>;
using FmtQ5_K = FmtQ45_K<true>;
struct FmtQ6_K {
  static constexpr int kSub = 8, kBytes = 210;
  static constexpr bool kSigned = false, kPer16 = true;
  static void scales(const uint8_t* b, float* sc, float* cf) {
    const float d = ld_f16(b + 208);
    for (int g = 0; g < 16; ++g) {
      sc[g] = d * float(int8_t(b[192 + g]));
      cf[g] = -32 * sc[g];
    }
  }
  // Sub-block 4h + j: low 4 bits nibble j / 2 of ql[64h + 32(j % 2) ...], high 2 bits at
  // shift 2j of qh[32h ...].
  static uint8_t elem(const uint8_t* b, int s, int i) {
    const int h = s / 4, j = s % 4;
    const uint8_t lo = (b[64 * h + 32 * (j % 2) + i] >> (4 * (j / 2))) & 0xF;
    return uint8_t(lo | (((b[128 + 32 * h + i] >> (2 * j)) & 3) << 4));
  }
#if RLX_QM_LEVEL >= 1
  static __m256i sub(const uint8_t* b, int s) {
    const int h = s / 4, j = s % 4;
    return _mm256_or_si256(bits(ld(b + 64 * h + 32 * (j % 2)), 4 * (j / 2), 0, 0xF),
                           bits(ld(b + 128 + 32 * h), 2 * j, 4, 0x30));
  }
  static void group_scales(const uint8_t* b, int, __m256* sc, __m256* cf) {
    const __m256 d = _mm256_set1_ps(ld_f16(b + 208));
    for (int h = 0; h < 2; ++h) {
      const __m128i v = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(b + 192 + 8 * h));
      sc[h] = _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v)));
      cf[h] = _mm256_mul_ps(_mm256_set1_ps(-32.0f), sc[h]);
    }
  }
#endif
};
struct FmtQ8_K {
  static constexpr int kSub = 8, kBytes = 292;
  static constexpr bool kSigned = true, kPer16 = false;
  static void scales(const uint8_t* b, float* sc, float* cf) {
    float d;
    std::memcpy(&d, b, 4);
    std::fill_n(sc, 8, d);
    std::fill_n(cf, 8, 0.0f);
  }
  static uint8_t elem(const uint8_t* b, int s, int i) { return b[4 + 32 * s + i]; }
#if RLX_QM_LEVEL >= 1
  static __m256i sub(const uint8_t* b, int s) { return ld(b + 4 + 32 * s); }
  static void group_scales(const uint8_t* b, int, __m256* sc, __m256*) {
    float d;
    std::memcpy(&d, b, 4);
    sc[0] = _mm256_set1_ps(d);
  }
#endif
};
// Scales and coefficients per block of format F (per 16 elements with kPer16, else per 32).
template <class F>
inline constexpr int kScales = F::kSub*(F::kPer16 ? 2 : 1);
// Index of the scale of half h of sub-block s in F::scales' arrays.
template <class F>
inline constexpr int scale_index(int s, int h) {
  return F::kPer16 ? 2 * s + h : s;
}

// Calls fn.template operator()<Fmt>() for block format f (a float format: no call).
template <class Fn>
inline void with_block_format(QuantFormat f, Fn&& fn) {
  switch (f) {
    case QuantFormat::kQ4_0:
      return fn.template operator()<FmtQ4_0>();
    case QuantFormat::kQ4_1:
      return fn.template operator()<FmtQ4_1>();
    case QuantFormat::kQ5_0:
      return fn.template operator()<FmtQ5_0>();
    case QuantFormat::kQ5_1:
      return fn.template operator()<FmtQ5_1>();
    case QuantFormat::kQ8_0:
      return fn.template operator()<FmtQ8_0>();
    case QuantFormat::kQ2_K:
      return fn.template operator()<FmtQ2_K>();
    case QuantFormat::kQ3_K:
      return fn.template operator()<FmtQ3_K>();
    case QuantFormat::kQ4_K:
      return fn.template operator()<FmtQ4_K>();
    case QuantFormat::kQ5_K:
      return fn.template operator()<FmtQ5_K>();
    case QuantFormat::kQ6_K:
      return fn.template operator()<FmtQ6_K>();
    case QuantFormat::kQ8_K:
      return fn.template operator()<FmtQ8_K>();
    case QuantFormat::kIQ4_NL:
      return fn.template operator()<FmtIQ4_NL>();
    default:
      return;  // float formats take the float paths
  }
}

// A weight row of K elements into the panel row (q, sc, cf) of the GEMM path: bytes, and an f32
// scale and offset coefficient per 16 elements.
template <class F>
inline void unpack_row(const uint8_t* w, int64_t K, uint8_t* q, float* sc, float* cf) {
  constexpr int64_t kBlock = 32 * F::kSub;
  float bs[kScales<F>], bc[kScales<F>];
  for (int64_t b = 0; b < K / kBlock; ++b) {
    const uint8_t* blk = w + b * F::kBytes;
    F::scales(blk, bs, bc);
    for (int s = 0; s < F::kSub; ++s) {
      for (int h = 0; h < 2; ++h) {
        sc[(b * F::kSub + s) * 2 + h] = bs[scale_index<F>(s, h)];
        cf[(b * F::kSub + s) * 2 + h] = bc[scale_index<F>(s, h)];
      }
      uint8_t* out = q + b * kBlock + 32 * s;
#if RLX_QM_LEVEL >= 1
      st(out, F::sub(blk, s));
#else
      for (int i = 0; i < 32; ++i) out[i] = F::elem(blk, s, i);
#endif
    }
  }
}

// `rows` weight rows of K elements to f32 (dequant_sgemm's panels): weight = scale * q (+ coef
// for the unsigned formats), per 16 or 32 elements.
template <class F>
inline void dequant_rows(const uint8_t* w, int64_t rows, int64_t K, float* out) {
  constexpr int64_t kBlock = 32 * F::kSub;
  const int64_t row_bytes = K / kBlock * F::kBytes;
  alignas(32) uint8_t q[32];
  float sc[kScales<F>], cf[kScales<F>];
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t b = 0; b < K / kBlock; ++b) {
      const uint8_t* blk = w + r * row_bytes + b * F::kBytes;
      F::scales(blk, sc, cf);
      for (int s = 0; s < F::kSub; ++s) {
        float* o = out + r * K + b * kBlock + 32 * s;
#if RLX_QM_LEVEL >= 1
        st(q, F::sub(blk, s));
        for (int j = 0; j < 4; ++j) {
          const __m128i b8 = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(q + 8 * j));
          const __m256 v =
              _mm256_cvtepi32_ps(F::kSigned ? _mm256_cvtepi8_epi32(b8) : _mm256_cvtepu8_epi32(b8));
          const int g = scale_index<F>(s, j / 2);
          const __m256 a = _mm256_set1_ps(sc[g]);
          _mm256_storeu_ps(o + 8 * j, F::kSigned ? _mm256_mul_ps(a, v)
                                                 : _mm256_fmadd_ps(a, v, _mm256_set1_ps(cf[g])));
        }
#else
        for (int i = 0; i < 32; ++i) q[i] = F::elem(blk, s, i);
        for (int i = 0; i < 32; ++i) {
          const int g = scale_index<F>(s, i / 16);
          o[i] = F::kSigned ? sc[g] * float(int8_t(q[i])) : std::fma(sc[g], float(q[i]), cf[g]);
        }
#endif
      }
    }
  }
}

// ---- f32 helpers
#if RLX_QM_LEVEL >= 1
inline float hsum_ps(__m256 v) {
  __m128 r = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  r = _mm_add_ps(r, _mm_movehl_ps(r, r));
  r = _mm_add_ss(r, _mm_movehdup_ps(r));
  return _mm_cvtss_f32(r);
}
inline int hsum_epi32(__m256i x) {
  __m128i r = _mm_add_epi32(_mm256_castsi256_si128(x), _mm256_extracti128_si256(x, 1));
  r = _mm_add_epi32(r, _mm_shuffle_epi32(r, 0x4E));
  r = _mm_add_epi32(r, _mm_shuffle_epi32(r, 0xB1));
  return _mm_cvtsi128_si32(r);
}
#endif

// f32 dot product (the GEMM path's offset terms, float weight formats there).
inline float dot_f32(const float* a, const float* b, int64_t n) {
#if RLX_QM_LEVEL >= 1
  __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
    s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), s1);
  }
  for (; i + 8 <= n; i += 8)
    s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
  float s = hsum_ps(_mm256_add_ps(s0, s1));
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
#else
  float s = 0;
  for (int64_t i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
#endif
}

// ---- activation quantization
// Quantized activations of all M rows (shared by the threads): row m's q at m * K, its per-32
// scales d and sums s32 at m * nb, its per-16 sums s16 at 2 m nb, with nb = K / 32 rounded up to
// a whole 8-block group and the padding zero (the GEMV reads whole groups of scales and sums).
// thread_local in matmul, so the buffers only grow and a call allocates nothing once they are
// large enough.
struct ActRows {
  int64_t K = 0, nb = 0;
  std::vector<int8_t> q;
  std::vector<float> d, s32, s16;
  std::vector<int32_t> u8_bias;  // -128 * sum q per 32 (the panel GEMM's signed formats)
};

// One row of K (a multiple of 32) into q, d, s32 and s16 (no padding written).
inline void quantize_act_row(const float* x, int64_t K, int8_t* q, float* d, float* s32, float* s16,
                             int32_t* u8_bias) {
  for (int64_t b = 0; b < K / 32; ++b) {
    const float* xb = x + 32 * b;
    float db;
    int sum[2];
#if RLX_QM_LEVEL >= 1
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 v[4];
    __m256 amax = _mm256_setzero_ps(), nan = _mm256_setzero_ps();
    for (int i = 0; i < 4; ++i) {
      v[i] = _mm256_loadu_ps(xb + 8 * i);
      amax = _mm256_max_ps(amax, _mm256_andnot_ps(sign, v[i]));  // drops NaNs: flagged apart
      nan = _mm256_or_ps(nan, _mm256_cmp_ps(v[i], v[i], _CMP_UNORD_Q));
    }
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(amax), _mm256_extractf128_ps(amax, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
    // A NaN makes the block's scale NaN, so the row's outputs are NaN (an Inf gives scale Inf,
    // q = 0 and Inf * 0 = NaN): non-finite input never turns into finite garbage.
    db = _mm256_movemask_ps(nan) != 0 || std::isinf(_mm_cvtss_f32(m4))
             ? std::numeric_limits<float>::quiet_NaN()
             : _mm_cvtss_f32(m4) / 127.0f;
    // A block below the smallest normal scale rounds to 0 (1 / d would overflow to Inf).
    const float id = db >= std::numeric_limits<float>::min() ? 1.0f / db : 0.0f;
    __m256i qi[4];
    for (int i = 0; i < 4; ++i)  // round to nearest even (MXCSR default), as nearbyint
      qi[i] = _mm256_cvtps_epi32(_mm256_mul_ps(v[i], _mm256_set1_ps(id)));
    sum[0] = hsum_epi32(_mm256_add_epi32(qi[0], qi[1]));
    sum[1] = hsum_epi32(_mm256_add_epi32(qi[2], qi[3]));
    const __m256i p01 = _mm256_packs_epi32(qi[0], qi[1]), p23 = _mm256_packs_epi32(qi[2], qi[3]);
    __m256i p = _mm256_packs_epi16(p01, p23);
    p = _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + 32 * b), p);
#else
    float am = 0;
    bool nan = false;
    for (int i = 0; i < 32; ++i) {
      am = std::max(am, std::fabs(xb[i]));
      nan = nan || std::isnan(xb[i]);
    }
    db = nan || std::isinf(am) ? std::numeric_limits<float>::quiet_NaN() : am / 127.0f;
    const float id = db >= std::numeric_limits<float>::min() ? 1.0f / db : 0.0f;
    sum[0] = sum[1] = 0;
    for (int i = 0; i < 32; ++i) {
      const int v = std::isnan(db) ? 0 : int(std::nearbyint(xb[i] * id));  // NaN: no int cast
      q[32 * b + i] = int8_t(v);
      sum[i / 16] += v;
    }
#endif
    if (std::isnan(db)) {  // a non-finite block: q = 0 (no int overflow); d = NaN makes it NaN
      std::memset(q + 32 * b, 0, 32);
      sum[0] = sum[1] = 0;
    }
    d[b] = db;
    u8_bias[b] = -128 * (sum[0] + sum[1]);
    s32[b] = db * float(sum[0] + sum[1]);
    s16[2 * b] = db * float(sum[0]);
    s16[2 * b + 1] = db * float(sum[1]);
  }
}

// Quantizes the M rows of x into act (rows in parallel).
inline void quantize_activations(const float* x, int64_t M, int64_t K, ActRows& act) {
  act.K = K;
  act.nb = (K / 32 + 7) / 8 * 8;
  act.q.resize(size_t(M * K));
  for (auto* v : {&act.d, &act.s32}) v->assign(size_t(M * act.nb), 0.0f);
  act.s16.assign(size_t(2 * M * act.nb), 0.0f);
  act.u8_bias.assign(size_t(M * act.nb), 0);
  parallel_for(0, M, 8, [&](int64_t b, int64_t e) {
    for (int64_t m = b; m < e; ++m)
      quantize_act_row(x + m * K, K, act.q.data() + m * K, act.d.data() + m * act.nb,
                       act.s32.data() + m * act.nb, act.s16.data() + 2 * m * act.nb,
                       act.u8_bias.data() + m * act.nb);
  });
}

// Row m of act as the kernels read it.
struct ActRow {
  const int8_t* q;
  const float *d, *s32, *s16;
  const int32_t* u8_bias;
};
inline ActRow act_row(const ActRows& act, int64_t m) {
  return {act.q.data() + m * act.K, act.d.data() + m * act.nb, act.s32.data() + m * act.nb,
          act.s16.data() + 2 * m * act.nb, act.u8_bias.data() + m * act.nb};
}

// Calls fn.template operator()<MR>(m0, rows) for each group of up to 4 activation rows from m0,
// m0 = m_begin, m_begin + 4, ... below M (rows past M repeat the last row).
template <class Fn>
inline void row_groups(const ActRows& act, int64_t M, Fn&& fn, int64_t m_begin = 0) {
  for (int64_t m0 = m_begin; m0 < M; m0 += 4) {
    const int mr = int(std::min<int64_t>(4, M - m0));
    ActRow rows[4];
    for (int m = 0; m < 4; ++m) rows[m] = act_row(act, m0 + std::min(m, mr - 1));
    switch (mr) {
      case 1:
        fn.template operator()<1>(m0, rows);
        break;
      case 2:
        fn.template operator()<2>(m0, rows);
        break;
      case 3:
        fn.template operator()<3>(m0, rows);
        break;
      default:
        fn.template operator()<4>(m0, rows);
        break;
    }
  }
}

// ---- GEMM path: the integer micro-kernel, MR activation rows x kNR panel rows
#if RLX_QM_LEVEL >= 1
inline __m256i dot_u8s8(__m256i u, __m256i s) {
#if RLX_QM_LEVEL == 2
  return _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s);
#else
  return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
#endif
}
// Activation rows up to which the SIMD targets take the GEMV path.
inline constexpr int64_t kGemvRows = 8;
#if RLX_QM_LEVEL == 2
inline constexpr int kNR = 4;  // 32 vector registers: 4 x 4 accumulators
#else
inline constexpr int kNR = 2;  // 16 vector registers: 4 x 2 accumulators
#endif

template <int MR, bool kSigned>
inline void int_tile(const uint8_t* const* wq, const float* const* wsc, const ActRow* a,
                     int64_t nsub, float out[4][4]) {
  __m256 acc[MR][kNR];
  RLX_QM_UNROLL
  for (int m = 0; m < MR; ++m) RLX_QM_UNROLL
  for (int n = 0; n < kNR; ++n) acc[m][n] = _mm256_setzero_ps();
  for (int64_t j = 0; j < nsub; ++j) {
    __m256i w[kNR];
    __m256 sv[kNR];
    RLX_QM_UNROLL
    for (int n = 0; n < kNR; ++n) {
      w[n] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wq[n] + 32 * j));
      sv[n] = _mm256_set_m128(_mm_set1_ps(wsc[n][2 * j + 1]), _mm_set1_ps(wsc[n][2 * j]));
    }
    RLX_QM_UNROLL
    for (int m = 0; m < MR; ++m) {
      const __m256i av = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a[m].q + 32 * j));
      const __m256 da = _mm256_set1_ps(a[m].d[j]);
      RLX_QM_UNROLL
      for (int n = 0; n < kNR; ++n) {
        __m256i dot;
        if constexpr (kSigned) {
          dot = dot_u8s8(_mm256_sign_epi8(w[n], w[n]), _mm256_sign_epi8(av, w[n]));
        } else {
          dot = dot_u8s8(w[n], av);
        }
        acc[m][n] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_mul_ps(sv[n], da), acc[m][n]);
      }
    }
  }
  RLX_QM_UNROLL
  for (int m = 0; m < MR; ++m) RLX_QM_UNROLL
  for (int n = 0; n < kNR; ++n) out[m][n] = hsum_ps(acc[m][n]);
}
#else
inline constexpr int kNR = 2;

template <int MR, bool kSigned>
inline void int_tile(const uint8_t* const* wq, const float* const* wsc, const ActRow* a,
                     int64_t nsub, float out[4][4]) {
  RLX_QM_UNROLL
  for (int m = 0; m < MR; ++m) RLX_QM_UNROLL
  for (int n = 0; n < kNR; ++n) {
    float acc = 0;
    for (int64_t j = 0; j < nsub; ++j) {
      int32_t sum[2] = {0, 0};
      for (int i = 0; i < 32; ++i) {
        const int wv = kSigned ? int(int8_t(wq[n][32 * j + i])) : int(wq[n][32 * j + i]);
        sum[i / 16] += wv * int(a[m].q[32 * j + i]);
      }
      acc += (wsc[n][2 * j] * a[m].d[j]) * float(sum[0]) +
             (wsc[n][2 * j + 1] * a[m].d[j]) * float(sum[1]);
    }
    out[m][n] = acc;
  }
}
#endif

// GEMM path: output columns [t0 * kNR, t1 * kNR) of y for block format F, each panel of kNR
// weight rows unpacked once to bytes and reused by every group of activation rows; the epilogue
// on those columns last.
template <class F>
inline void block_format_tiles(const ActRows& act, int64_t M, int64_t K, const uint8_t* w,
                               int64_t N, float* y, int64_t t0, int64_t t1,
                               const QuantEpilogue& ep) {
  const int64_t row_bytes = K / (32 * F::kSub) * F::kBytes;
  const int64_t G = K / 16, nsub = K / 32;
  thread_local std::vector<uint8_t> pq;
  thread_local std::vector<float> psc, pcf;
  pq.resize(static_cast<size_t>(kNR * K));
  psc.resize(static_cast<size_t>(kNR * G));
  pcf.resize(static_cast<size_t>(kNR * G));
  const uint8_t* wq[kNR];
  const float* wsc[kNR];
  RLX_QM_UNROLL
  for (int n = 0; n < kNR; ++n) {
    wq[n] = pq.data() + n * K;
    wsc[n] = psc.data() + n * G;
  }
  for (int64_t t = t0; t < t1; ++t) {
    const int64_t n0 = t * kNR, nr = std::min<int64_t>(kNR, N - n0);
    RLX_QM_UNROLL
    for (int n = 0; n < kNR; ++n)  // padding rows of the last tile repeat the last row
      unpack_row<F>(w + std::min(n0 + n, N - 1) * row_bytes, K, pq.data() + n * K,
                    psc.data() + n * G, pcf.data() + n * G);
    row_groups(act, M, [&]<int MR>(int64_t m0, const ActRow* a) {
      float out[4][4];
      int_tile<MR, F::kSigned>(wq, wsc, a, nsub, out);
      RLX_QM_UNROLL
      for (int m = 0; m < MR; ++m)
        for (int n = 0; n < nr; ++n) {
          float v = out[m][n];
          if (!F::kSigned) v += dot_f32(pcf.data() + n * G, a[m].s16, G);
          y[(m0 + m) * N + n0 + n] = v;
        }
    });
  }
  ep.apply(y, N, 0, M, t0 * kNR, std::min(N, t1 * kNR));
}

#if RLX_QM_LEVEL == 2
// ---- GEMM path on VNNI: outer-product micro-kernel over packed panels of 16 weight rows
// A panel holds 16 weight rows (output columns) unpacked to u8 and interleaved by 4 elements:
// for each group of 4 k, the 16 columns' 4 bytes side by side (64 bytes, two vectors), so one
// vpdpbusd multiplies 8 columns' 4 weights by 4 activation bytes broadcast from x's row and
// adds them to 8 int32 column sums (oneDNN's and MLAS's u8s8 layout). The signed formats
// (Q8_0, IQ4_NL, Q8_K) are stored + 128 (vpdpbusd takes the weights as the unsigned operand)
// and their sums start from -128 * sum q_x of the block (ActRows::u8_bias), so the integer sum
// is the signed one exactly. Per 32 (or 16) elements: int32 sums -> f32, times the column
// scales times the row's activation scale, plus coefficient * activation sum (unsigned formats).
inline constexpr int kPanelCols = 16;
// Panels between two applications of the epilogue (QuantEpilogue) in panel_gemm: 128 columns,
// a 128-row block's 64 KiB of y.
inline constexpr int64_t kEpiloguePanels = 8;

struct Panel {
  std::vector<uint8_t> q;     // K / 4 groups x 16 columns x 4 bytes
  std::vector<float> sc, cf;  // K / 16 x 16 columns
};

// Weight rows [n0, n0 + 16) (rows past N repeat row N - 1) of format F into p, straight from
// the blocks: each column's scales and coefficients decoded once per block into the panel's
// per-16 arrays, and per 32 elements the 8 rows' sub-blocks expanded in registers (F::sub) and
// transposed as an 8 x 8 dword matrix (unpack 32 / 64 bits, then 128-bit lanes), twice for the
// 16 rows. No row buffer: the sub-blocks go from the packed weight to the panel.
template <class F>
inline void pack_panel(const uint8_t* w, int64_t row_bytes, int64_t K, int64_t n0, int64_t N,
                       Panel& p) {
  constexpr int64_t kBlock = 32 * F::kSub;
  const int64_t G = K / 16, nblocks = K / kBlock;
  p.q.resize(size_t(K * kPanelCols));
  p.sc.resize(size_t(G * kPanelCols));
  p.cf.resize(size_t(G * kPanelCols));
  const uint8_t* rows[kPanelCols];
  for (int c = 0; c < kPanelCols; ++c) rows[c] = w + std::min(n0 + c, N - 1) * row_bytes;
  float bs[kScales<F>], bc[kScales<F>];
  for (int c = 0; c < kPanelCols; ++c) {
    for (int64_t bb = 0; bb < nblocks; ++bb) {
      F::scales(rows[c] + bb * F::kBytes, bs, bc);
      float* sc = p.sc.data() + bb * F::kSub * 2 * kPanelCols + c;
      float* cf = p.cf.data() + bb * F::kSub * 2 * kPanelCols + c;
      RLX_QM_UNROLL
      for (int s = 0; s < F::kSub; ++s) {
        RLX_QM_UNROLL
        for (int h = 0; h < 2; ++h) {
          sc[(s * 2 + h) * kPanelCols] = bs[scale_index<F>(s, h)];
          if constexpr (!F::kSigned)  // panel_tile reads no coefficients of the signed formats
            cf[(s * 2 + h) * kPanelCols] = bc[scale_index<F>(s, h)];
        }
      }
    }
  }
  const __m256i flip = _mm256_set1_epi8(F::kSigned ? char(0x80) : 0);
  for (int64_t b = 0; b < K / 32; ++b) {
    const int64_t block_off = b / F::kSub * F::kBytes;
    const int s = int(b % F::kSub);
    for (int c0 = 0; c0 < kPanelCols; c0 += 8) {
      __m256i r[8], t[8], u[8];
      RLX_QM_UNROLL
      for (int i = 0; i < 8; ++i)
        r[i] = _mm256_xor_si256(F::sub(rows[c0 + i] + block_off, s), flip);
      RLX_QM_UNROLL
      for (int i = 0; i < 8; i += 2) {
        t[i] = _mm256_unpacklo_epi32(r[i], r[i + 1]);
        t[i + 1] = _mm256_unpackhi_epi32(r[i], r[i + 1]);
      }
      RLX_QM_UNROLL
      for (int h = 0; h < 8; h += 4) {  // u[h + j]: dword groups j and j + 4 of 4 rows
        u[h] = _mm256_unpacklo_epi64(t[h], t[h + 2]);
        u[h + 1] = _mm256_unpackhi_epi64(t[h], t[h + 2]);
        u[h + 2] = _mm256_unpacklo_epi64(t[h + 1], t[h + 3]);
        u[h + 3] = _mm256_unpackhi_epi64(t[h + 1], t[h + 3]);
      }
      uint8_t* out = p.q.data() + b * 32 * kPanelCols + 4 * c0;
      RLX_QM_UNROLL
      for (int g = 0; g < 4; ++g) {
        st(out + g * 4 * kPanelCols, _mm256_permute2x128_si256(u[g], u[g + 4], 0x20));
        st(out + (g + 4) * 4 * kPanelCols, _mm256_permute2x128_si256(u[g], u[g + 4], 0x31));
      }
    }
  }
}

// out[m * ldo + c] = row m of a . panel column c, for MR rows and the 16 columns.
template <class F, int MR>
inline void panel_tile(const Panel& p, const ActRow* a, int64_t K, float* out, int64_t ldo) {
  constexpr int kHalves = F::kPer16 ? 2 : 1, kSteps = 8 / kHalves;
  __m256 acc[MR][2];
  RLX_QM_UNROLL
  for (int m = 0; m < MR; ++m) acc[m][0] = acc[m][1] = _mm256_setzero_ps();
  const uint8_t* pq = p.q.data();
  for (int64_t b = 0; b < K / 32; ++b) {
    RLX_QM_UNROLL
    for (int h = 0; h < kHalves; ++h) {
      __m256i isum[MR][2];
      RLX_QM_UNROLL
      for (int m = 0; m < MR; ++m)
        isum[m][0] = isum[m][1] =
            F::kSigned ? _mm256_set1_epi32(a[m].u8_bias[b]) : _mm256_setzero_si256();
      RLX_QM_UNROLL
      for (int g = 0; g < kSteps; ++g, pq += 4 * kPanelCols) {
        const __m256i w0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(pq));
        const __m256i w1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(pq + 32));
        const int64_t k = 32 * b + 16 * h + 4 * g;
        RLX_QM_UNROLL
        for (int m = 0; m < MR; ++m) {
          const __m256i av =
              _mm256_set1_epi32(int32_t(ld_u32(reinterpret_cast<const uint8_t*>(a[m].q + k))));
          isum[m][0] = _mm256_dpbusd_epi32(isum[m][0], w0, av);
          isum[m][1] = _mm256_dpbusd_epi32(isum[m][1], w1, av);
        }
      }
      const int64_t j = 2 * b + h;
      const __m256 sc0 = _mm256_loadu_ps(p.sc.data() + j * kPanelCols);
      const __m256 sc1 = _mm256_loadu_ps(p.sc.data() + j * kPanelCols + 8);
      RLX_QM_UNROLL
      for (int m = 0; m < MR; ++m) {
        const __m256 da = _mm256_set1_ps(a[m].d[b]);
        acc[m][0] =
            _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[m][0]), _mm256_mul_ps(sc0, da), acc[m][0]);
        acc[m][1] =
            _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[m][1]), _mm256_mul_ps(sc1, da), acc[m][1]);
      }
      if constexpr (!F::kSigned) {
        const __m256 cf0 = _mm256_loadu_ps(p.cf.data() + j * kPanelCols);
        const __m256 cf1 = _mm256_loadu_ps(p.cf.data() + j * kPanelCols + 8);
        RLX_QM_UNROLL
        for (int m = 0; m < MR; ++m) {
          // per 16 elements with kPer16, else the 32-element sum (both halves' coefficients
          // are equal then)
          const __m256 s = _mm256_set1_ps(F::kPer16 ? a[m].s16[j] : a[m].s32[b]);
          acc[m][0] = _mm256_fmadd_ps(cf0, s, acc[m][0]);
          acc[m][1] = _mm256_fmadd_ps(cf1, s, acc[m][1]);
        }
      }
    }
  }
  RLX_QM_UNROLL
  for (int m = 0; m < MR; ++m) {
    _mm256_storeu_ps(out + m * ldo, acc[m][0]);
    _mm256_storeu_ps(out + m * ldo + 8, acc[m][1]);
  }
}

// Activation bytes (int8 rows) per block of rows the VNNI GEMM runs every panel over: a block
// stays in L2 while the panels pass (with all M rows at once, M = 4096 x K = 384 streamed 1.5 MB
// from L3 per panel: -15 to -30 % GFLOP/s at MiniLM's shapes); each panel is packed once per
// block, at most 1/32 of the block's arithmetic.
inline constexpr int64_t kGemmRowBlockBytes = int64_t{384} << 10;

// GEMM path on VNNI: output columns [t0 * 16, t1 * 16) of y, per block of rows (at least 128,
// about kGemmRowBlockBytes of activations) one packed panel at a time reused by every group of
// 4 activation rows of the block; whole panels' tiles stored straight into y, the last partial
// one through a buffer. While a panel's tiles run, the next panel's weight rows (16 contiguous
// rows: a model's weights live in L3 or DRAM, not L2) are prefetched into L2, a share per row
// group, so that packing it does not wait on memory.
template <class F>
inline void panel_gemm(const ActRows& act, int64_t M, int64_t K, const uint8_t* w, int64_t N,
                       float* y, int64_t t0, int64_t t1, const QuantEpilogue& ep) {
  const int64_t row_bytes = K / (32 * F::kSub) * F::kBytes;
  const int64_t block_rows = std::max<int64_t>(128, kGemmRowBlockBytes / K / 4 * 4);
  thread_local Panel panel;
  for (int64_t mb = 0; mb < M; mb += block_rows) {
    const int64_t me = std::min(M, mb + block_rows), groups = (me - mb + 3) / 4;
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t n0 = t * kPanelCols, nr = std::min<int64_t>(kPanelCols, N - n0);
      pack_panel<F>(w, row_bytes, K, n0, N, panel);
      const int64_t next0 = std::min(n0 + kPanelCols, N);
      const int64_t next1 = std::min(n0 + 2 * kPanelCols, N);
      const char* next = reinterpret_cast<const char*>(w + next0 * row_bytes);
      const int64_t lines = t + 1 < t1 ? ((next1 - next0) * row_bytes + 63) / 64 : 0;
      const int64_t per_group = (lines + groups - 1) / groups;
      row_groups(
          act, me,
          [&]<int MR>(int64_t m0, const ActRow* a) {
            for (int64_t l = (m0 - mb) / 4 * per_group, e = std::min(lines, l + per_group); l < e;
                 ++l)
              _mm_prefetch(next + 64 * l, _MM_HINT_T1);
            if (nr == kPanelCols) return panel_tile<F, MR>(panel, a, K, y + m0 * N + n0, N);
            alignas(32) float out[4][kPanelCols];
            panel_tile<F, MR>(panel, a, K, out[0], kPanelCols);
            RLX_QM_UNROLL
            for (int m = 0; m < MR; ++m) std::memcpy(y + (m0 + m) * N + n0, out[m], size_t(nr) * 4);
          },
          mb);
      // The epilogue every kEpiloguePanels panels, on the row block's columns still in L2 (per
      // panel its 16-column rows would cost a call each).
      if ((t - t0 + 1) % kEpiloguePanels == 0 || t + 1 == t1) {
        const int64_t first = t0 + (t - t0) / kEpiloguePanels * kEpiloguePanels;
        ep.apply(y, N, mb, me, first * kPanelCols, n0 + nr);
      }
    }
  }
}
#endif

// Output columns [n0, n1) for F32 / F16 / BF16 weights: f32 dot products of x with the
// widened weight rows (the scalar target, and every target's GEMM path).
inline void float_format_rows(QuantFormat f, const float* x, int64_t M, int64_t K, const uint8_t* w,
                              int64_t N, float* y, int64_t n0, int64_t n1) {
  const int64_t row_bytes = quant_row_bytes(f, K);
  thread_local std::vector<float> row;
  row.resize(static_cast<size_t>(K));
  for (int64_t n = n0; n < n1; ++n) {
    dequantize_row(f, w + n * row_bytes, row.data(), K);
    for (int64_t m = 0; m < M; ++m) y[m * N + n] = dot_f32(x + m * K, row.data(), K);
  }
}

// ---- GEMV path (M <= kGemvRows on the SIMD targets)
// Weight rows are read once per group of up to 4 activation rows: NR rows of W at a time, each
// 32-weight sub-block expanded in a register (F::sub) and dotted with the MR activation
// sub-blocks (vpdpbusd, or vpmaddubsw + vpmaddwd), the i32 dot converted and accumulated with
// one FMA by (weight scale x activation scale). Scales, coefficients and the products of scales
// are computed for 8 sub-blocks at once (one group: 8 blocks of a 32-element format, one
// K-quant block), the zero point / min terms as one FMA of the coefficients with the activation
// sums per group (ggml's bsums trick). Nothing is allocated; rows are split across threads in
// chunks of kGemvChunkRows by parallel_runs: each thread reads its own run of consecutive chunks,
// one sequential stream that it prefetches ahead along (prefetch_group); a thread done with its
// run goes on with the next chunks of the other runs.
#if RLX_QM_LEVEL >= 1
// Weight rows per tile for MR activation rows: MR x NR accumulators plus the NR expanded
// sub-blocks fit the registers (16 on AVX2, 32 with AVX-512).
template <int MR>
inline constexpr int gemv_nr() {
  return MR == 1 ? 4 : (RLX_QM_LEVEL == 2 ? 4 : 2);
}
// Rows of W per parallel chunk: small enough that a late thread delays the call little and that
// a chunk's rows stay in L2 between the passes of two activation-row groups (M > 4).
inline constexpr int64_t kGemvChunkRows = 32;

// Bytes the GEMV prefetches ahead of the tile it reads (into L2: prefetches into L1 at this
// distance ran out of L1 miss buffers, half the speed for Q8_0 / Q6_K).
inline constexpr int64_t kGemvPrefetchBytes = 32768;

// The GEMV's view of format F: gemv_sub / gemv_group_scales where F has a faster encoding for
// it (power-of-two-scaled fields), else sub / group_scales; kHighX16 where the dot's lanes 4..7
// come out 16x.
template <class F>
inline __m256i gemv_sub(const uint8_t* b, int s) {
  if constexpr (requires { F::gemv_sub(b, s); })
    return F::gemv_sub(b, s);
  else
    return F::sub(b, s);
}
template <class F>
inline void gemv_group_scales(const uint8_t* b, int nsub, __m256* sc, __m256* cf) {
  if constexpr (requires { F::gemv_group_scales(b, nsub, sc, cf); })
    F::gemv_group_scales(b, nsub, sc, cf);
  else
    F::group_scales(b, nsub, sc, cf);
}
// (false where F lacks the member)
template <class F>
inline constexpr bool kHighX16 = requires {
  requires F::kHighX16;
};
template <class F>
inline constexpr bool kPairedGemv = requires {
  requires F::kPairedGemv;
};
template <class F>
inline constexpr bool kIntZero = requires {
  requires F::kIntZero;
};

// The paired GEMV (Q4_0 / Q4_1, one activation row): the weight nibbles of two blocks A, B
// side by side in one vector ([A's 16 bytes | B's 16 bytes], low nibbles, then high nibbles:
// elements 0..15 and 16..31 of both) are dotted with the activations in the matching order, so
// that one vpdpbusd pair yields lanes 0..3 = partial sums of A and 4..7 = of B. The 4 pair
// vectors of an 8-block group reduce (two unpack + add levels) to one vector of the 8 block
// sums, in lane order 0, 2, 4, 6, 1, 3, 5, 7, which one FMA scales by the 8 scale products:
// per block about half the vector ops of one dot + convert + broadcast + FMA each. Tiles of
// kPairedRows = 4 weight rows: each row's whole 8-block groups so; the last L = K / 32 % 8
// blocks of the rows ("tail") in groups whose pair p is blocks 2t, 2t + 1 of the tail of row p
// (B zero past L), so one vector holds row p's sums in lanes p and 4 + p: for K = 576 (L = 2)
// one group per tile instead of a quarter-full third group per row.
// PairedAct is act's row 0 rearranged for it: per whole group, per pair p (blocks 2p, 2p + 1 of
// the group): A's bytes 0..15, B's 0..15, A's 16..31, B's 16..31, and the group's d and s32 in
// the lane order above; per tail group t the 64 bytes of blocks 2t, 2t + 1 of the tail (tq) and
// their d and s32 in lanes 0..3 and 4..7 (td, ts); zeros past K. zs and tz: the integer sums
// of the blocks' q in the lanes of s32 and ts (the formats with kIntZero).
inline constexpr int kPairedRows = 4;
struct PairedAct {
  int tail = 0;  // L
  std::vector<int8_t> q, tq;
  std::vector<float> d, s32, td, ts;
  std::vector<int32_t> zs, tz;
};
// The 32 activation bytes q of a block as block j (0..7) of the group at group_q (256 bytes).
inline void put_paired(const int8_t* q, int64_t j, int8_t* group_q) {
  int8_t* dst = group_q + 64 * (j / 2) + 16 * (j % 2);
  std::memcpy(dst, q, 16);
  std::memcpy(dst + 32, q + 16, 16);
}
inline void pair_activations(const ActRows& act, PairedAct& out) {
  const int64_t nsub = act.K / 32, whole = nsub / 8 * 8;
  out.tail = int(nsub - whole);
  out.q.resize(size_t(whole * 32));
  out.d.resize(size_t(whole));
  out.s32.resize(size_t(whole));
  out.zs.resize(size_t(whole));
  // the block's sum of q (u8_bias = -128 * sum q)
  auto qsum = [&](int64_t b) { return -act.u8_bias[size_t(b)] / 128; };
  for (int64_t b = 0; b < whole; ++b) {
    const int64_t j = b % 8, lane = b - j + (j % 2 == 0 ? j / 2 : 4 + j / 2);
    out.d[size_t(lane)] = act.d[size_t(b)];
    out.s32[size_t(lane)] = act.s32[size_t(b)];
    out.zs[size_t(lane)] = qsum(b);
    put_paired(act.q.data() + 32 * b, j, out.q.data() + (b - j) * 32);
  }
  const int64_t tail_groups = (out.tail + 1) / 2;
  out.tq.assign(size_t(64 * tail_groups), 0);
  for (auto* v : {&out.td, &out.ts}) v->assign(size_t(8 * tail_groups), 0.0f);
  out.tz.assign(size_t(8 * tail_groups), 0);
  for (int64_t j = 0; j < out.tail; ++j) {
    const int64_t b = whole + j, t = j / 2;
    for (int l = 0; l < 4; ++l) {
      out.td[size_t(8 * t + 4 * (j % 2) + l)] = act.d[size_t(b)];
      out.ts[size_t(8 * t + 4 * (j % 2) + l)] = act.s32[size_t(b)];
      out.tz[size_t(8 * t + 4 * (j % 2) + l)] = qsum(b);
    }
    put_paired(act.q.data() + 32 * b, j % 2, out.tq.data() + 64 * t);
  }
}

// The paired GEMV's reduction: fold32 of pairs AB, CD (lanes [A0..A3 | B0..B3]) is
// [A0, C0, A1, C1 | B0, D0, B1, D1] + [A2, C2, A3, C3 | B2, D2, B3, D3]; fold64 of two such
// the 8 block sums.
inline __m256i fold32(__m256i x, __m256i y) {
  return _mm256_add_epi32(_mm256_unpacklo_epi32(x, y), _mm256_unpackhi_epi32(x, y));
}
inline __m256i fold64(__m256i x, __m256i y) {
  return _mm256_add_epi32(_mm256_unpacklo_epi64(x, y), _mm256_unpackhi_epi64(x, y));
}
// The sums of 4 vectors as one: lane n = v[n]'s lanes summed (the same folds on f32).
inline __m128 hsum4_ps(const __m256* v) {
  const __m256 x = _mm256_add_ps(_mm256_unpacklo_ps(v[0], v[1]), _mm256_unpackhi_ps(v[0], v[1]));
  const __m256 y = _mm256_add_ps(_mm256_unpacklo_ps(v[2], v[3]), _mm256_unpackhi_ps(v[2], v[3]));
  const __m256d xd = _mm256_castps_pd(x), yd = _mm256_castps_pd(y);
  const __m256 s = _mm256_add_ps(_mm256_castpd_ps(_mm256_unpacklo_pd(xd, yd)),
                                 _mm256_castpd_ps(_mm256_unpackhi_pd(xd, yd)));
  return _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
}

// Prefetches into L2 the kBytes that the tile at row n0 reads for its group gi, kGemvPrefetchBytes
// ahead (one sequential stream; see kGemvPrefetchBytes), nothing past the end of W. In the first
// kGemvPrefetchBytes of the thread's run (from row run0, RunChunk::run_begin), where no earlier
// tile of the thread prefetched, also the 2 kBytes at twice the distance from the run's start, so
// the stream runs ahead from the run's start on: a run of a few hundred KiB (576 x 1536) spends
// the first 32 KiB of it otherwise on demand misses. Past the run's end the prefetch goes on into
// the next run: with 2 threads the caller takes that one's chunks next while its owner is away
// (against stopping at the run's end: the same with both threads running, up to 5 % faster with
// the other core busy, 576 x 1536). prefetcht1 in volatile asm: GCC 12 deletes _mm_prefetch loops
// it inlines here as side-effect free.
template <int64_t kBytes>
inline void prefetch_group(const uint8_t* w, int64_t row_bytes, int64_t N, int64_t run0,
                           int64_t tile_bytes, int64_t n0, int64_t gi) {
  const int64_t start = run0 * row_bytes, end = N * row_bytes;
  const int64_t at = n0 * row_bytes + gi * kBytes - start;  // in the run
  if (at < kGemvPrefetchBytes && start + 2 * at + 3 * kBytes <= end) {
    RLX_QM_UNROLL
    for (int64_t p = 0; p < 2 * kBytes; p += 64)
      asm volatile("prefetcht1 %0" : : "m"(w[start + 2 * at + kBytes + p]));
  }
  if (n0 * row_bytes + kGemvPrefetchBytes + tile_bytes > end) return;
  const uint8_t* pf = w + start + at + kGemvPrefetchBytes;
  RLX_QM_UNROLL
  for (int64_t p = 0; p < kBytes; p += 64) asm volatile("prefetcht1 %0" : : "m"(pf[p]));
}

// Rows [r0, r1) of y for one activation row a (a chunk of the run from row run0) by the paired
// scheme: tiles of kPairedRows weight rows (the last tile repeats row r1 - 1), per tile its rows'
// whole groups, then its tail groups. Scales and offsets are decoded one group ahead of the dots
// that use them, across tiles too, as in gemv_chunk.
template <class F>
inline void paired_gemv_chunk(const uint8_t* w, int64_t K, int64_t N, float* y, int64_t r0,
                              int64_t r1, int64_t run0, const PairedAct& a) {
  constexpr int NR = kPairedRows;
  constexpr int64_t kGroupBytes = 8 * F::kBytes;
  const int64_t row_bytes = K / 32 * F::kBytes, tile_bytes = NR * row_bytes;
  const int64_t whole = K / 32 / 8, groups = whole + (a.tail + 1) / 2;
  // Per group, double-buffered: cs[n], weight scale x activation scale of each block of row n;
  // off[n], the row's zero point / min terms (coefficients x activation sums; unused with
  // kIntZero). A tail group has one of each, for the 4 rows' blocks (n = 0).
  constexpr bool kInt = kIntZero<F>;
  alignas(32) float cs[2][NR][8];
  __m256 off[2][NR];
  auto tile_rows = [&](int64_t n0, const uint8_t** wr) __attribute__((always_inline)) {
    RLX_QM_UNROLL
    for (int n = 0; n < NR; ++n) wr[n] = w + std::min(n0 + n, r1 - 1) * row_bytes;
  };
  auto prepare = [&](const uint8_t* const* wr, int64_t n0, int64_t gi, int buf)
      __attribute__((always_inline)) {
    prefetch_group<NR * kGroupBytes>(w, row_bytes, N, run0, tile_bytes, n0, gi);
    if (gi < whole) {
      const __m256 ad = _mm256_loadu_ps(a.d.data() + 8 * gi);
      const __m256 s = _mm256_loadu_ps(a.s32.data() + 8 * gi);
      RLX_QM_UNROLL
      for (int n = 0; n < NR; ++n) {
        __m256 sc, cf;
        F::template group_scales<true>(wr[n] + gi * kGroupBytes, 8, &sc, &cf);
        _mm256_store_ps(cs[buf][n], _mm256_mul_ps(sc, ad));
        if constexpr (!kInt) off[buf][n] = _mm256_mul_ps(cf, s);
      }
      return;
    }
    const int64_t t = gi - whole, at = (8 * whole + 2 * t) * F::kBytes;
    const bool second = 2 * t + 1 < a.tail;
    const uint8_t* p[8];
    RLX_QM_UNROLL
    for (int n = 0; n < NR; ++n) {
      p[n] = wr[n] + at;
      p[n + 4] = second ? wr[n] + at + F::kBytes : nullptr;
    }
    __m256 d, m;
    f16_pairs_at(p, d, m);
    _mm256_store_ps(cs[buf][0], _mm256_mul_ps(d, _mm256_loadu_ps(a.td.data() + 8 * t)));
    if constexpr (!kInt)
      off[buf][0] = _mm256_mul_ps(F::coefs(d, m), _mm256_loadu_ps(a.ts.data() + 8 * t));
  };
  // The nibbles of blocks A (at qa) and B (at qb) dotted with the pair's activations lo, hi.
  auto dot = [&](const uint8_t* qa, const uint8_t* qb, __m256i lo, __m256i hi)
      __attribute__((always_inline)) {
    const __m256i mask = _mm256_set1_epi8(0x0F);
    const __m256i v = _mm256_inserti128_si256(
        _mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(qa))),
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(qb)), 1);
    return _mm256_dpbusd_epi32(
        _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_and_si256(v, mask), lo),
        _mm256_and_si256(_mm256_srli_epi16(v, 4), mask), hi);
  };
  auto act = [&](const int8_t* q) __attribute__((always_inline)) {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q));
  };
  // kIntZero: the zero point's share of 8 blocks' dots, kZero x the activation sums at z
  auto zero_dots = [&](const int32_t* z) __attribute__((always_inline)) {
    return _mm256_mullo_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(z)),
                              _mm256_set1_epi32(int(F::kZero)));
  };
  // The integer sums of 8 blocks (less the zero point's, with kIntZero) accumulated into acc,
  // scaled by the scale products at c, plus the offsets at o (without kIntZero).
  auto accumulate = [&](__m256 acc, __m256i sums, __m256i zero, const float* c, const __m256* o)
      __attribute__((always_inline)) {
    if constexpr (kInt) sums = _mm256_sub_epi32(sums, zero);
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sums), _mm256_load_ps(c), acc);
    if constexpr (!kInt) acc = _mm256_add_ps(acc, *o);
    return acc;
  };
  const uint8_t *wr[NR], *next[NR];
  tile_rows(r0, wr);
  tile_rows(r0, next);  // (set before the last tile, which has no next)
  prepare(wr, r0, 0, 0);
  int buf = 0;
  for (int64_t n0 = r0; n0 < r1; n0 += NR) {
    __m256 acc[NR], tail = _mm256_setzero_ps();
    RLX_QM_UNROLL
    for (int n = 0; n < NR; ++n) acc[n] = _mm256_setzero_ps();
    for (int64_t gi = 0; gi < groups; ++gi, buf ^= 1) {
      if (gi + 1 < groups) {
        prepare(wr, n0, gi + 1, buf ^ 1);
      } else if (n0 + NR < r1) {
        tile_rows(n0 + NR, next);
        prepare(next, n0 + NR, 0, buf ^ 1);
      }
      if (gi < whole) {
        const int8_t* aq = a.q.data() + 256 * gi;
        // pair p of row n
        auto pair = [&](int p, int n) __attribute__((always_inline)) {
          const uint8_t* qa = wr[n] + gi * kGroupBytes + 2 * p * F::kBytes + F::kQs;
          return dot(qa, qa + F::kBytes, act(aq + 64 * p), act(aq + 64 * p + 32));
        };
        __m256i q01[NR];
        RLX_QM_UNROLL
        for (int n = 0; n < NR; ++n) q01[n] = fold32(pair(0, n), pair(1, n));
        const __m256i zero = kInt ? zero_dots(a.zs.data() + 8 * gi) : __m256i{};
        RLX_QM_UNROLL
        for (int n = 0; n < NR; ++n) {
          const __m256i sums = fold64(q01[n], fold32(pair(2, n), pair(3, n)));
          acc[n] = accumulate(acc[n], sums, zero, cs[buf][n], &off[buf][n]);
        }
      } else {  // pair p: blocks 2t, 2t + 1 of row p's tail (B's activations zero past it)
        const int64_t t = gi - whole, at = (8 * whole + 2 * t) * F::kBytes + F::kQs;
        const int64_t b_at = 2 * t + 1 < a.tail ? at + F::kBytes : at;
        const __m256i lo = act(a.tq.data() + 64 * t), hi = act(a.tq.data() + 64 * t + 32);
        __m256i d[NR];
        RLX_QM_UNROLL
        for (int n = 0; n < NR; ++n) d[n] = dot(wr[n] + at, wr[n] + b_at, lo, hi);
        const __m256i sums = fold64(fold32(d[0], d[1]), fold32(d[2], d[3]));
        const __m256i zero = kInt ? zero_dots(a.tz.data() + 8 * t) : __m256i{};
        tail = accumulate(tail, sums, zero, cs[buf][0], &off[buf][0]);
      }
    }
    // row n's sums: lane n of hsum4_ps, lanes n and 4 + n of tail
    const __m128 res = _mm_add_ps(
        hsum4_ps(acc), _mm_add_ps(_mm256_castps256_ps128(tail), _mm256_extractf128_ps(tail, 1)));
    if (n0 + NR <= r1) {
      _mm_storeu_ps(y + n0, res);
    } else {
      alignas(16) float r[4];
      _mm_store_ps(r, res);
      std::copy_n(r, r1 - n0, y + n0);
    }
    RLX_QM_UNROLL
    for (int n = 0; n < NR; ++n) wr[n] = next[n];
  }
}

// Rows [r0, r1) of y for activation rows [m0, m0 + MR) (a chunk of the run from row run0): tiles of
// NR weight rows (the last tile repeats row r1 - 1), each over all K. The group pipeline below runs
// across the tiles too (the next tile's first group is prepared during this tile's last), so short
// rows (K of a few groups) pay no pipeline start per tile.
template <class F, int MR, int NR>
inline void gemv_chunk(const uint8_t* w, int64_t K, int64_t N, float* y, int64_t m0, int64_t r0,
                       int64_t r1, int64_t run0, const ActRow* a) {
  constexpr bool kX16 = kHighX16<F>;
  const int64_t nsub_row = K / 32, row_bytes = nsub_row / F::kSub * F::kBytes;
  const int64_t tile_bytes = NR * row_bytes;
  constexpr int kP = F::kPer16 ? 2 : 1;
  constexpr int64_t kGroupBytes = 8 / F::kSub * F::kBytes;
  // Per group, double-buffered: cs[m][n], weight scale x activation scale of each sub-block (or
  // half); off[m][n], the group's zero point / min terms (coefficients x activation sums). They
  // are computed one group ahead of the integer dots that use them, so that the latency of their
  // decoding (loads, gathers, conversions) overlaps the previous group's dots.
  alignas(32) float cs[2][MR][NR][8 * kP];
  __m256 off[2][MR][NR];
  // The NR row pointers of the tile at row n0.
  auto tile_rows = [&](int64_t n0, const uint8_t** wr) __attribute__((always_inline)) {
    RLX_QM_UNROLL
    for (int n = 0; n < NR; ++n) wr[n] = w + std::min(n0 + n, r1 - 1) * row_bytes;
  };
  // Scales and offsets of the group at sub-block j0 of the tile at row n0 into buffer buf.
  auto prepare = [&](const uint8_t* const* wr, int64_t n0, int64_t j0, int buf)
      __attribute__((always_inline)) {
    const int nsub = F::kSub == 8 ? 8 : int(std::min<int64_t>(8, nsub_row - j0));
    const int64_t offset = j0 / 8 * kGroupBytes;
    __m256 sc[NR][kP], cf[NR][kP];
    // The tile reads NR * kGroupBytes per group: prefetch as many bytes kGemvPrefetchBytes
    // ahead of it (one sequential stream; see kGemvPrefetchBytes), not past the end of W.
    prefetch_group<NR * kGroupBytes>(w, row_bytes, N, run0, tile_bytes, n0, j0 / 8);
    RLX_QM_UNROLL
    for (int n = 0; n < NR; ++n) {
      gemv_group_scales<F>(wr[n] + offset, nsub, sc[n], cf[n]);
      // kHighX16: lanes 4..7 of acc are scaled by 1/16 at the end, so the offsets of sub-blocks
      // 4..7 enter them 16x (exact)
      if constexpr (kX16)
        cf[n][0] = _mm256_mul_ps(cf[n][0], _mm256_setr_ps(1, 1, 1, 1, 16, 16, 16, 16));
    }
    RLX_QM_UNROLL
    for (int m = 0; m < MR; ++m) {
      const __m256 ad = _mm256_loadu_ps(a[m].d + j0);
      __m256 adp[kP], sums[kP];
      if constexpr (F::kPer16) {  // the activation scale of each half
        adp[0] = _mm256_permutevar8x32_ps(ad, _mm256_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3));
        adp[1] = _mm256_permutevar8x32_ps(ad, _mm256_setr_epi32(4, 4, 5, 5, 6, 6, 7, 7));
        sums[0] = _mm256_loadu_ps(a[m].s16 + 2 * j0);
        sums[1] = _mm256_loadu_ps(a[m].s16 + 2 * j0 + 8);
      } else {
        adp[0] = ad;
        sums[0] = _mm256_loadu_ps(a[m].s32 + j0);
      }
      RLX_QM_UNROLL
      for (int n = 0; n < NR; ++n) {
        RLX_QM_UNROLL
        for (int p = 0; p < kP; ++p)
          _mm256_store_ps(cs[buf][m][n] + 8 * p, _mm256_mul_ps(sc[n][p], adp[p]));
        if constexpr (!F::kSigned) {
          off[buf][m][n] = _mm256_mul_ps(cf[n][0], sums[0]);
          if constexpr (F::kPer16)
            off[buf][m][n] = _mm256_fmadd_ps(cf[n][1], sums[1], off[buf][m][n]);
        }
      }
    }
  };
  const uint8_t *wr[NR], *next[NR];
  tile_rows(r0, wr);
  tile_rows(r0, next);  // (set before the last tile, which has no next)
  prepare(wr, r0, 0, 0);
  int buf = 0;
  for (int64_t n0 = r0; n0 < r1; n0 += NR) {
    __m256 acc[MR][NR];
    RLX_QM_UNROLL
    for (int m = 0; m < MR; ++m) RLX_QM_UNROLL
    for (int n = 0; n < NR; ++n) acc[m][n] = _mm256_setzero_ps();
    for (int64_t j0 = 0; j0 < nsub_row; j0 += 8, buf ^= 1) {
      if (j0 + 8 < nsub_row) {
        prepare(wr, n0, j0 + 8, buf ^ 1);
      } else if (n0 + NR < r1) {
        tile_rows(n0 + NR, next);
        prepare(next, n0 + NR, 0, buf ^ 1);
      }
      const int64_t offset = j0 / 8 * kGroupBytes;
      // Sub-block s of the group: expand it in NR weight rows, dot with MR activation rows.
      auto step = [&](int s) __attribute__((always_inline)) {
        __m256i wv[NR], wabs[NR];
        RLX_QM_UNROLL
        for (int n = 0; n < NR; ++n) {
          wv[n] = F::kSub == 1 ? gemv_sub<F>(wr[n] + offset + s * F::kBytes, 0)
                               : gemv_sub<F>(wr[n] + offset, s);
          if constexpr (F::kSigned) wabs[n] = _mm256_sign_epi8(wv[n], wv[n]);
        }
        RLX_QM_UNROLL
        for (int m = 0; m < MR; ++m) {
          const __m256i av =
              _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a[m].q + 32 * (j0 + s)));
          RLX_QM_UNROLL
          for (int n = 0; n < NR; ++n) {
            const __m256i dot =
                F::kSigned ? dot_u8s8(wabs[n], _mm256_sign_epi8(av, wv[n])) : dot_u8s8(wv[n], av);
            const float* c = cs[buf][m][n];
            __m256 scale;
            if constexpr (F::kPer16) {
              scale = _mm256_set_m128(_mm_broadcast_ss(c + 2 * s + 1), _mm_broadcast_ss(c + 2 * s));
            } else {
              scale = _mm256_broadcast_ss(c + s);
            }
            acc[m][n] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), scale, acc[m][n]);
          }
        }
      };
      const int nsub = F::kSub == 8 ? 8 : int(std::min<int64_t>(8, nsub_row - j0));
      if (nsub == 8) {  // a whole group: unrolled, the accumulators stay in registers
        RLX_QM_UNROLL
        for (int s = 0; s < 8; ++s) step(s);
      } else {  // the last group of a row of a 32-element format with K / 32 % 8 != 0
        for (int s = 0; s < nsub; ++s) step(s);
      }
      if constexpr (!F::kSigned) {
        RLX_QM_UNROLL
        for (int m = 0; m < MR; ++m) RLX_QM_UNROLL
        for (int n = 0; n < NR; ++n) acc[m][n] = _mm256_add_ps(acc[m][n], off[buf][m][n]);
      }
    }
    const int nr = int(std::min<int64_t>(NR, r1 - n0));
    RLX_QM_UNROLL
    for (int m = 0; m < MR; ++m) RLX_QM_UNROLL
    for (int n = 0; n < NR; ++n) {
      if constexpr (kX16)
        acc[m][n] = _mm256_mul_ps(acc[m][n],
                                  _mm256_setr_ps(1, 1, 1, 1, 0.0625f, 0.0625f, 0.0625f, 0.0625f));
      const float v = hsum_ps(acc[m][n]);
      if (n < nr) y[(m0 + m) * N + n0 + n] = v;
    }
    RLX_QM_UNROLL
    for (int n = 0; n < NR; ++n) wr[n] = next[n];
  }
}

// F32 / F16 / BF16 weights: 8 weights widened to f32.
inline __m256 widen8(QuantFormat f, const uint8_t* p) {
  if (f == QuantFormat::kF32) return _mm256_loadu_ps(reinterpret_cast<const float*>(p));
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  if (f == QuantFormat::kF16) return _mm256_cvtph_ps(h);
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));  // bf16
}
inline float widen1(QuantFormat f, const uint8_t* p) {
  if (f == QuantFormat::kF32) {
    float v;
    std::memcpy(&v, p, 4);
    return v;
  }
  if (f == QuantFormat::kF16) return ld_f16(p);
  const uint32_t u = uint32_t(p[0] | (p[1] << 8)) << 16;
  float v;
  std::memcpy(&v, &u, 4);
  return v;
}

// The float formats' tile: NR weight rows x MR rows of x (f32), FMA dot products.
template <QuantFormat kF, int MR, int NR>
inline void float_gemv_tile(const uint8_t* const* wr, int64_t K, const uint8_t* pf,
                            const float* const* x, float* const* out) {
  constexpr int64_t kEB = kF == QuantFormat::kF32 ? 4 : 2;
  __m256 acc[MR][NR];
  RLX_QM_UNROLL
  for (int m = 0; m < MR; ++m) RLX_QM_UNROLL
  for (int n = 0; n < NR; ++n) acc[m][n] = _mm256_setzero_ps();
  int64_t k = 0;
  for (; k + 8 <= K; k += 8) {
    if (pf != nullptr) {
      RLX_QM_UNROLL
      for (int64_t p = 0; p < NR * 8 * kEB; p += 64)
        _mm_prefetch(reinterpret_cast<const char*>(pf + NR * kEB * k + p), _MM_HINT_T1);
    }
    __m256 wv[NR];
    RLX_QM_UNROLL
    for (int n = 0; n < NR; ++n) wv[n] = widen8(kF, wr[n] + kEB * k);
    RLX_QM_UNROLL
    for (int m = 0; m < MR; ++m) {
      const __m256 xv = _mm256_loadu_ps(x[m] + k);
      RLX_QM_UNROLL
      for (int n = 0; n < NR; ++n) acc[m][n] = _mm256_fmadd_ps(wv[n], xv, acc[m][n]);
    }
  }
  RLX_QM_UNROLL
  for (int m = 0; m < MR; ++m) RLX_QM_UNROLL
  for (int n = 0; n < NR; ++n) {
    float v = hsum_ps(acc[m][n]);
    for (int64_t t = k; t < K; ++t) v += x[m][t] * widen1(kF, wr[n] + kEB * t);
    out[m][n] = v;
  }
}

// Rows [r0, r1) of y for activation rows [m0, m0 + MR): tiles of NR weight rows (the last tile
// repeats row r1 - 1), tile(wr, pf, out rows) computing them. A tile reads its NR rows side by
// side, NR interleaved streams that the hardware prefetchers serve poorly (4 streams of 2304-byte
// rows read ~8 GB/s where one stream reads ~17 on the Zen 4 EPYC of docs/runtime.md), so the
// tile also prefetches the bytes kGemvPrefetchBytes past its start at the rate it consumes its
// own (pf; null where that would pass the end of W): DRAM then sees one sequential stream per
// thread (its run of chunks, parallel_runs).
template <int MR, int NR, class Tile>
inline void gemv_rows(const uint8_t* w, int64_t row_bytes, int64_t N, float* y, int64_t m0,
                      int64_t r0, int64_t r1, Tile&& tile) {
  const int64_t tile_bytes = NR * row_bytes;
  for (int64_t n0 = r0; n0 < r1; n0 += NR) {
    const uint8_t* wr[NR];
    RLX_QM_UNROLL
    for (int n = 0; n < NR; ++n) wr[n] = w + std::min(n0 + n, r1 - 1) * row_bytes;
    float res[MR][NR];
    float* out[MR];
    RLX_QM_UNROLL
    for (int m = 0; m < MR; ++m) out[m] = res[m];
    const bool ahead = n0 * row_bytes + kGemvPrefetchBytes + tile_bytes <= N * row_bytes;
    tile(wr, ahead ? w + n0 * row_bytes + kGemvPrefetchBytes : nullptr, out);
    const int nr = int(std::min<int64_t>(NR, r1 - n0));
    RLX_QM_UNROLL
    for (int m = 0; m < MR; ++m)
      for (int n = 0; n < nr; ++n) y[(m0 + m) * N + n0 + n] = res[m][n];
  }
}

template <class F>
inline void gemv_block(const ActRows& act, int64_t M, int64_t K, const uint8_t* w, int64_t N,
                       float* y, const QuantEpilogue& ep) {
  if constexpr (kPairedGemv<F>) {
    if (M == 1) {
      thread_local PairedAct buffers;
      PairedAct& pa = buffers;  // this thread's, captured by the workers
      pair_activations(act, pa);
      return parallel_runs(0, N, kGemvChunkRows, [&](const RunChunk& c) {
        paired_gemv_chunk<F>(w, K, N, y, c.begin, c.end, c.run_begin, pa);
        ep.apply(y, N, 0, M, c.begin, c.end);
      });
    }
  }
  parallel_runs(0, N, kGemvChunkRows, [&](const RunChunk& c) {
    row_groups(act, M, [&]<int MR>(int64_t m0, const ActRow* a) {
      constexpr int NR = gemv_nr<MR>();
      gemv_chunk<F, MR, NR>(w, K, N, y, m0, c.begin, c.end, c.run_begin, a);
    });
    ep.apply(y, N, 0, M, c.begin, c.end);
  });
}

template <QuantFormat kF>
inline void gemv_float(const float* x, int64_t M, int64_t K, const uint8_t* w, int64_t N, float* y,
                       const QuantEpilogue& ep) {
  const int64_t row_bytes = quant_row_bytes(kF, K);
  parallel_runs(0, N, kGemvChunkRows, [&](const RunChunk& c) {
    for (int64_t m0 = 0; m0 < M; m0 += 4) {
      const int mr = int(std::min<int64_t>(4, M - m0));
      const float* xr[4];
      for (int m = 0; m < 4; ++m) xr[m] = x + (m0 + std::min(m, mr - 1)) * K;
      auto run = [&]<int MR>() {
        constexpr int NR = gemv_nr<MR>();
        gemv_rows<MR, NR>(w, row_bytes, N, y, m0, c.begin, c.end,
                          [&](const uint8_t* const* wr, const uint8_t* pf, float* const* out) {
                            float_gemv_tile<kF, MR, NR>(wr, K, pf, xr, out);
                          });
      };
      if (mr == 1)
        run.template operator()<1>();
      else if (mr == 2)
        run.template operator()<2>();
      else if (mr == 3)
        run.template operator()<3>();
      else
        run.template operator()<4>();
    }
    ep.apply(y, N, 0, M, c.begin, c.end);
  });
}
#endif

// The int8 kernel (quant_matmul.h) on this target, epilogue `ep` applied per block of columns.
inline void matmul(QuantFormat f, const float* x, int64_t M, int64_t K, const uint8_t* w, int64_t N,
                   float* y, const QuantEpilogue& ep) {
  if (f == QuantFormat::kF32 || f == QuantFormat::kF16 || f == QuantFormat::kBF16) {
#if RLX_QM_LEVEL >= 1
    if (M <= kGemvRows) {
      if (f == QuantFormat::kF32) return gemv_float<QuantFormat::kF32>(x, M, K, w, N, y, ep);
      if (f == QuantFormat::kF16) return gemv_float<QuantFormat::kF16>(x, M, K, w, N, y, ep);
      return gemv_float<QuantFormat::kBF16>(x, M, K, w, N, y, ep);
    }
#endif
    parallel_for(0, N, 16, [&](int64_t b, int64_t e) {
      float_format_rows(f, x, M, K, w, N, y, b, e);
      ep.apply(y, N, 0, M, b, e);
    });
    return;
  }
  thread_local ActRows buffers;
  ActRows& act = buffers;  // a local reference: the workers' lambdas capture this thread's
  quantize_activations(x, M, K, act);
  with_block_format(f, [&]<class F>() {
#if RLX_QM_LEVEL >= 1
    if (M <= kGemvRows) return gemv_block<F>(act, M, K, w, N, y, ep);
#endif
#if RLX_QM_LEVEL == 2
    const int64_t panels = (N + kPanelCols - 1) / kPanelCols;
    return parallel_for(0, panels, 1,
                        [&](int64_t b, int64_t e) { panel_gemm<F>(act, M, K, w, N, y, b, e, ep); });
#endif
    const int64_t tiles = (N + kNR - 1) / kNR;
    parallel_for(0, tiles, 8, [&](int64_t b, int64_t e) {
      block_format_tiles<F>(act, M, K, w, N, y, b, e, ep);
    });
  });
}

// dequant_rows for block format f; the float formats as ir's dequantize_row.
inline void dequantize(QuantFormat f, const uint8_t* w, int64_t rows, int64_t K, float* out) {
  if (f == QuantFormat::kF32 || f == QuantFormat::kF16 || f == QuantFormat::kBF16) {
    const int64_t rb = quant_row_bytes(f, K);
    for (int64_t r = 0; r < rows; ++r) dequantize_row(f, w + r * rb, out + r * K, K);
    return;
  }
  with_block_format(f, [&]<class F>() { dequant_rows<F>(w, rows, K, out); });
}

// quant_matmul_exact below kExactSgemmRows rows: each weight row dequantized to f32 once
// (dequant_rows) and dotted with every row of x; the float formats take matmul's float paths,
// which are exact already.
inline void exact_matmul(QuantFormat f, const float* x, int64_t M, int64_t K, const uint8_t* w,
                         int64_t N, float* y, const QuantEpilogue& ep) {
  if (f == QuantFormat::kF32 || f == QuantFormat::kF16 || f == QuantFormat::kBF16)
    return matmul(f, x, M, K, w, N, y, ep);
  const int64_t row_bytes = quant_row_bytes(f, K);
  parallel_for(0, N, 16, [&](int64_t b, int64_t e) {
    thread_local std::vector<float> row;
    row.resize(static_cast<size_t>(K));
    for (int64_t n = b; n < e; ++n) {
      dequantize(f, w + n * row_bytes, 1, K, row.data());
      for (int64_t m = 0; m < M; ++m) y[m * N + n] = dot_f32(x + m * K, row.data(), K);
    }
    ep.apply(y, N, 0, M, b, e);
  });
}

// NOLINTEND(readability-function-size)
