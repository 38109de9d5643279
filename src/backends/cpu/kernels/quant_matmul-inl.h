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

// ---- weight unpacking: one block to bytes + per-16 scale and offset coefficient
#if RLX_QM_LEVEL >= 1
// 16 bytes of nibbles -> 32 bytes: low nibbles first, then high nibbles.
inline void nibbles_to_bytes(const uint8_t* qs, uint8_t* q) {
  const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  const __m128i m = _mm_set1_epi8(0x0F);
  const __m256i r = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(v, 4), m), _mm_and_si128(v, m));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(q), r);
}
#else
inline void nibbles_to_bytes(const uint8_t* qs, uint8_t* q) {
  for (int j = 0; j < 16; ++j) {
    q[j] = qs[j] & 0xF;
    q[j + 16] = qs[j] >> 4;
  }
}
#endif
inline void unpack_q4_0(const uint8_t* b, uint8_t* q, float* sc, float* cf) {
  const float d = ld_f16(b);
  nibbles_to_bytes(b + 2, q);
  sc[0] = sc[1] = d;
  cf[0] = cf[1] = -8 * d;
}
inline void unpack_q4_1(const uint8_t* b, uint8_t* q, float* sc, float* cf) {
  const float d = ld_f16(b), m = ld_f16(b + 2);
  nibbles_to_bytes(b + 4, q);
  sc[0] = sc[1] = d;
  cf[0] = cf[1] = m;
}
inline void unpack_q5(const uint8_t* qs, uint32_t qh, uint8_t* q) {
  for (int j = 0; j < 16; ++j) {
    q[j] = uint8_t((qs[j] & 0xF) | (((qh >> j) & 1) << 4));
    q[j + 16] = uint8_t((qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4));
  }
}
inline void unpack_q5_0(const uint8_t* b, uint8_t* q, float* sc, float* cf) {
  const float d = ld_f16(b);
  uint32_t qh;
  std::memcpy(&qh, b + 2, 4);
  unpack_q5(b + 6, qh, q);
  sc[0] = sc[1] = d;
  cf[0] = cf[1] = -16 * d;
}
inline void unpack_q5_1(const uint8_t* b, uint8_t* q, float* sc, float* cf) {
  const float d = ld_f16(b), m = ld_f16(b + 2);
  uint32_t qh;
  std::memcpy(&qh, b + 4, 4);
  unpack_q5(b + 8, qh, q);
  sc[0] = sc[1] = d;
  cf[0] = cf[1] = m;
}
inline void unpack_q8_0(const uint8_t* b, uint8_t* q, float* sc, float*) {
  std::memcpy(q, b + 2, 32);
  sc[0] = sc[1] = ld_f16(b);
}
inline void unpack_iq4_nl(const uint8_t* b, uint8_t* q, float* sc, float*) {
  for (int j = 0; j < 16; ++j) {
    q[j] = uint8_t(kIQ4NLValues[b[2 + j] & 0xF]);
    q[j + 16] = uint8_t(kIQ4NLValues[b[2 + j] >> 4]);
  }
  sc[0] = sc[1] = ld_f16(b);
}
inline void unpack_q8_k(const uint8_t* b, uint8_t* q, float* sc, float*) {
  float d;
  std::memcpy(&d, b, 4);
  std::memcpy(q, b + 4, 256);
  for (int g = 0; g < 16; ++g) sc[g] = d;
}
inline void unpack_2bit(const uint8_t* qs, uint8_t* q) {  // Q2_K / Q3_K low bits
  for (int h = 0; h < 2; ++h)
    for (int j = 0; j < 4; ++j)
      for (int l = 0; l < 32; ++l) q[128 * h + 32 * j + l] = (qs[32 * h + l] >> (2 * j)) & 3;
}
inline void unpack_q2_k(const uint8_t* b, uint8_t* q, float* sc, float* cf) {
  const float d = ld_f16(b + 80), dmin = ld_f16(b + 82);
  unpack_2bit(b + 16, q);
  for (int g = 0; g < 16; ++g) {
    sc[g] = d * float(b[g] & 0xF);
    cf[g] = -(dmin * float(b[g] >> 4));
  }
}
inline void unpack_q3_k(const uint8_t* b, uint8_t* q, float* sc, float* cf) {
  const float d = ld_f16(b + 108);
  unpack_2bit(b + 32, q);
  for (int e = 0; e < 256; ++e) q[e] = uint8_t(q[e] | (((b[e % 32] >> (e / 32)) & 1) << 2));
  const uint8_t* s = b + 96;
  for (int g = 0; g < 16; ++g) {
    int low = g < 8 ? (s[g] & 0xF) : (s[g - 8] >> 4);
    int high = (s[8 + g % 4] >> (2 * (g / 4))) & 3;
    sc[g] = d * float((low | (high << 4)) - 32);
    cf[g] = -4 * sc[g];
  }
}
inline void k4_scales(const uint8_t* b, float* sc, float* cf) {  // Q4_K / Q5_K
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
inline void unpack_q4_k(const uint8_t* b, uint8_t* q, float* sc, float* cf) {
  k4_scales(b, sc, cf);
  const uint8_t* qs = b + 16;
#if RLX_QM_LEVEL >= 1
  const __m256i m = _mm256_set1_epi8(0x0F);
  for (int c = 0; c < 4; ++c) {
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs + 32 * c));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + 64 * c), _mm256_and_si256(v, m));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + 64 * c + 32),
                        _mm256_and_si256(_mm256_srli_epi16(v, 4), m));
  }
#else
  for (int c = 0; c < 4; ++c)
    for (int l = 0; l < 32; ++l) {
      q[64 * c + l] = qs[32 * c + l] & 0xF;
      q[64 * c + 32 + l] = qs[32 * c + l] >> 4;
    }
#endif
}
inline void unpack_q5_k(const uint8_t* b, uint8_t* q, float* sc, float* cf) {
  k4_scales(b, sc, cf);
  const uint8_t* qh = b + 16;
  const uint8_t* qs = b + 48;
  for (int c = 0; c < 4; ++c)
    for (int l = 0; l < 32; ++l) {
      q[64 * c + l] = uint8_t((qs[32 * c + l] & 0xF) | (((qh[l] >> (2 * c)) & 1) << 4));
      q[64 * c + 32 + l] = uint8_t((qs[32 * c + l] >> 4) | (((qh[l] >> (2 * c + 1)) & 1) << 4));
    }
}
#if RLX_QM_LEVEL >= 1
inline __m256i ld(const uint8_t* p) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}
inline void st(uint8_t* p, __m256i v) { _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), v); }
#endif
inline void unpack_q6_k(const uint8_t* b, uint8_t* q, float* sc, float* cf) {
  const uint8_t* ql = b;
  const uint8_t* qh = b + 128;
  const float d = ld_f16(b + 208);
#if RLX_QM_LEVEL >= 1
  const __m256i m4 = _mm256_set1_epi8(0x0F), m2 = _mm256_set1_epi8(0x30);
  for (int h = 0; h < 2; ++h) {
    const __m256i lo0 = ld(ql + 64 * h), lo1 = ld(ql + 64 * h + 32), hi = ld(qh + 32 * h);
    // high 2 bits moved to bits 4..5 (16-bit shifts; the mask drops what crossed bytes)
    const __m256i h0 = _mm256_and_si256(_mm256_slli_epi16(hi, 4), m2);
    const __m256i h1 = _mm256_and_si256(_mm256_slli_epi16(hi, 2), m2);
    const __m256i h2 = _mm256_and_si256(hi, m2);
    const __m256i h3 = _mm256_and_si256(_mm256_srli_epi16(hi, 2), m2);
    st(q + 128 * h, _mm256_or_si256(_mm256_and_si256(lo0, m4), h0));
    st(q + 128 * h + 32, _mm256_or_si256(_mm256_and_si256(lo1, m4), h1));
    st(q + 128 * h + 64, _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(lo0, 4), m4), h2));
    st(q + 128 * h + 96, _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(lo1, 4), m4), h3));
  }
#else
  for (int h = 0; h < 2; ++h)
    for (int l = 0; l < 32; ++l) {
      const uint8_t lo0 = ql[64 * h + l], lo1 = ql[64 * h + 32 + l], hi = qh[32 * h + l];
      q[128 * h + l] = uint8_t((lo0 & 0xF) | ((hi & 3) << 4));
      q[128 * h + 32 + l] = uint8_t((lo1 & 0xF) | (((hi >> 2) & 3) << 4));
      q[128 * h + 64 + l] = uint8_t((lo0 >> 4) | (((hi >> 4) & 3) << 4));
      q[128 * h + 96 + l] = uint8_t((lo1 >> 4) | (((hi >> 6) & 3) << 4));
    }
#endif
  for (int g = 0; g < 16; ++g) {
    sc[g] = d * float(int8_t(b[192 + g]));
    cf[g] = -32 * sc[g];
  }
}

using UnpackFn = void (*)(const uint8_t*, uint8_t*, float*, float*);

template <UnpackFn kFn>
inline void unpack_blocks(const QuantFormatInfo& info, const uint8_t* w, int64_t K, uint8_t* q,
                          float* sc, float* cf) {
  const int64_t bs = info.block_size, groups = bs / 16;
  for (int64_t b = 0; b < K / bs; ++b)
    kFn(w + b * info.bytes_per_block, q + b * bs, sc + b * groups, cf + b * groups);
}

// A weight row of K elements into the panel row (q, sc, cf).
inline void unpack_row(QuantFormat f, const QuantFormatInfo& info, const uint8_t* w, int64_t K,
                       uint8_t* q, float* sc, float* cf) {
  switch (f) {
    case QuantFormat::kQ4_0:
      return unpack_blocks<unpack_q4_0>(info, w, K, q, sc, cf);
    case QuantFormat::kQ4_1:
      return unpack_blocks<unpack_q4_1>(info, w, K, q, sc, cf);
    case QuantFormat::kQ5_0:
      return unpack_blocks<unpack_q5_0>(info, w, K, q, sc, cf);
    case QuantFormat::kQ5_1:
      return unpack_blocks<unpack_q5_1>(info, w, K, q, sc, cf);
    case QuantFormat::kQ8_0:
      return unpack_blocks<unpack_q8_0>(info, w, K, q, sc, cf);
    case QuantFormat::kQ2_K:
      return unpack_blocks<unpack_q2_k>(info, w, K, q, sc, cf);
    case QuantFormat::kQ3_K:
      return unpack_blocks<unpack_q3_k>(info, w, K, q, sc, cf);
    case QuantFormat::kQ4_K:
      return unpack_blocks<unpack_q4_k>(info, w, K, q, sc, cf);
    case QuantFormat::kQ5_K:
      return unpack_blocks<unpack_q5_k>(info, w, K, q, sc, cf);
    case QuantFormat::kQ6_K:
      return unpack_blocks<unpack_q6_k>(info, w, K, q, sc, cf);
    case QuantFormat::kQ8_K:
      return unpack_blocks<unpack_q8_k>(info, w, K, q, sc, cf);
    case QuantFormat::kIQ4_NL:
      return unpack_blocks<unpack_iq4_nl>(info, w, K, q, sc, cf);
    default:
      return;  // float formats take float_format_rows
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

// Quantized activations of all M rows (shared by the threads).
struct ActRows {
  std::vector<int8_t> q;
  std::vector<float> d, s;
};

// Output columns [t0 * kNR, t1 * kNR) of y for a block format.
inline void block_format_tiles(QuantFormat f, const ActRows& act, int64_t M, int64_t K,
                               const uint8_t* w, int64_t N, float* y, int64_t t0, int64_t t1) {
  const QuantFormatInfo& info = quant_format_info(f);
  const bool is_signed =
      f == QuantFormat::kQ8_0 || f == QuantFormat::kQ8_K || f == QuantFormat::kIQ4_NL;
  const int64_t row_bytes = K / info.block_size * info.bytes_per_block;
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
    for (int n = 0; n < kNR; ++n) {
      if (n < nr) {
        unpack_row(f, info, w + (n0 + n) * row_bytes, K, pq.data() + n * K, psc.data() + n * G,
                   pcf.data() + n * G);
      } else {  // padding rows of the last tile: zero weights
        std::memset(pq.data() + n * K, 0, size_t(K));
        std::fill_n(psc.data() + n * G, G, 0.0f);
        std::fill_n(pcf.data() + n * G, G, 0.0f);
      }
    }
    for (int64_t m0 = 0; m0 < M; m0 += 4) {
      const int mr = int(std::min<int64_t>(4, M - m0));
      const int8_t* aq[4];
      const float* ad[4];
      for (int m = 0; m < 4; ++m) {
        const int64_t row = m0 + std::min(m, mr - 1);
        aq[m] = act.q.data() + row * K;
        ad[m] = act.d.data() + row * nsub;
      }
      float out[4][4];
      auto run = [&]<int MR>() {
        if (is_signed) {
          int_tile<MR, true>(wq, wsc, aq, ad, nsub, out);
        } else {
          int_tile<MR, false>(wq, wsc, aq, ad, nsub, out);
        }
      };
      switch (mr) {
        case 1:
          run.template operator()<1>();
          break;
        case 2:
          run.template operator()<2>();
          break;
        case 3:
          run.template operator()<3>();
          break;
        default:
          run.template operator()<4>();
          break;
      }
      for (int m = 0; m < mr; ++m)
        for (int n = 0; n < nr; ++n) {
          float v = out[m][n];
          if (!is_signed) v += dot_f32(pcf.data() + n * G, act.s.data() + (m0 + m) * G, G);
          y[(m0 + m) * N + n0 + n] = v;
        }
    }
  }
}

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
      for (int64_t k = 0; k < K; ++k) row[size_t(k)] = ld_f16(src + 2 * k);
    } else {
      for (int64_t k = 0; k < K; ++k) {
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
  ActRows act;
  act.q.resize(size_t(M * K));
  act.d.resize(size_t(M * (K / 32)));
  act.s.resize(size_t(M * (K / 16)));
  parallel_for(0, M, 8, [&](int64_t b, int64_t e) {
    for (int64_t m = b; m < e; ++m)
      quantize_act_row(x + m * K, K, act.q.data() + m * K, act.d.data() + m * (K / 32),
                       act.s.data() + m * (K / 16));
  });
  const int64_t tiles = (N + kNR - 1) / kNR;
  parallel_for(0, tiles, 8,
               [&](int64_t b, int64_t e) { block_format_tiles(f, act, M, K, w, N, y, b, e); });
}

// NOLINTEND(readability-function-size)
