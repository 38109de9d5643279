// The quantized matmul kernel body, compiled once per target: quant_matmul.cc includes it
// three times, inside a namespace of its own and under `#pragma GCC target`, with
// RLX_QM_LEVEL 0 (scalar), 1 (AVX2 + FMA + F16C) or 2 (AVX-512 VL/BW + VNNI). No include
// guard on purpose.
//
// Data layout (quant_matmul.h): an activation row is q int8[K], d f32[K / 32] and the half-block
// sums s f32[K / 16] (s = d * sum q); a weight panel row is q u8/i8[K], scale f32[K / 16] and
// offset coefficient f32[K / 16]. Weight value k = scale[k / 16] * q[k] (+ an offset that the
// coefficient times the activation sum accounts for), so
//   y = sum_j sum_h scale[2j + h] d[j] idot_h(j) + sum_g coef[g] s[g].

// NOLINTBEGIN(readability-function-size)

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

// ---- weight formats
// One struct per block format: kSub 32-element sub-blocks per block of kBytes bytes; kSigned: the
// sub-block bytes are the int8 weights (weight = scale * q), else u8 with weight = scale * q +
// coef, the coefficient times the activation sums accounting for the zero point or min; kPer16: the
// two 16-element halves of a sub-block have scales of their own. scales(b, sc, cf) decodes the
// block's 2 * kSub per-16 scales and coefficients once; elem(b, s, i) is byte i of sub-block s
// (the scalar reference), sub(b, s) the same 32 bytes in a register (SIMD targets).
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
#endif
inline uint8_t nibble(const uint8_t* qs, int i) { return i < 16 ? qs[i] & 0xF : qs[i - 16] >> 4; }
inline uint32_t ld_u32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
inline void same_scale(float d, float c, float* sc, float* cf) {
  sc[0] = sc[1] = d;
  cf[0] = cf[1] = c;
}

// Q4_0 / Q4_1 / Q5_0 / Q5_1: d f16 | m f16 (kMin) | qh u32 (kFifth) | qs[16] nibbles;
// weight = d * q + m, or without a min d * (q - 8) (Q4_0) / d * (q - 16) (Q5_0).
template <bool kMin, bool kFifth>
struct FmtQ45 {
  static constexpr int kQh = kMin ? 4 : 2, kQs = kQh + (kFifth ? 4 : 0);
  static constexpr int kSub = 1, kBytes = kQs + 16;
  static constexpr bool kSigned = false, kPer16 = false;
  static void scales(const uint8_t* b, float* sc, float* cf) {
    const float d = ld_f16(b);
    same_scale(d, kMin ? ld_f16(b + 2) : -(kFifth ? 16.0f : 8.0f) * d, sc, cf);
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
#endif
};
using FmtQ4_0 = FmtQ45<false, false>;
using FmtQ4_1 = FmtQ45<true, false>;
using FmtQ5_0 = FmtQ45<false, true>;
using FmtQ5_1 = FmtQ45<true, true>;
struct FmtQ8_0 {
  static constexpr int kSub = 1, kBytes = 34;
  static constexpr bool kSigned = true, kPer16 = false;
  static void scales(const uint8_t* b, float* sc, float* cf) { same_scale(ld_f16(b), 0, sc, cf); }
  static uint8_t elem(const uint8_t* b, int, int i) { return b[2 + i]; }
#if RLX_QM_LEVEL >= 1
  static __m256i sub(const uint8_t* b, int) { return ld(b + 2); }
#endif
};
struct FmtIQ4_NL {
  static constexpr int kSub = 1, kBytes = 18;
  static constexpr bool kSigned = true, kPer16 = false;
  static void scales(const uint8_t* b, float* sc, float* cf) { same_scale(ld_f16(b), 0, sc, cf); }
  static uint8_t elem(const uint8_t* b, int, int i) {
    return uint8_t(kIQ4NLValues[nibble(b + 2, i)]);
  }
#if RLX_QM_LEVEL >= 1
  static __m256i sub(const uint8_t* b, int) {  // vpshufb: the nibbles index the 16 values
    const __m128i t = _mm_loadu_si128(reinterpret_cast<const __m128i*>(kIQ4NLValues));
    return _mm256_shuffle_epi8(_mm256_broadcastsi128_si256(t), nibbles(b + 2));
  }
#endif
};
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
#endif
};
struct FmtQ3_K {
  static constexpr int kSub = 8, kBytes = 110;
  static constexpr bool kSigned = false, kPer16 = true;
  // The 16 6-bit scales (ggml's kmask unpacking of scales[12]: low nibbles, then 2 high bits).
  static void scales(const uint8_t* b, float* sc, float* cf) {
    const float d = ld_f16(b + 108);
    uint32_t aux[4];
    std::memcpy(aux, b + 96, 12);
    const uint32_t tmp = aux[2], m4 = 0x0f0f0f0f, m2 = 0x03030303;
    aux[2] = ((aux[0] >> 4) & m4) | (((tmp >> 4) & m2) << 4);
    aux[3] = ((aux[1] >> 4) & m4) | (((tmp >> 6) & m2) << 4);
    aux[0] = (aux[0] & m4) | ((tmp & m2) << 4);
    aux[1] = (aux[1] & m4) | (((tmp >> 2) & m2) << 4);
    uint8_t v[16];
    std::memcpy(v, aux, 16);
    for (int g = 0; g < 16; ++g) {
      sc[g] = d * float(int(v[g]) - 32);
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
#endif
};
// Q4_K / Q5_K: 8 6-bit scales and mins (ggml's get_scale_min_k4), one per sub-block.
inline void k4_scales(const uint8_t* b, float* sc, float* cf) {
  const float d = ld_f16(b), dmin = ld_f16(b + 2);
  const uint8_t* s = b + 4;
  for (int j = 0; j < 8; ++j) {
    int scale, min;
    if (j < 4) {
      scale = s[j] & 63;
      min = s[j + 4] & 63;
    } else {
      scale = (s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4);
      min = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
    }
    sc[2 * j] = sc[2 * j + 1] = d * float(scale);
    cf[2 * j] = cf[2 * j + 1] = -(dmin * float(min));
  }
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
  static void scales(const uint8_t* b, float* sc, float* cf) { k4_scales(b, sc, cf); }
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
#endif
};
struct FmtQ8_K {
  static constexpr int kSub = 8, kBytes = 292;
  static constexpr bool kSigned = true, kPer16 = false;
  static void scales(const uint8_t* b, float* sc, float* cf) {
    float d;
    std::memcpy(&d, b, 4);
    std::fill_n(sc, 16, d);
    std::fill_n(cf, 16, 0.0f);
  }
  static uint8_t elem(const uint8_t* b, int s, int i) { return b[4 + 32 * s + i]; }
#if RLX_QM_LEVEL >= 1
  static __m256i sub(const uint8_t* b, int s) { return ld(b + 4 + 32 * s); }
#endif
};

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
      return;  // float formats take float_format_rows
  }
}

// A weight row of K elements into the panel row (q, sc, cf) of the GEMM path.
template <class F>
inline void unpack_row(const uint8_t* w, int64_t K, uint8_t* q, float* sc, float* cf) {
  constexpr int64_t kBlock = 32 * F::kSub;
  for (int64_t b = 0; b < K / kBlock; ++b) {
    const uint8_t* blk = w + b * F::kBytes;
    F::scales(blk, sc + b * 2 * F::kSub, cf + b * 2 * F::kSub);
    for (int s = 0; s < F::kSub; ++s) {
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
// for the unsigned formats), per 16 elements, the GEMM path's unpacking.
template <class F>
inline void dequant_rows(const uint8_t* w, int64_t rows, int64_t K, float* out) {
  constexpr int64_t kBlock = 32 * F::kSub;
  const int64_t row_bytes = K / kBlock * F::kBytes;
  alignas(32) uint8_t q[32];
  float sc[2 * F::kSub], cf[2 * F::kSub];
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
          const __m256 a = _mm256_set1_ps(sc[2 * s + j / 2]);
          _mm256_storeu_ps(o + 8 * j,
                           F::kSigned ? _mm256_mul_ps(a, v)
                                      : _mm256_fmadd_ps(a, v, _mm256_set1_ps(cf[2 * s + j / 2])));
        }
#else
        for (int i = 0; i < 32; ++i) q[i] = F::elem(blk, s, i);
        for (int i = 0; i < 32; ++i) {
          const float a = sc[2 * s + i / 16];
          o[i] =
              F::kSigned ? a * float(int8_t(q[i])) : std::fma(a, float(q[i]), cf[2 * s + i / 16]);
        }
#endif
      }
    }
  }
}

// ---- f32 dot product (offset terms, float weight formats)
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
  s0 = _mm256_add_ps(s0, s1);
  __m128 r = _mm_add_ps(_mm256_castps256_ps128(s0), _mm256_extractf128_ps(s0, 1));
  r = _mm_add_ps(r, _mm_movehl_ps(r, r));
  r = _mm_add_ss(r, _mm_movehdup_ps(r));
  float s = _mm_cvtss_f32(r);
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
#else
  float s = 0;
  for (int64_t i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
#endif
}

#if RLX_QM_LEVEL >= 1
inline int hsum_epi32(__m256i x) {
  __m128i r = _mm_add_epi32(_mm256_castsi256_si128(x), _mm256_extracti128_si256(x, 1));
  r = _mm_add_epi32(r, _mm_shuffle_epi32(r, 0x4E));
  r = _mm_add_epi32(r, _mm_shuffle_epi32(r, 0xB1));
  return _mm_cvtsi128_si32(r);
}
#endif

// ---- activation quantization: one row of K (a multiple of 32)
inline void quantize_act_row(const float* x, int64_t K, int8_t* q, float* d, float* s) {
  for (int64_t b = 0; b < K / 32; ++b) {
    const float* xb = x + 32 * b;
#if RLX_QM_LEVEL >= 1
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 v[4];
    __m256 amax = _mm256_setzero_ps();
    for (int i = 0; i < 4; ++i) {
      v[i] = _mm256_loadu_ps(xb + 8 * i);
      amax = _mm256_max_ps(amax, _mm256_andnot_ps(sign, v[i]));
    }
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(amax), _mm256_extractf128_ps(amax, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
    const float am = _mm_cvtss_f32(m4);
    const float db = am / 127.0f;
    const float id = db != 0 ? 1.0f / db : 0.0f;
    __m256i qi[4];
    for (int i = 0; i < 4; ++i)  // round to nearest even (MXCSR default), as nearbyint
      qi[i] = _mm256_cvtps_epi32(_mm256_mul_ps(v[i], _mm256_set1_ps(id)));
    const __m256i lo = _mm256_add_epi32(qi[0], qi[1]), hi = _mm256_add_epi32(qi[2], qi[3]);
    const __m256i p01 = _mm256_packs_epi32(qi[0], qi[1]), p23 = _mm256_packs_epi32(qi[2], qi[3]);
    __m256i p = _mm256_packs_epi16(p01, p23);
    p = _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + 32 * b), p);
    d[b] = db;
    s[2 * b] = db * float(hsum_epi32(lo));
    s[2 * b + 1] = db * float(hsum_epi32(hi));
#else
    float am = 0;
    for (int i = 0; i < 32; ++i) am = std::max(am, std::fabs(xb[i]));
    const float db = am / 127.0f;
    const float id = db != 0 ? 1.0f / db : 0.0f;
    int sum[2] = {0, 0};
    for (int i = 0; i < 32; ++i) {
      const int v = int(std::nearbyint(xb[i] * id));
      q[32 * b + i] = int8_t(v);
      sum[i / 16] += v;
    }
    d[b] = db;
    s[2 * b] = db * float(sum[0]);
    s[2 * b + 1] = db * float(sum[1]);
#endif
  }
}

// ---- the integer micro-kernel: MR activation rows x kNR panel rows
#if RLX_QM_LEVEL >= 1
inline __m256i dot_u8s8(__m256i u, __m256i s) {
#if RLX_QM_LEVEL == 2
  return _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s);
#else
  return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
#endif
}
inline float hsum_ps(__m256 v) {
  __m128 r = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  r = _mm_add_ps(r, _mm_movehl_ps(r, r));
  r = _mm_add_ss(r, _mm_movehdup_ps(r));
  return _mm_cvtss_f32(r);
}
// Activation rows up to which the SIMD targets take the GEMV path.
inline constexpr int64_t kGemvRows = 8;
#if RLX_QM_LEVEL == 2
inline constexpr int kNR = 4;  // 32 vector registers: 4 x 4 accumulators
#else
inline constexpr int kNR = 2;  // 16 vector registers: 4 x 2 accumulators
#endif

template <int MR, bool kSigned>
inline void int_tile(const uint8_t* const* wq, const float* const* wsc, const int8_t* const* aq,
                     const float* const* ad, int64_t nsub, float out[4][4]) {
  __m256 acc[MR][kNR];
  for (int m = 0; m < MR; ++m)
    for (int n = 0; n < kNR; ++n) acc[m][n] = _mm256_setzero_ps();
  for (int64_t j = 0; j < nsub; ++j) {
    __m256i w[kNR];
    __m256 sv[kNR];
    for (int n = 0; n < kNR; ++n) {
      w[n] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wq[n] + 32 * j));
      sv[n] = _mm256_set_m128(_mm_set1_ps(wsc[n][2 * j + 1]), _mm_set1_ps(wsc[n][2 * j]));
    }
    for (int m = 0; m < MR; ++m) {
      const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(aq[m] + 32 * j));
      const __m256 da = _mm256_set1_ps(ad[m][j]);
      for (int n = 0; n < kNR; ++n) {
        __m256i dot;
        if constexpr (kSigned) {
          dot = dot_u8s8(_mm256_sign_epi8(w[n], w[n]), _mm256_sign_epi8(a, w[n]));
        } else {
          dot = dot_u8s8(w[n], a);
        }
        acc[m][n] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_mul_ps(sv[n], da), acc[m][n]);
      }
    }
  }
  for (int m = 0; m < MR; ++m)
    for (int n = 0; n < kNR; ++n) out[m][n] = hsum_ps(acc[m][n]);
}
#else
inline constexpr int kNR = 2;

template <int MR, bool kSigned>
inline void int_tile(const uint8_t* const* wq, const float* const* wsc, const int8_t* const* aq,
                     const float* const* ad, int64_t nsub, float out[4][4]) {
  for (int m = 0; m < MR; ++m)
    for (int n = 0; n < kNR; ++n) {
      float acc = 0;
      for (int64_t j = 0; j < nsub; ++j) {
        int32_t sum[2] = {0, 0};
        for (int i = 0; i < 32; ++i) {
          const int wv = kSigned ? int(int8_t(wq[n][32 * j + i])) : int(wq[n][32 * j + i]);
          sum[i / 16] += wv * int(aq[m][32 * j + i]);
        }
        acc += (wsc[n][2 * j] * ad[m][j]) * float(sum[0]) +
               (wsc[n][2 * j + 1] * ad[m][j]) * float(sum[1]);
      }
      out[m][n] = acc;
    }
}
#endif

// Quantized activations of all M rows (shared by the threads); thread_local in matmul, so the
// buffers only grow and a call allocates nothing once they are large enough.
struct ActRows {
  std::vector<int8_t> q;
  std::vector<float> d, s;
};

// Calls fn.template operator()<MR>(m0, aq, ad, as) for each group of up to 4 activation rows
// from m0 (rows past M repeat the last row), the row pointers into q, d and s of act.
template <class Fn>
inline void row_groups(const ActRows& act, int64_t M, int64_t K, Fn&& fn) {
  for (int64_t m0 = 0; m0 < M; m0 += 4) {
    const int mr = int(std::min<int64_t>(4, M - m0));
    const int8_t* aq[4];
    const float *ad[4], *as[4];
    for (int m = 0; m < 4; ++m) {
      const int64_t row = m0 + std::min(m, mr - 1);
      aq[m] = act.q.data() + row * K;
      ad[m] = act.d.data() + row * (K / 32);
      as[m] = act.s.data() + row * (K / 16);
    }
    switch (mr) {
      case 1:
        fn.template operator()<1>(m0, aq, ad, as);
        break;
      case 2:
        fn.template operator()<2>(m0, aq, ad, as);
        break;
      case 3:
        fn.template operator()<3>(m0, aq, ad, as);
        break;
      default:
        fn.template operator()<4>(m0, aq, ad, as);
        break;
    }
  }
}

// GEMM path: output columns [t0 * kNR, t1 * kNR) of y for block format F, each panel of kNR
// weight rows unpacked once to bytes and reused by every group of activation rows.
template <class F>
inline void block_format_tiles(const ActRows& act, int64_t M, int64_t K, const uint8_t* w,
                               int64_t N, float* y, int64_t t0, int64_t t1) {
  const int64_t row_bytes = K / (32 * F::kSub) * F::kBytes;
  const int64_t G = K / 16, nsub = K / 32;
  std::vector<uint8_t> pq(static_cast<size_t>(kNR * K));
  std::vector<float> psc(static_cast<size_t>(kNR * G)), pcf(size_t(kNR * G));
  const uint8_t* wq[kNR];
  const float* wsc[kNR];
  for (int n = 0; n < kNR; ++n) {
    wq[n] = pq.data() + n * K;
    wsc[n] = psc.data() + n * G;
  }
  for (int64_t t = t0; t < t1; ++t) {
    const int64_t n0 = t * kNR, nr = std::min<int64_t>(kNR, N - n0);
    for (int n = 0; n < kNR; ++n)  // padding rows of the last tile repeat the last row
      unpack_row<F>(w + std::min(n0 + n, N - 1) * row_bytes, K, pq.data() + n * K,
                    psc.data() + n * G, pcf.data() + n * G);
    row_groups(act, M, K,
               [&]<int MR>(int64_t m0, const int8_t* const* aq, const float* const* ad,
                           const float* const* as) {
                 float out[4][4];
                 int_tile<MR, F::kSigned>(wq, wsc, aq, ad, nsub, out);
                 for (int m = 0; m < MR; ++m)
                   for (int n = 0; n < nr; ++n) {
                     float v = out[m][n];
                     if (!F::kSigned) v += dot_f32(pcf.data() + n * G, as[m], G);
                     y[(m0 + m) * N + n0 + n] = v;
                   }
               });
  }
}

#if RLX_QM_LEVEL >= 1
// GEMV path (M <= kGemvRows): MR activation rows x kNR weight rows over all of K, every weight
// sub-block unpacked in a register (F::sub) and its scales decoded once per block (F::scales);
// the zero point / min terms are coefficient x activation sums (ggml's bsums trick).
template <class F, int MR>
inline void gemv_tile(const uint8_t* const* wr, int64_t nblocks, int64_t prefetch,
                      const int8_t* const* aq, const float* const* ad, const float* const* as,
                      float out[4][4]) {
  __m256 acc[MR][kNR];
  float off[MR][kNR];
  for (int m = 0; m < MR; ++m)
    for (int n = 0; n < kNR; ++n) {
      acc[m][n] = _mm256_setzero_ps();
      off[m][n] = 0;
    }
  for (int64_t b = 0; b < nblocks; ++b) {
    float sc[kNR][2 * F::kSub], cf[kNR][2 * F::kSub];
    for (int n = 0; n < kNR; ++n) {
      // the next tile's rows (the prefetchers lose the short row streams at each new tile)
      _mm_prefetch(reinterpret_cast<const char*>(wr[n] + b * F::kBytes + prefetch), _MM_HINT_T0);
      F::scales(wr[n] + b * F::kBytes, sc[n], cf[n]);
    }
#pragma GCC unroll 8
    for (int s = 0; s < F::kSub; ++s) {
      const int64_t j = b * F::kSub + s;  // activation block
      __m256i wv[kNR];
      __m256 sv[kNR];
      for (int n = 0; n < kNR; ++n) {
        wv[n] = F::sub(wr[n] + b * F::kBytes, s);
        if constexpr (F::kPer16) {
          sv[n] = _mm256_set_m128(_mm_set1_ps(sc[n][2 * s + 1]), _mm_set1_ps(sc[n][2 * s]));
        } else {
          sv[n] = _mm256_set1_ps(sc[n][2 * s]);
        }
      }
      __m256i wabs[kNR];
      if constexpr (F::kSigned)
        for (int n = 0; n < kNR; ++n) wabs[n] = _mm256_sign_epi8(wv[n], wv[n]);
      for (int m = 0; m < MR; ++m) {
        const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(aq[m] + 32 * j));
        const __m256 da = _mm256_set1_ps(ad[m][j]);
        for (int n = 0; n < kNR; ++n) {
          __m256i dot;
          if constexpr (F::kSigned) {
            dot = dot_u8s8(wabs[n], _mm256_sign_epi8(a, wv[n]));
          } else {
            dot = dot_u8s8(wv[n], a);
          }
          acc[m][n] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_mul_ps(sv[n], da), acc[m][n]);
        }
      }
    }
    if constexpr (!F::kSigned) {
      for (int m = 0; m < MR; ++m)
        for (int n = 0; n < kNR; ++n) {
          const float* sx = as[m] + b * 2 * F::kSub;
          if constexpr (F::kSub == 1) {
            off[m][n] += cf[n][0] * (sx[0] + sx[1]);
          } else {
            acc[m][n] = _mm256_fmadd_ps(_mm256_loadu_ps(cf[n]), _mm256_loadu_ps(sx), acc[m][n]);
            acc[m][n] =
                _mm256_fmadd_ps(_mm256_loadu_ps(cf[n] + 8), _mm256_loadu_ps(sx + 8), acc[m][n]);
          }
        }
    }
  }
  for (int m = 0; m < MR; ++m)
    for (int n = 0; n < kNR; ++n) out[m][n] = hsum_ps(acc[m][n]) + off[m][n];
}

// GEMV path: output columns [t0 * kNR, t1 * kNR) of y for block format F.
template <class F>
inline void gemv_tiles(const ActRows& act, int64_t M, int64_t K, const uint8_t* w, int64_t N,
                       float* y, int64_t t0, int64_t t1) {
  const int64_t nblocks = K / (32 * F::kSub), row_bytes = nblocks * F::kBytes;
  for (int64_t t = t0; t < t1; ++t) {
    const int64_t n0 = t * kNR, nr = std::min<int64_t>(kNR, N - n0);
    const uint8_t* wr[kNR];
    for (int n = 0; n < kNR; ++n) wr[n] = w + std::min(n0 + n, N - 1) * row_bytes;
    row_groups(act, M, K,
               [&]<int MR>(int64_t m0, const int8_t* const* aq, const float* const* ad,
                           const float* const* as) {
                 float out[4][4];
                 gemv_tile<F, MR>(wr, nblocks, t + 1 < t1 ? kNR * row_bytes : 0, aq, ad, as, out);
                 for (int m = 0; m < MR; ++m)
                   for (int n = 0; n < nr; ++n) y[(m0 + m) * N + n0 + n] = out[m][n];
               });
  }
}
#endif

// Output columns [n0, n1) for F32 / F16 / BF16 weights: f32 dot products of x with the
// widened weight rows.
inline void float_format_rows(QuantFormat f, const float* x, int64_t M, int64_t K, const uint8_t* w,
                              int64_t N, float* y, int64_t n0, int64_t n1) {
  const int64_t row_bytes = quant_row_bytes(f, K);
  std::vector<float> row(static_cast<size_t>(K));
  for (int64_t n = n0; n < n1; ++n) {
    const uint8_t* src = w + n * row_bytes;
    if (f == QuantFormat::kF32) {
      std::memcpy(row.data(), src, size_t(K) * 4);
    } else if (f == QuantFormat::kF16) {
      int64_t k = 0;
#if RLX_QM_LEVEL >= 1
      for (; k + 8 <= K; k += 8)
        _mm256_storeu_ps(
            row.data() + k,
            _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 2 * k))));
#endif
      for (; k < K; ++k) row[size_t(k)] = ld_f16(src + 2 * k);
    } else {
      int64_t k = 0;
#if RLX_QM_LEVEL >= 1
      for (; k + 8 <= K; k += 8) {  // bf16: the upper halves of f32 words
        const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 2 * k));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(row.data() + k),
                            _mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
      }
#endif
      for (; k < K; ++k) {
        const uint32_t u = uint32_t(src[2 * k] | (src[2 * k + 1] << 8)) << 16;
        std::memcpy(&row[size_t(k)], &u, 4);
      }
    }
    for (int64_t m = 0; m < M; ++m) y[m * N + n] = dot_f32(x + m * K, row.data(), K);
  }
}

inline void matmul(QuantFormat f, const float* x, int64_t M, int64_t K, const uint8_t* w, int64_t N,
                   float* y) {
  if (f == QuantFormat::kF32 || f == QuantFormat::kF16 || f == QuantFormat::kBF16) {
    parallel_for(0, N, 16,
                 [&](int64_t b, int64_t e) { float_format_rows(f, x, M, K, w, N, y, b, e); });
    return;
  }
  thread_local ActRows buffers;
  ActRows& act = buffers;  // a local reference: the workers' lambdas capture this thread's
  act.q.resize(size_t(M * K));
  act.d.resize(size_t(M * (K / 32)));
  act.s.resize(size_t(M * (K / 16)));
  parallel_for(0, M, 8, [&](int64_t b, int64_t e) {
    for (int64_t m = b; m < e; ++m)
      quantize_act_row(x + m * K, K, act.q.data() + m * K, act.d.data() + m * (K / 32),
                       act.s.data() + m * (K / 16));
  });
  const int64_t tiles = (N + kNR - 1) / kNR;
  with_block_format(f, [&]<class F>() {
#if RLX_QM_LEVEL >= 1
    if (M <= kGemvRows) {  // ~64 weight rows per chunk
      parallel_for(0, tiles, 64 / kNR,
                   [&](int64_t b, int64_t e) { gemv_tiles<F>(act, M, K, w, N, y, b, e); });
      return;
    }
#endif
    parallel_for(0, tiles, 8,
                 [&](int64_t b, int64_t e) { block_format_tiles<F>(act, M, K, w, N, y, b, e); });
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

// NOLINTEND(readability-function-size)
