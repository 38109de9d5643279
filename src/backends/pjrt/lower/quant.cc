// StableHLO lowering of dequantize (ggml block formats, rlx/ir/quant.h): the packed rows are
// reshaped to blocks; integer fields (nibbles, bit planes, 6-bit scales) are gathered from the
// block bytes by constant index tables and unpacked with shift_right_logical / and / or in
// i32; f16 / f32 scales are bitcast_convert of byte pairs (quads); the f32 arithmetic is
// ggml's dequantize_row_* in the same order (src/ir/quant.cc), so the result is bit-equal
// wherever XLA does not contract a multiply-add into an FMA.
#include "rlx/ir/quant.h"

#include <functional>

#include "lower.h"

namespace rlx::pjrt::lower {
namespace {

// One part of an integer field: ((byte[index(e)] >> shift(e)) & mask) << place.
struct Part {
  std::function<int(int)> index, shift;
  int mask, place;
};

class BlockEmitter {
 public:
  // `w` is u8[..., R]; it is viewed as u8[rows, nb, B].
  BlockEmitter(Emitter& e, const Operand& w, const QuantFormatInfo& info, int64_t k) : e_(e) {
    rows_ = 1;
    for (int i = 0; i + 1 < w.type.shape.rank(); ++i) rows_ *= w.type.shape.dims()[size_t(i)];
    nb_ = k / info.block_size;
    TensorType bt{DType::u8, Shape{rows_, nb_, info.bytes_per_block}};
    blocks_ = {e.emit("stablehlo.reshape", {w}, "", bt), bt};
  }

  // [rows, nb, count] of dtype t.
  TensorType per(int64_t count, DType t) const { return {t, Shape{rows_, nb_, count}}; }

  // The little-endian scalar at byte `offset` of every block, converted to f32: [rows, nb, 1].
  Operand scale(int offset, DType t) {
    int64_t w = dtype_size(t);
    TensorType bytes{DType::u8, Shape{rows_, nb_, 1, w}};
    Operand s = slice(offset, w);
    s = {e_.emit("stablehlo.reshape", {s}, "", bytes), bytes};
    TensorType tt{t, Shape{rows_, nb_, 1}};
    s = {e_.emit("stablehlo.bitcast_convert", {s}, "", tt), tt};
    return to_f32(s);
  }

  // An integer field of `count` values per block: the OR of its parts, minus `bias`, as i32
  // [rows, nb, count]. Every step is exact integer arithmetic.
  Operand field(int64_t count, const std::vector<Part>& parts, int bias = 0) {
    TensorType it = per(count, DType::i32);
    Operand acc;
    for (const Part& p : parts) {
      std::vector<int64_t> idx, sh;
      for (int i = 0; i < count; ++i) {
        idx.push_back(p.index(i));
        sh.push_back(p.shift(i));
      }
      Operand v = to_i32(gather(idx));
      v = binary("stablehlo.shift_right_logical", v, table(sh, it));
      v = binary("stablehlo.and", v, {e_.splat(DType::i32, it.shape, p.mask), it});
      if (p.place)
        v = binary("stablehlo.shift_left", v, {e_.splat(DType::i32, it.shape, p.place), it});
      acc = acc.name.empty() ? v : binary("stablehlo.or", acc, v);
    }
    if (bias) acc = binary("stablehlo.subtract", acc, {e_.splat(DType::i32, it.shape, bias), it});
    return acc;
  }

  Operand to_f32(const Operand& x) {
    TensorType t{DType::f32, x.type.shape};
    return {e_.emit("stablehlo.convert", {x}, "", t), t};
  }
  // a (op) b with numpy broadcasting of size-1 / per-sub-block dims to b's or a's shape.
  Operand binary(const char* op, Operand a, Operand b) {
    const Shape& s = a.type.shape.numel() >= b.type.shape.numel() ? a.type.shape : b.type.shape;
    a = widen(a, s);
    b = widen(b, s);
    return {e_.emit(op, {a, b}, "", a.type), a.type};
  }
  Operand mul(const Operand& a, const Operand& b) { return binary("stablehlo.multiply", a, b); }
  // A byte value 0..255 (i32) as the two's-complement i8 it encodes: (q ^ 0x80) - 128.
  Operand signed8(const Operand& q) {
    const Shape& s = q.type.shape;
    Operand x = binary("stablehlo.xor", q, {e_.splat(DType::i32, s, 128), q.type});
    return binary("stablehlo.subtract", x, {e_.splat(DType::i32, s, 128), q.type});
  }

  // The f32 result u8[..., R] -> f32[..., k] from per-element values [rows, nb, block_size].
  std::string finish(const Operand& y, const TensorType& rt) {
    return e_.emit("stablehlo.reshape", {y}, "", rt);
  }

  // IQ4_NL: kvalues[q] for i32 q in [0, 16).
  Operand lookup(const Operand& q, const int8_t (&values)[16]) {
    std::vector<int64_t> v(values, values + 16);
    Tensor t = Tensor::from_ints(DType::i32, Shape{16}, v);
    Operand tab{e_.constant_tensor(t), t.type()};
    return take(tab, q, 0, {}, {1});
  }

 private:
  Operand slice(int offset, int64_t len) {
    TensorType t = per(len, DType::u8);
    return {e_.emit("stablehlo.slice", {blocks_},
                    "start_indices = " + i64_array({0, 0, offset}) +
                        ", limit_indices = " + i64_array({rows_, nb_, offset + len}) +
                        ", strides = " + i64_array({1, 1, 1}),
                    t),
            t};
  }
  Operand table(const std::vector<int64_t>& v, const TensorType& t) {
    Tensor c = Tensor::from_ints(DType::i32, Shape{int64_t(v.size())}, v);
    return e_.broadcast({e_.constant_tensor(c), c.type()}, t.shape);
  }
  Operand to_i32(const Operand& x) {
    TensorType t{DType::i32, x.type.shape};
    return {e_.emit("stablehlo.convert", {x}, "", t), t};
  }
  // Bytes idx[i] of every block: u8[rows, nb, count].
  Operand gather(const std::vector<int64_t>& idx) {
    Tensor c = Tensor::from_ints(DType::i32, Shape{int64_t(idx.size())}, idx);
    Operand ci{e_.constant_tensor(c), c.type()};
    return take(blocks_, ci, 2, {0, 1}, {rows_, nb_, 1});
  }
  // jnp.take(x, idx, axis) for an axis whose other dims are kept as offset dims.
  Operand take(const Operand& x, const Operand& idx, int64_t axis,
               const std::vector<int64_t>& offset_dims, const std::vector<int64_t>& sizes) {
    Shape rs = idx.type.shape;
    std::vector<int64_t> dims;
    for (int64_t d : offset_dims) dims.push_back(x.type.shape.dims()[size_t(d)]);
    for (int64_t d : idx.type.shape.dims()) dims.push_back(d);
    TensorType rt{x.type.dtype, Shape(dims)};
    std::string a = "[" + std::to_string(axis) + "]";
    return {e_.emit("stablehlo.gather", {x, idx},
                    "dimension_numbers = #stablehlo.gather<offset_dims = " + int_list(offset_dims) +
                        ", collapsed_slice_dims = " + a + ", start_index_map = " + a +
                        ", index_vector_dim = " + std::to_string(idx.type.shape.rank()) +
                        ">, slice_sizes = " + i64_array(sizes) + ", indices_are_sorted = false",
                    rt),
            rt};
  }
  // [rows, nb, c] to [rows, nb, n] (n a multiple of c): value j covers n / c consecutive
  // elements (a sub-block scale broadcast over its sub-block), or a size-1 dim broadcast.
  Operand widen(const Operand& x, const Shape& s) {
    if (x.type.shape == s) return x;
    int64_t c = x.type.shape.dims()[2], n = s.dims()[2];
    TensorType wide{x.type.dtype, Shape{rows_, nb_, c, n / c}};
    std::string b = e_.emit("stablehlo.broadcast_in_dim", {x},
                            "broadcast_dimensions = " + i64_array({0, 1, 2}), wide);
    TensorType t{x.type.dtype, s};
    return {e_.emit("stablehlo.reshape", {{b, wide}}, "", t), t};
  }

  Emitter& e_;
  int64_t rows_ = 1, nb_ = 1;
  Operand blocks_;
};

// Field parts, by the layouts of rlx/ir/quant.h.
Part bits(std::function<int(int)> index, std::function<int(int)> shift, int mask, int place = 0) {
  return {std::move(index), std::move(shift), mask, place};
}
// Elements 0..15 / 16..31 of a 32-element block: low / high nibble of qs[j].
Part nibble32(int qs) {
  return bits([qs](int e) { return qs + e % 16; }, [](int e) { return 4 * (e / 16); }, 0xF);
}
// The 5th bit of a Q5 element: bit e of the little-endian u32 at `qh`.
Part fifth_bit32(int qh) {
  return bits([qh](int e) { return qh + e / 8; }, [](int e) { return e % 8; }, 1, 4);
}
// Q2_K / Q3_K 2-bit quants: byte 32*(e/128) + e%32 at shift 2*((e%128)/32).
Part crumb256(int qs) {
  return bits([qs](int e) { return qs + 32 * (e / 128) + e % 32; },
              [](int e) { return 2 * ((e % 128) / 32); }, 3);
}
// Q4_K / Q5_K nibbles: element 64c + l low nibble of qs[32c + l], 64c + 32 + l high nibble.
Part nibble256(int qs) {
  return bits([qs](int e) { return qs + 32 * (e / 64) + e % 32; },
              [](int e) { return 4 * ((e % 64) / 32); }, 0xF);
}
Part byte_at(int offset) {
  return bits([offset](int e) { return offset + e; }, [](int) { return 0; }, 0xFF);
}
// Q4_K / Q5_K get_scale_min_k4, as two 4 + 2 bit parts. Sub-block j < 4: scale = q[j] & 63,
// min = q[j + 4] & 63; j >= 4: scale = (q[j + 4] & 0xF) | (q[j - 4] >> 6) << 4, min =
// (q[j + 4] >> 4) | (q[j] >> 6) << 4 (q = the scales[12] field at byte `s`).
std::vector<Part> scale_min_k4(int s, bool min) {
  if (!min)
    return {bits([s](int j) { return s + (j < 4 ? j : j + 4); }, [](int) { return 0; }, 0xF),
            bits([s](int j) { return s + (j < 4 ? j : j - 4); },
                 [](int j) { return j < 4 ? 4 : 6; }, 3, 4)};
  return {bits([s](int j) { return s + j + 4; }, [](int j) { return j < 4 ? 0 : 4; }, 0xF),
          bits([s](int j) { return s + (j < 4 ? j + 4 : j); }, [](int j) { return j < 4 ? 4 : 6; },
               3, 4)};
}

}  // namespace

namespace {

std::vector<std::string> dequantize(Emitter& e, const Node& n) {
  const QuantFormat f = quant_format_from_name(n.attrs.get_string("format"));
  const QuantFormatInfo& info = quant_format_info(f);
  const int64_t k = n.attrs.get_int("k");
  const TensorType& rt = n.results[0];
  BlockEmitter b(e, e.operand(n, 0), info, k);
  const int bs = int(info.block_size);
  auto elems = [&](const std::vector<Part>& p, int bias = 0) { return b.field(bs, p, bias); };
  auto f32 = [&](const Operand& x) { return b.to_f32(x); };
  auto sub = [&](const Operand& a, const Operand& c) {
    return b.binary("stablehlo.subtract", a, c);
  };
  auto add = [&](const Operand& a, const Operand& c) { return b.binary("stablehlo.add", a, c); };
  Operand y;
  switch (f) {
    case QuantFormat::kF32:
      y = b.scale(0, DType::f32);
      break;
    case QuantFormat::kF16:
      y = b.scale(0, DType::f16);
      break;
    case QuantFormat::kBF16:
      y = b.scale(0, DType::bf16);
      break;
    case QuantFormat::kQ4_0:  // float(q - 8) * d
      y = b.mul(f32(elems({nibble32(2)}, 8)), b.scale(0, DType::f16));
      break;
    case QuantFormat::kQ4_1:  // float(q) * d + m
      y = add(b.mul(f32(elems({nibble32(4)})), b.scale(0, DType::f16)), b.scale(2, DType::f16));
      break;
    case QuantFormat::kQ5_0:  // float(q - 16) * d
      y = b.mul(f32(elems({nibble32(6), fifth_bit32(2)}, 16)), b.scale(0, DType::f16));
      break;
    case QuantFormat::kQ5_1:  // float(q) * d + m
      y = add(b.mul(f32(elems({nibble32(8), fifth_bit32(4)})), b.scale(0, DType::f16)),
              b.scale(2, DType::f16));
      break;
    case QuantFormat::kQ8_0: {  // float(int8 q) * d
      Operand q = elems({byte_at(2)});
      y = b.mul(f32(b.signed8(q)), b.scale(0, DType::f16));
      break;
    }
    case QuantFormat::kQ8_K: {  // d * float(int8 q), d f32
      Operand q = elems({byte_at(4)});
      y = b.mul(b.scale(0, DType::f32), f32(b.signed8(q)));
      break;
    }
    case QuantFormat::kIQ4_NL:  // d * float(kvalues[q])
      y = b.mul(b.scale(0, DType::f16), f32(b.lookup(elems({nibble32(2)}), kIQ4NLValues)));
      break;
    case QuantFormat::kQ2_K: {  // (d * sc) * float(q) - dmin * m, sc / m per 16 elements
      Operand dl =
          b.mul(b.scale(80, DType::f16),
                f32(b.field(16, {bits([](int j) { return j; }, [](int) { return 0; }, 0xF)})));
      Operand ml =
          b.mul(b.scale(82, DType::f16),
                f32(b.field(16, {bits([](int j) { return j; }, [](int) { return 4; }, 0xF)})));
      y = sub(b.mul(dl, f32(elems({crumb256(16)}))), ml);
      break;
    }
    case QuantFormat::kQ3_K: {  // (d * (sc - 32)) * float(q_low - (hbit ? 0 : 4))
      Operand sc = b.field(
          16,
          {bits([](int j) { return 96 + j % 8; }, [](int j) { return 4 * (j / 8); }, 0xF),
           bits([](int j) { return 96 + 8 + j % 4; }, [](int j) { return 2 * (j / 4); }, 3, 4)},
          32);
      Operand dl = b.mul(b.scale(108, DType::f16), f32(sc));
      // q_low + 4 * hbit - 4: the high bit placed at bit 2.
      Operand q = elems(
          {crumb256(32), bits([](int e) { return e % 32; }, [](int e) { return e / 32; }, 1, 2)},
          4);
      y = b.mul(dl, f32(q));
      break;
    }
    case QuantFormat::kQ4_K:
    case QuantFormat::kQ5_K: {  // (d * sc) * float(q) - dmin * m, sc / m per 32 elements
      Operand d1 = b.mul(b.scale(0, DType::f16), f32(b.field(8, scale_min_k4(4, false))));
      Operand m1 = b.mul(b.scale(2, DType::f16), f32(b.field(8, scale_min_k4(4, true))));
      std::vector<Part> q = {nibble256(f == QuantFormat::kQ4_K ? 16 : 48)};
      if (f == QuantFormat::kQ5_K)
        q.push_back(bits([](int e) { return 16 + e % 32; }, [](int e) { return e / 32; }, 1, 4));
      y = sub(b.mul(d1, f32(elems(q))), m1);
      break;
    }
    case QuantFormat::kQ6_K: {  // (d * float(sc)) * float(q - 32), sc i8 per 16 elements
      Operand sc = b.signed8(b.field(16, {byte_at(192)}));
      Operand q =
          elems({bits([](int e) { return 64 * (e / 128) + 32 * (((e % 128) / 32) % 2) + e % 32; },
                      [](int e) { return 4 * (((e % 128) / 32) / 2); }, 0xF),
                 bits([](int e) { return 128 + 32 * (e / 128) + e % 32; },
                      [](int e) { return 2 * ((e % 128) / 32); }, 3, 4)},
                32);
      y = b.mul(b.mul(b.scale(208, DType::f16), f32(sc)), f32(q));
      break;
    }
  }
  return {b.finish(y, rt)};
}

}  // namespace

void register_quant_lowerings(OpTable<LowerFn>& t) { t.set(OpKind::Dequantize, dequantize); }

}  // namespace rlx::pjrt::lower
