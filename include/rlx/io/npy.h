// NumPy .npy files (format versions 1.0, 2.0 and 3.0, C order): read into / written from an
// rlx::Tensor. Used by `rlx run` for its --input files and --output-dir.
#pragma once

#include <string>
#include <string_view>

#include "rlx/ir/tensor.h"

namespace rlx {

/// Decodes the bytes of an .npy file: little-endian (or byte-order-free) f4, f2, f8, i1, u1,
/// i4, i8 and b1 elements, C order. Throws rlx::Error naming `what` for a bad magic, a
/// malformed header, a dtype rlx lacks ("'<u2' (uint16)"), Fortran order, or data whose size
/// does not match the shape.
Tensor parse_npy(std::string_view bytes, const std::string& what);

/// Reads the .npy file at `path` (errors as read_file and parse_npy, naming the file).
Tensor read_npy(const std::string& path);

/// The .npy bytes (format 1.0, 2.0 when the header needs it) of `t`. bf16 has no numpy dtype
/// of its own: an rlx::Error ("cannot write bf16 as .npy").
std::string npy_bytes(const Tensor& t);

/// Writes `t` to `path` as .npy through AtomicFileWriter (errors name the file).
void write_npy(const std::string& path, const Tensor& t);

}  // namespace rlx
