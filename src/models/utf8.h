// UTF-8 primitives shared by the tokenizers of the models layer (WordPiece and byte-level BPE).
#pragma once

#include <utf8proc.h>

#include <cstddef>
#include <string>
#include <string_view>

namespace rlx::utf8 {

// Decodes the UTF-8 sequence at s[i] into c and returns its length, or 0 when it is not
// well-formed (Unicode table 3-7: no overlong forms, surrogates, values past U+10FFFF or
// truncated sequences).
inline size_t decode_utf8(std::string_view s, size_t i, char32_t& c) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data()) + i;
  if (p[0] < 0x80) {
    c = p[0];
    return 1;
  }
  size_t n;
  char32_t min;
  if (p[0] >= 0xC2 && p[0] <= 0xDF) {
    n = 2, c = p[0] & 0x1F, min = 0x80;
  } else if (p[0] >= 0xE0 && p[0] <= 0xEF) {
    n = 3, c = p[0] & 0x0F, min = 0x800;
  } else if (p[0] >= 0xF0 && p[0] <= 0xF4) {
    n = 4, c = p[0] & 0x07, min = 0x10000;
  } else {
    return 0;
  }
  if (s.size() - i < n) return 0;
  for (size_t k = 1; k < n; ++k) {
    if ((p[k] & 0xC0) != 0x80) return 0;
    c = (c << 6) | (p[k] & 0x3F);
  }
  if (c < min || c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF)) return 0;
  return n;
}

inline void append_utf8(std::string& out, char32_t c) {
  if (c < 0x80) {
    out.push_back(static_cast<char>(c));
    return;
  }
  utf8proc_uint8_t buf[4];
  utf8proc_ssize_t n = utf8proc_encode_char(static_cast<utf8proc_int32_t>(c), buf);
  out.append(reinterpret_cast<const char*>(buf), static_cast<size_t>(n));
}

// The length of the maximal subpart of an ill-formed sequence starting at s[i] (Unicode 15,
// section 3.9, "U+FFFD Substitution of Maximal Subparts"): the longest prefix of a well-formed
// sequence (table 3-7), at least one byte. Only called where decode_utf8 returned 0.
inline size_t maximal_subpart(std::string_view s, size_t i) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data()) + i;
  size_t n;
  unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  if (p[0] >= 0xC2 && p[0] <= 0xDF) {
    n = 2;
  } else if (p[0] >= 0xE0 && p[0] <= 0xEF) {
    n = 3;
    if (p[0] == 0xE0) lo = 0xA0;
    if (p[0] == 0xED) hi = 0x9F;
  } else if (p[0] >= 0xF0 && p[0] <= 0xF4) {
    n = 4;
    if (p[0] == 0xF0) lo = 0x90;
    if (p[0] == 0xF4) hi = 0x8F;
  } else {
    return 1;
  }
  size_t k = 1;
  for (; k < n && i + k < s.size(); ++k) {
    unsigned char b = p[k];
    if (k == 1 ? (b < lo || b > hi) : (b & 0xC0) != 0x80) break;
  }
  return k;
}

// The number of bytes at the end of `s` that start a well-formed UTF-8 sequence but stop before
// it is complete (0 to 3): what a streaming decoder holds back until the next bytes arrive.
inline size_t incomplete_tail(std::string_view s) {
  for (size_t k = 1; k <= 3 && k <= s.size(); ++k) {
    auto lead = static_cast<unsigned char>(s[s.size() - k]);
    if ((lead & 0xC0) == 0x80) continue;  // a continuation byte: look further back
    size_t need = lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC2 ? 2 : 1;
    if (lead > 0xF4 || need <= k) return 0;
    return maximal_subpart(s, s.size() - k) == k ? k : 0;
  }
  return 0;
}

}  // namespace rlx::utf8
