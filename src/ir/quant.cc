// ggml block-quantization formats: the format table, the exact dequantizers and the
// llama.cpp-style reference quantizers (rlx/ir/quant.h). Written from ggml's block layouts and
// the algorithms of ggml-quants.c (quantize_row_*_ref, make_qx_quants, make_qkx2_quants,
// make_q3_quants); every f32 operation of a dequantizer happens in ggml's order so the result
// is bit-equal.
#include "rlx/ir/quant.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include "rlx/ir/dtype.h"
#include "rlx/ir/error.h"

namespace rlx {
namespace {

constexpr QuantFormatInfo kTable[] = {
    {QuantFormat::kF32, "f32", 0, 1, 4, true},
    {QuantFormat::kF16, "f16", 1, 1, 2, true},
    {QuantFormat::kQ4_0, "q4_0", 2, 32, 18, true},
    {QuantFormat::kQ4_1, "q4_1", 3, 32, 20, true},
    {QuantFormat::kQ5_0, "q5_0", 6, 32, 22, true},
    {QuantFormat::kQ5_1, "q5_1", 7, 32, 24, true},
    {QuantFormat::kQ8_0, "q8_0", 8, 32, 34, true},
    {QuantFormat::kQ2_K, "q2_K", 10, 256, 84, true},
    {QuantFormat::kQ3_K, "q3_K", 11, 256, 110, true},
    {QuantFormat::kQ4_K, "q4_K", 12, 256, 144, true},
    {QuantFormat::kQ5_K, "q5_K", 13, 256, 176, true},
    {QuantFormat::kQ6_K, "q6_K", 14, 256, 210, true},
    {QuantFormat::kQ8_K, "q8_K", 15, 256, 292, true},
    {QuantFormat::kIQ4_NL, "iq4_nl", 20, 32, 18, false},
    {QuantFormat::kBF16, "bf16", 30, 1, 2, true},
};

constexpr int kQK = 256;                // QK_K: elements of a K-quant super-block
constexpr float kGroupMaxEps = 1e-15f;  // GROUP_MAX_EPS of ggml-quants.c

std::string known_names() {
  std::string s;
  for (const QuantFormatInfo& i : kTable) s += (s.empty() ? "" : ", ") + std::string(i.name);
  return s;
}

// ---- little-endian fields and f16 scales
float load_f16(const uint8_t* p) { return f16_to_float(f16{uint16_t(p[0] | (p[1] << 8))}); }
void store_f16(uint8_t* p, float v) {
  uint16_t b = f16_from_float(v).bits;
  p[0] = uint8_t(b);
  p[1] = uint8_t(b >> 8);
}
uint32_t load_u32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);  // x86 and every platform rlx builds for are little-endian
  return v;
}
void store_u32(uint8_t* p, uint32_t v) { std::memcpy(p, &v, 4); }

// Round to nearest, ties to even: ggml's nearest_int (the 1.5 * 2^23 trick) for |v| < 2^22.
int nearest_int(float v) { return int(std::nearbyint(v)); }

// The 6-bit scale and min of sub-block j of a Q4_K / Q5_K scales[12] field (get_scale_min_k4).
void scale_min_k4(int j, const uint8_t* q, int* sc, int* m) {
  if (j < 4) {
    *sc = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
    *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

// The 16 6-bit scales of a Q3_K scales[12] field, unbiased (-32 .. 31).
void q3k_scales(const uint8_t* s, int out[16]) {
  for (int j = 0; j < 16; ++j) {
    int low = j < 8 ? (s[j] & 0xF) : (s[j - 8] >> 4);
    int high = (s[8 + j % 4] >> (2 * (j / 4))) & 3;
    out[j] = (low | (high << 4)) - 32;
  }
}

// ---- dequantizers: one block each (nb blocks in the loops below)
void deq_q4_0(const uint8_t* b, float* y) {
  const float d = load_f16(b);
  for (int j = 0; j < 16; ++j) {
    y[j] = float((b[2 + j] & 0xF) - 8) * d;
    y[j + 16] = float((b[2 + j] >> 4) - 8) * d;
  }
}
void deq_q4_1(const uint8_t* b, float* y) {
  const float d = load_f16(b), m = load_f16(b + 2);
  for (int j = 0; j < 16; ++j) {
    y[j] = float(b[4 + j] & 0xF) * d + m;
    y[j + 16] = float(b[4 + j] >> 4) * d + m;
  }
}
void deq_q5_0(const uint8_t* b, float* y) {
  const float d = load_f16(b);
  const uint32_t qh = load_u32(b + 2);
  for (int j = 0; j < 16; ++j) {
    int lo = (b[6 + j] & 0xF) | (((qh >> j) & 1) << 4);
    int hi = (b[6 + j] >> 4) | (((qh >> (j + 16)) & 1) << 4);
    y[j] = float(lo - 16) * d;
    y[j + 16] = float(hi - 16) * d;
  }
}
void deq_q5_1(const uint8_t* b, float* y) {
  const float d = load_f16(b), m = load_f16(b + 2);
  const uint32_t qh = load_u32(b + 4);
  for (int j = 0; j < 16; ++j) {
    int lo = (b[8 + j] & 0xF) | (((qh >> j) & 1) << 4);
    int hi = (b[8 + j] >> 4) | (((qh >> (j + 16)) & 1) << 4);
    y[j] = float(lo) * d + m;
    y[j + 16] = float(hi) * d + m;
  }
}
void deq_q8_0(const uint8_t* b, float* y) {
  const float d = load_f16(b);
  for (int j = 0; j < 32; ++j) y[j] = float(int8_t(b[2 + j])) * d;
}
void deq_iq4_nl(const uint8_t* b, float* y) {
  const float d = load_f16(b);
  for (int j = 0; j < 16; ++j) {
    y[j] = d * float(kIQ4NLValues[b[2 + j] & 0xF]);
    y[j + 16] = d * float(kIQ4NLValues[b[2 + j] >> 4]);
  }
}
void deq_q2_k(const uint8_t* b, float* y) {
  const uint8_t* sc = b;
  const uint8_t* qs = b + 16;
  const float d = load_f16(b + 80), dmin = load_f16(b + 82);
  for (int e = 0; e < kQK; ++e) {
    int r = e % 128;
    int q = (qs[32 * (e / 128) + r % 32] >> (2 * (r / 32))) & 3;
    const float dl = d * float(sc[e / 16] & 0xF), ml = dmin * float(sc[e / 16] >> 4);
    y[e] = dl * float(q) - ml;
  }
}
void deq_q3_k(const uint8_t* b, float* y) {
  const uint8_t* hm = b;
  const uint8_t* qs = b + 32;
  int sc[16];
  q3k_scales(b + 96, sc);
  const float d_all = load_f16(b + 108);
  for (int e = 0; e < kQK; ++e) {
    int r = e % 128;
    int low = (qs[32 * (e / 128) + r % 32] >> (2 * (r / 32))) & 3;
    int high = (hm[e % 32] >> (e / 32)) & 1;
    const float dl = d_all * float(sc[e / 16]);
    y[e] = dl * float(low - (high ? 0 : 4));
  }
}
void deq_q4_k(const uint8_t* b, float* y) {
  const float d = load_f16(b), dmin = load_f16(b + 2);
  const uint8_t* qs = b + 16;
  for (int j = 0; j < 8; ++j) {
    int sc, m;
    scale_min_k4(j, b + 4, &sc, &m);
    const float d1 = d * float(sc), m1 = dmin * float(m);
    const int c = j / 2, shift = 4 * (j % 2);
    for (int l = 0; l < 32; ++l) y[32 * j + l] = d1 * float((qs[32 * c + l] >> shift) & 0xF) - m1;
  }
}
void deq_q5_k(const uint8_t* b, float* y) {
  const float d = load_f16(b), dmin = load_f16(b + 2);
  const uint8_t* qh = b + 16;
  const uint8_t* qs = b + 48;
  for (int j = 0; j < 8; ++j) {
    int sc, m;
    scale_min_k4(j, b + 4, &sc, &m);
    const float d1 = d * float(sc), m1 = dmin * float(m);
    const int c = j / 2, shift = 4 * (j % 2);
    for (int l = 0; l < 32; ++l) {
      int q = ((qs[32 * c + l] >> shift) & 0xF) | (((qh[l] >> j) & 1) << 4);
      y[32 * j + l] = d1 * float(q) - m1;
    }
  }
}
void deq_q6_k(const uint8_t* b, float* y) {
  const uint8_t* ql = b;
  const uint8_t* qh = b + 128;
  const int8_t* sc = reinterpret_cast<const int8_t*>(b + 192);
  const float d = load_f16(b + 208);
  for (int e = 0; e < kQK; ++e) {
    int h = e / 128, j = (e % 128) / 32, l = e % 32;
    int low = (ql[64 * h + 32 * (j % 2) + l] >> (4 * (j / 2))) & 0xF;
    int high = (qh[32 * h + l] >> (2 * j)) & 3;
    y[e] = d * float(sc[e / 16]) * float((low | (high << 4)) - 32);
  }
}
void deq_q8_k(const uint8_t* b, float* y) {
  float d;
  std::memcpy(&d, b, 4);
  for (int j = 0; j < kQK; ++j) y[j] = d * float(int8_t(b[4 + j]));
}

// ---- quantizers (ggml-quants.c's reference algorithms)

// The element of x[0, n) with the largest magnitude, sign kept (the first one on ties), as
// llama.cpp's symmetric quantizers pick their reference value.
float signed_absmax(int n, const float* x) {
  float max = 0, amax = 0;
  for (int i = 0; i < n; ++i) {
    if (std::fabs(x[i]) > amax) {
      amax = std::fabs(x[i]);
      max = x[i];
    }
  }
  return max;
}

// Q4_0 / Q5_0: d = (the signed value of largest magnitude) / -2^(bits-1), q = trunc(x/d + o).
void quant_sym_offset(const float* x, int bits, float* d_out, uint8_t q[32]) {
  const float max = signed_absmax(32, x);
  const int half = 1 << (bits - 1);
  const float d = max / float(-half);
  const float id = d != 0 ? 1.0f / d : 0.0f;
  const float offset = float(half) + 0.5f;
  for (int j = 0; j < 32; ++j)
    q[j] = uint8_t(std::min(2 * half - 1, int(int8_t(x[j] * id + offset))));
  *d_out = d;
}
// Q4_1 / Q5_1: d = (max - min) / (2^bits - 1), q = trunc((x - min)/d + 0.5).
void quant_min_max(const float* x, int bits, float* d_out, float* m_out, uint8_t q[32]) {
  float min = x[0], max = x[0];
  for (int j = 1; j < 32; ++j) {
    min = std::min(min, x[j]);
    max = std::max(max, x[j]);
  }
  const int qmax = (1 << bits) - 1;
  const float d = (max - min) / float(qmax);
  const float id = d != 0 ? 1.0f / d : 0.0f;
  for (int j = 0; j < 32; ++j)
    q[j] = uint8_t(std::min(qmax, int(int8_t((x[j] - min) * id + 0.5f))));
  *d_out = d;
  *m_out = min;
}
void pack_nibbles(const uint8_t q[32], uint8_t* qs) {
  for (int j = 0; j < 16; ++j) qs[j] = uint8_t((q[j] & 0xF) | ((q[j + 16] & 0xF) << 4));
}
uint32_t fifth_bits(const uint8_t q[32]) {
  uint32_t qh = 0;
  for (int j = 0; j < 32; ++j) qh |= uint32_t((q[j] >> 4) & 1) << j;
  return qh;
}

void qnt_q4_0(const float* x, uint8_t* b) {
  float d;
  uint8_t q[32];
  quant_sym_offset(x, 4, &d, q);
  store_f16(b, d);
  pack_nibbles(q, b + 2);
}
void qnt_q4_1(const float* x, uint8_t* b) {
  float d, m;
  uint8_t q[32];
  quant_min_max(x, 4, &d, &m, q);
  store_f16(b, d);
  store_f16(b + 2, m);
  pack_nibbles(q, b + 4);
}
void qnt_q5_0(const float* x, uint8_t* b) {
  float d;
  uint8_t q[32];
  quant_sym_offset(x, 5, &d, q);
  store_f16(b, d);
  store_u32(b + 2, fifth_bits(q));
  pack_nibbles(q, b + 6);
}
void qnt_q5_1(const float* x, uint8_t* b) {
  float d, m;
  uint8_t q[32];
  quant_min_max(x, 5, &d, &m, q);
  store_f16(b, d);
  store_f16(b + 2, m);
  store_u32(b + 4, fifth_bits(q));
  pack_nibbles(q, b + 8);
}
void qnt_q8_0(const float* x, uint8_t* b) {
  float amax = 0;
  for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[j]));
  const float d = amax / 127.0f;
  const float id = d != 0 ? 1.0f / d : 0.0f;
  store_f16(b, d);
  for (int j = 0; j < 32; ++j) b[2 + j] = uint8_t(int8_t(std::round(x[j] * id)));  // roundf
}
void qnt_q8_k(const float* x, uint8_t* b) {
  const float max = signed_absmax(kQK, x);
  std::memset(b, 0, 292);
  if (max == 0) return;
  const float iscale = -127.0f / max;
  int8_t* qs = reinterpret_cast<int8_t*>(b + 4);
  for (int j = 0; j < kQK; ++j) qs[j] = int8_t(std::min(127, nearest_int(iscale * x[j])));
  for (int j = 0; j < 16; ++j) {
    int16_t sum = 0;
    for (int i = 0; i < 16; ++i) sum = int16_t(sum + qs[16 * j + i]);
    std::memcpy(b + 260 + 2 * j, &sum, 2);
  }
  const float d = 1 / iscale;
  std::memcpy(b, &d, 4);
}

// make_qx_quants: symmetric levels L in [0, 2 nmax) (value = scale * (L - nmax)), weighted
// least squares over 19 candidate scales around -nmax / max. rmse_type 1: weights x^2.
float make_qx_quants(int n, int nmax, const float* x, int8_t* L) {
  const float max = signed_absmax(n, x);
  if (std::fabs(max) < kGroupMaxEps) {
    std::fill(L, L + n, int8_t{0});
    return 0;
  }
  auto level = [&](float iscale, int i) {
    return std::max(-nmax, std::min(nmax - 1, nearest_int(iscale * x[i])));
  };
  float iscale = -float(nmax) / max;
  float sumlx = 0, suml2 = 0;
  for (int i = 0; i < n; ++i) {
    int l = level(iscale, i);
    L[i] = int8_t(l + nmax);
    float w = x[i] * x[i];
    sumlx += w * x[i] * float(l);
    suml2 += w * float(l) * float(l);
  }
  float scale = suml2 != 0 ? sumlx / suml2 : 0.0f;
  float best = scale * sumlx;
  for (int is = -9; is <= 9; ++is) {
    if (is == 0) continue;
    iscale = -(float(nmax) + 0.1f * float(is)) / max;
    sumlx = suml2 = 0;
    for (int i = 0; i < n; ++i) {
      int l = level(iscale, i);
      float w = x[i] * x[i];
      sumlx += w * x[i] * float(l);
      suml2 += w * float(l) * float(l);
    }
    if (suml2 > 0 && sumlx * sumlx > best * suml2) {
      for (int i = 0; i < n; ++i) L[i] = int8_t(nmax + level(iscale, i));
      scale = sumlx / suml2;
      best = scale * sumlx;
    }
  }
  return scale;
}

// make_qkx2_quants: asymmetric levels L in [0, nmax] (value = scale * L - the_min), weighted
// least squares for (scale, min) over nstep + 1 candidate scales.
float make_qkx2_quants(int n, int nmax, const float* x, const float* weights, uint8_t* L,
                       float* the_min, float rmin, float rdelta, int nstep, bool use_mad) {
  uint8_t Laux[32];
  float min = x[0], max = x[0];
  float sum_w = weights[0], sum_x = sum_w * x[0];
  for (int i = 1; i < n; ++i) {
    if (x[i] < min) min = x[i];
    if (x[i] > max) max = x[i];
    float w = weights[i];
    sum_w += w;
    sum_x += w * x[i];
  }
  if (min > 0) min = 0;
  if (max == min) {
    for (int i = 0; i < n; ++i) L[i] = 0;
    *the_min = -min;
    return 0;
  }
  float iscale = float(nmax) / (max - min);
  float scale = 1 / iscale;
  float best_mad = 0;
  for (int i = 0; i < n; ++i) {
    int l = nearest_int(iscale * (x[i] - min));
    L[i] = uint8_t(std::max(0, std::min(nmax, l)));
    float diff = scale * float(L[i]) + min - x[i];
    diff = use_mad ? std::fabs(diff) : diff * diff;
    best_mad += weights[i] * diff;
  }
  if (nstep < 1) {
    *the_min = -min;
    return scale;
  }
  for (int is = 0; is <= nstep; ++is) {
    iscale = (rmin + rdelta * float(is) + float(nmax)) / (max - min);
    float sum_l = 0, sum_l2 = 0, sum_xl = 0;
    for (int i = 0; i < n; ++i) {
      int l = std::max(0, std::min(nmax, nearest_int(iscale * (x[i] - min))));
      Laux[i] = uint8_t(l);
      float w = weights[i];
      sum_l += w * float(l);
      sum_l2 += w * float(l) * float(l);
      sum_xl += w * float(l) * x[i];
    }
    float D = sum_w * sum_l2 - sum_l * sum_l;
    if (D > 0) {
      float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
      float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
      if (this_min > 0) {
        this_min = 0;
        this_scale = sum_xl / sum_l2;
      }
      float mad = 0;
      for (int i = 0; i < n; ++i) {
        float diff = this_scale * float(Laux[i]) + this_min - x[i];
        diff = use_mad ? std::fabs(diff) : diff * diff;
        mad += weights[i] * diff;
      }
      if (mad < best_mad) {
        for (int i = 0; i < n; ++i) L[i] = Laux[i];
        best_mad = mad;
        scale = this_scale;
        min = this_min;
      }
    }
  }
  *the_min = -min;
  return scale;
}

// make_q3_quants: symmetric levels in [0, 2 nmax) with coordinate-descent refinement
// (weights x^2, up to 5 sweeps).
float make_q3_quants(int n, int nmax, const float* x, int8_t* L) {
  const float max = signed_absmax(n, x);
  if (std::fabs(max) < kGroupMaxEps) {
    std::fill(L, L + n, int8_t{0});
    return 0;
  }
  const float iscale = -float(nmax) / max;
  float sumlx = 0, suml2 = 0;
  for (int i = 0; i < n; ++i) {
    int l = std::max(-nmax, std::min(nmax - 1, nearest_int(iscale * x[i])));
    L[i] = int8_t(l);
    float w = x[i] * x[i];
    sumlx += w * x[i] * float(l);
    suml2 += w * float(l) * float(l);
  }
  for (int itry = 0; itry < 5; ++itry) {
    int n_changed = 0;
    for (int i = 0; i < n; ++i) {
      float w = x[i] * x[i];
      float slx = sumlx - w * x[i] * float(L[i]);
      if (slx > 0) {
        float sl2 = suml2 - w * float(L[i]) * float(L[i]);
        int new_l = std::max(-nmax, std::min(nmax - 1, nearest_int(x[i] * sl2 / slx)));
        if (new_l != L[i]) {
          slx += w * x[i] * float(new_l);
          sl2 += w * float(new_l) * float(new_l);
          if (sl2 > 0 && slx * slx * suml2 > sumlx * sumlx * sl2) {
            L[i] = int8_t(new_l);
            sumlx = slx;
            suml2 = sl2;
            ++n_changed;
          }
        }
      }
    }
    if (!n_changed) break;
  }
  for (int i = 0; i < n; ++i) L[i] = int8_t(L[i] + nmax);
  return sumlx / suml2;
}

// 2-bit fields of Q2_K / Q3_K: elem e at byte 32*(e/128) + e%32, shift 2*((e%128)/32).
void pack_2bit(const uint8_t* L, uint8_t* qs) {
  for (int j = 0; j < kQK; j += 128)
    for (int l = 0; l < 32; ++l)
      qs[j / 4 + l] =
          uint8_t(L[j + l] | (L[j + l + 32] << 2) | (L[j + l + 64] << 4) | (L[j + l + 96] << 6));
}

void qnt_q2_k(const float* x, uint8_t* b) {
  uint8_t L[kQK];
  float weights[16], mins[16], scales[16];
  float max_scale = 0, max_min = 0;
  for (int j = 0; j < 16; ++j) {
    for (int l = 0; l < 16; ++l) weights[l] = std::fabs(x[16 * j + l]);
    scales[j] =
        make_qkx2_quants(16, 3, x + 16 * j, weights, L + 16 * j, &mins[j], -0.5f, 0.1f, 15, true);
    max_scale = std::max(max_scale, scales[j]);
    max_min = std::max(max_min, mins[j]);
  }
  uint8_t* sc = b;
  const float q4scale = 15.0f;
  if (max_scale > 0) {
    const float iscale = q4scale / max_scale;
    for (int j = 0; j < 16; ++j) sc[j] = uint8_t(nearest_int(iscale * scales[j]));
    store_f16(b + 80, max_scale / q4scale);
  } else {
    for (int j = 0; j < 16; ++j) sc[j] = 0;
    store_f16(b + 80, 0);
  }
  if (max_min > 0) {
    const float iscale = q4scale / max_min;
    for (int j = 0; j < 16; ++j) sc[j] = uint8_t(sc[j] | (nearest_int(iscale * mins[j]) << 4));
    store_f16(b + 82, max_min / q4scale);
  } else {
    store_f16(b + 82, 0);
  }
  const float d_all = load_f16(b + 80), dmin_all = load_f16(b + 82);
  for (int j = 0; j < 16; ++j) {
    const float d = d_all * float(sc[j] & 0xF);
    if (d == 0) continue;
    const float dm = dmin_all * float(sc[j] >> 4);
    for (int ii = 0; ii < 16; ++ii) {
      int l = nearest_int((x[16 * j + ii] + dm) / d);
      L[16 * j + ii] = uint8_t(std::max(0, std::min(3, l)));
    }
  }
  pack_2bit(L, b + 16);
}

void qnt_q3_k(const float* x, uint8_t* b) {
  int8_t L[kQK];
  float scales[16];
  for (int j = 0; j < 16; ++j) scales[j] = make_q3_quants(16, 4, x + 16 * j, L + 16 * j);
  const float max_scale = signed_absmax(16, scales);
  uint8_t* sc = b + 96;
  std::memset(sc, 0, 12);
  if (max_scale != 0) {
    const float iscale = -32.0f / max_scale;
    for (int j = 0; j < 16; ++j) {
      int l = std::max(-32, std::min(31, nearest_int(iscale * scales[j]))) + 32;
      if (j < 8) {
        sc[j] = uint8_t(l & 0xF);
      } else {
        sc[j - 8] = uint8_t(sc[j - 8] | ((l & 0xF) << 4));
      }
      l >>= 4;
      sc[j % 4 + 8] = uint8_t(sc[j % 4 + 8] | (l << (2 * (j / 4))));
    }
    store_f16(b + 108, 1 / iscale);
  } else {
    store_f16(b + 108, 0);
  }
  int s[16];
  q3k_scales(sc, s);
  const float d_all = load_f16(b + 108);
  for (int j = 0; j < 16; ++j) {
    const float d = d_all * float(s[j]);
    if (d == 0) continue;
    for (int ii = 0; ii < 16; ++ii) {
      int l = nearest_int(x[16 * j + ii] / d);
      L[16 * j + ii] = int8_t(std::max(-4, std::min(3, l)) + 4);
    }
  }
  uint8_t* hmask = b;
  std::memset(hmask, 0, 32);
  uint8_t U[kQK];
  for (int j = 0; j < kQK; ++j) {
    int l = L[j];
    if (l > 3) {
      hmask[j % 32] = uint8_t(hmask[j % 32] | (1 << (j / 32)));
      l -= 4;
    }
    U[j] = uint8_t(l);
  }
  pack_2bit(U, b + 32);
}

// Q4_K / Q5_K: per 32-elem sub-block (scale, min) from make_qkx2_quants with weights
// av_x + |x|, both requantized to 6 bits against the block's largest.
void quant_k_scales_mins(const float* x, int nmax, float rmin, int nstep, uint8_t* b,
                         uint8_t L[kQK]) {
  float weights[32], mins[8], scales[8];
  float max_scale = 0, max_min = 0;
  for (int j = 0; j < 8; ++j) {
    float sum_x2 = 0;
    for (int l = 0; l < 32; ++l) sum_x2 += x[32 * j + l] * x[32 * j + l];
    const float av_x = std::sqrt(sum_x2 / 32);
    for (int l = 0; l < 32; ++l) weights[l] = av_x + std::fabs(x[32 * j + l]);
    scales[j] = make_qkx2_quants(32, nmax, x + 32 * j, weights, L + 32 * j, &mins[j], rmin, 0.1f,
                                 nstep, false);
    max_scale = std::max(max_scale, scales[j]);
    max_min = std::max(max_min, mins[j]);
  }
  const float inv_scale = max_scale > 0 ? 63.0f / max_scale : 0.0f;
  const float inv_min = max_min > 0 ? 63.0f / max_min : 0.0f;
  uint8_t* s = b + 4;
  for (int j = 0; j < 8; ++j) {
    int ls = std::min(63, nearest_int(inv_scale * scales[j]));
    int lm = std::min(63, nearest_int(inv_min * mins[j]));
    if (j < 4) {
      s[j] = uint8_t(ls);
      s[j + 4] = uint8_t(lm);
    } else {
      s[j + 4] = uint8_t((ls & 0xF) | ((lm & 0xF) << 4));
      s[j - 4] = uint8_t(s[j - 4] | ((ls >> 4) << 6));
      s[j] = uint8_t(s[j] | ((lm >> 4) << 6));
    }
  }
  store_f16(b, max_scale / 63.0f);
  store_f16(b + 2, max_min / 63.0f);
  const float d_all = load_f16(b), dmin_all = load_f16(b + 2);
  for (int j = 0; j < 8; ++j) {
    int sc, m;
    scale_min_k4(j, s, &sc, &m);
    const float d = d_all * float(sc);
    if (d == 0) continue;
    const float dm = dmin_all * float(m);
    for (int ii = 0; ii < 32; ++ii) {
      int l = nearest_int((x[32 * j + ii] + dm) / d);
      L[32 * j + ii] = uint8_t(std::max(0, std::min(nmax, l)));
    }
  }
}

void qnt_q4_k(const float* x, uint8_t* b) {
  uint8_t L[kQK];
  std::memset(b + 4, 0, 12);
  quant_k_scales_mins(x, 15, -1.0f, 20, b, L);
  uint8_t* q = b + 16;
  for (int j = 0; j < kQK; j += 64, q += 32)
    for (int l = 0; l < 32; ++l) q[l] = uint8_t(L[j + l] | (L[j + l + 32] << 4));
}

void qnt_q5_k(const float* x, uint8_t* b) {
  uint8_t L[kQK];
  std::memset(b + 4, 0, 12);
  quant_k_scales_mins(x, 31, -0.5f, 15, b, L);
  uint8_t* qh = b + 16;
  uint8_t* ql = b + 48;
  std::memset(qh, 0, 32);
  uint8_t m1 = 1, m2 = 2;
  for (int n = 0; n < kQK; n += 64, ql += 32) {
    for (int j = 0; j < 32; ++j) {
      int l1 = L[n + j], l2 = L[n + j + 32];
      if (l1 > 15) {
        l1 -= 16;
        qh[j] |= m1;
      }
      if (l2 > 15) {
        l2 -= 16;
        qh[j] |= m2;
      }
      ql[j] = uint8_t(l1 | (l2 << 4));
    }
    m1 = uint8_t(m1 << 2);
    m2 = uint8_t(m2 << 2);
  }
}

void qnt_q6_k(const float* x, uint8_t* b) {
  int8_t L[kQK];
  float scales[16];
  float max_scale = 0, max_abs_scale = 0;
  for (int ib = 0; ib < 16; ++ib) {
    scales[ib] = make_qx_quants(16, 32, x + 16 * ib, L + 16 * ib);
    if (std::fabs(scales[ib]) > max_abs_scale) {
      max_abs_scale = std::fabs(scales[ib]);
      max_scale = scales[ib];
    }
  }
  std::memset(b, 0, 210);
  if (max_abs_scale < kGroupMaxEps) return;  // all zero, d = +0
  const float iscale = -128.0f / max_scale;
  store_f16(b + 208, 1 / iscale);
  int8_t* sc = reinterpret_cast<int8_t*>(b + 192);
  for (int ib = 0; ib < 16; ++ib) sc[ib] = int8_t(std::min(127, nearest_int(iscale * scales[ib])));
  const float d_all = load_f16(b + 208);
  for (int j = 0; j < 16; ++j) {
    const float d = d_all * float(sc[j]);
    if (d == 0) continue;
    for (int ii = 0; ii < 16; ++ii) {
      int l = std::max(-32, std::min(31, nearest_int(x[16 * j + ii] / d)));
      L[16 * j + ii] = int8_t(l + 32);
    }
  }
  uint8_t* ql = b;
  uint8_t* qh = b + 128;
  for (int j = 0; j < kQK; j += 128, ql += 64, qh += 32) {
    for (int l = 0; l < 32; ++l) {
      const int q1 = L[j + l] & 0xF, q2 = L[j + l + 32] & 0xF;
      const int q3 = L[j + l + 64] & 0xF, q4 = L[j + l + 96] & 0xF;
      ql[l] = uint8_t(q1 | (q3 << 4));
      ql[l + 32] = uint8_t(q2 | (q4 << 4));
      qh[l] = uint8_t((L[j + l] >> 4) | ((L[j + l + 32] >> 4) << 2) | ((L[j + l + 64] >> 4) << 4) |
                      ((L[j + l + 96] >> 4) << 6));
    }
  }
}

// BF16 as ggml_compute_fp32_to_bf16: NaN -> quiet NaN keeping the sign and upper payload,
// else round to nearest even.
uint16_t bf16_ggml(float v) {
  uint32_t u;
  std::memcpy(&u, &v, 4);
  if ((u & 0x7fffffff) > 0x7f800000) return uint16_t((u >> 16) | 64);
  return uint16_t((u + (0x7fff + ((u >> 16) & 1))) >> 16);
}

using BlockFn = void (*)(const uint8_t*, float*);
using QuantFn = void (*)(const float*, uint8_t*);

BlockFn dequantizer(QuantFormat f) {
  switch (f) {
    case QuantFormat::kQ4_0:
      return deq_q4_0;
    case QuantFormat::kQ4_1:
      return deq_q4_1;
    case QuantFormat::kQ5_0:
      return deq_q5_0;
    case QuantFormat::kQ5_1:
      return deq_q5_1;
    case QuantFormat::kQ8_0:
      return deq_q8_0;
    case QuantFormat::kQ2_K:
      return deq_q2_k;
    case QuantFormat::kQ3_K:
      return deq_q3_k;
    case QuantFormat::kQ4_K:
      return deq_q4_k;
    case QuantFormat::kQ5_K:
      return deq_q5_k;
    case QuantFormat::kQ6_K:
      return deq_q6_k;
    case QuantFormat::kQ8_K:
      return deq_q8_k;
    case QuantFormat::kIQ4_NL:
      return deq_iq4_nl;
    default:
      return nullptr;
  }
}

QuantFn quantizer(QuantFormat f) {
  switch (f) {
    case QuantFormat::kQ4_0:
      return qnt_q4_0;
    case QuantFormat::kQ4_1:
      return qnt_q4_1;
    case QuantFormat::kQ5_0:
      return qnt_q5_0;
    case QuantFormat::kQ5_1:
      return qnt_q5_1;
    case QuantFormat::kQ8_0:
      return qnt_q8_0;
    case QuantFormat::kQ2_K:
      return qnt_q2_k;
    case QuantFormat::kQ3_K:
      return qnt_q3_k;
    case QuantFormat::kQ4_K:
      return qnt_q4_k;
    case QuantFormat::kQ5_K:
      return qnt_q5_k;
    case QuantFormat::kQ6_K:
      return qnt_q6_k;
    case QuantFormat::kQ8_K:
      return qnt_q8_k;
    default:
      return nullptr;
  }
}

}  // namespace

std::span<const QuantFormatInfo> quant_formats() { return kTable; }

const QuantFormatInfo& quant_format_info(QuantFormat f) {
  for (const QuantFormatInfo& i : kTable)
    if (i.format == f) return i;
  throw Error("unknown quantization format (ggml type id " + std::to_string(int(f)) +
              "); known: " + known_names());
}

QuantFormat quant_format_from_ggml_type(int id) {
  for (const QuantFormatInfo& i : kTable)
    if (i.ggml_type == id) return i.format;
  std::string ids;
  for (const QuantFormatInfo& i : kTable)
    ids +=
        (ids.empty() ? "" : ", ") + std::to_string(i.ggml_type) + " (" + std::string(i.name) + ")";
  throw Error("ggml type id " + std::to_string(id) +
              " is not a supported format; supported: " + ids);
}

QuantFormat quant_format_from_name(std::string_view name) {
  auto lower = [](std::string_view s) {
    std::string r(s);
    for (char& c : r) c = char(std::tolower(static_cast<unsigned char>(c)));
    return r;
  };
  for (const QuantFormatInfo& i : kTable)
    if (lower(i.name) == lower(name)) return i.format;
  throw Error("unknown quantization format '" + std::string(name) + "'; known: " + known_names());
}

int64_t quant_row_bytes(QuantFormat f, int64_t n) {
  const QuantFormatInfo& i = quant_format_info(f);
  check(n >= 0 && n % i.block_size == 0, std::string(i.name) + ": a row of " + std::to_string(n) +
                                             " elements is not a multiple of the block size " +
                                             std::to_string(i.block_size));
  return n / i.block_size * i.bytes_per_block;
}

void dequantize_row(QuantFormat f, const uint8_t* src, float* dst, int64_t n) {
  const QuantFormatInfo& info = quant_format_info(f);
  quant_row_bytes(f, n);
  switch (f) {
    case QuantFormat::kF32:
      std::memcpy(dst, src, size_t(n) * 4);
      return;
    case QuantFormat::kF16:
      for (int64_t i = 0; i < n; ++i) dst[i] = load_f16(src + 2 * i);
      return;
    case QuantFormat::kBF16:
      for (int64_t i = 0; i < n; ++i) {
        uint32_t u = uint32_t(src[2 * i] | (src[2 * i + 1] << 8)) << 16;
        std::memcpy(dst + i, &u, 4);
      }
      return;
    default:
      break;
  }
  BlockFn fn = dequantizer(f);
  for (int64_t b = 0; b < n / info.block_size; ++b)
    fn(src + b * info.bytes_per_block, dst + b * info.block_size);
}

void dequantize(QuantFormat f, std::span<const uint8_t> src, std::span<float> dst) {
  const int64_t need = quant_row_bytes(f, int64_t(dst.size()));
  check(int64_t(src.size()) == need, std::string(quant_format_info(f).name) + ": dequantizing " +
                                         std::to_string(dst.size()) + " elements needs " +
                                         std::to_string(need) + " bytes, got " +
                                         std::to_string(src.size()));
  dequantize_row(f, src.data(), dst.data(), int64_t(dst.size()));
}

void round_activations_int8(const float* x, float* out, int64_t n) {
  check(n >= 0 && n % 32 == 0, "round_activations_int8: n = " + std::to_string(n) +
                                   " is not a multiple of the block size 32");
  for (int64_t b = 0; b < n; b += 32) {
    float amax = 0;
    bool nan = false;
    for (int64_t i = b; i < b + 32; ++i) {
      amax = std::max(amax, std::fabs(x[i]));
      nan = nan || std::isnan(x[i]);
    }
    // NaN anywhere: d = NaN, as reduce_max gives in the decomposition (the block becomes NaN;
    // an Inf gives d = Inf, 1 / d = 0 and 0 * Inf = NaN likewise).
    const float d = nan ? std::numeric_limits<float>::quiet_NaN() : amax / 127.0f;
    // A scale below the smallest normal f32 (1 / d would overflow) rounds the block to 0.
    const float id = d >= std::numeric_limits<float>::min() ? 1.0f / d : 0.0f;
    for (int64_t i = b; i < b + 32; ++i) out[i] = std::nearbyint(x[i] * id) * d;
  }
}

void quantize_row(QuantFormat f, const float* src, uint8_t* dst, int64_t n) {
  const QuantFormatInfo& info = quant_format_info(f);
  quant_row_bytes(f, n);
  switch (f) {
    case QuantFormat::kF32:
      std::memcpy(dst, src, size_t(n) * 4);
      return;
    case QuantFormat::kF16:
      for (int64_t i = 0; i < n; ++i) store_f16(dst + 2 * i, src[i]);
      return;
    case QuantFormat::kBF16:
      for (int64_t i = 0; i < n; ++i) {
        uint16_t b = bf16_ggml(src[i]);
        dst[2 * i] = uint8_t(b);
        dst[2 * i + 1] = uint8_t(b >> 8);
      }
      return;
    default:
      break;
  }
  QuantFn fn = quantizer(f);
  check(fn != nullptr, std::string(info.name) +
                           ": quantization is not implemented (the format is dequantize-only)");
  for (int64_t b = 0; b < n / info.block_size; ++b)
    fn(src + b * info.block_size, dst + b * info.bytes_per_block);
}

void quantize(QuantFormat f, std::span<const float> src, std::span<uint8_t> dst) {
  const int64_t need = quant_row_bytes(f, int64_t(src.size()));
  check(int64_t(dst.size()) == need, std::string(quant_format_info(f).name) + ": quantizing " +
                                         std::to_string(src.size()) + " elements needs " +
                                         std::to_string(need) + " bytes of output, got " +
                                         std::to_string(dst.size()));
  quantize_row(f, src.data(), dst.data(), int64_t(src.size()));
}

}  // namespace rlx
