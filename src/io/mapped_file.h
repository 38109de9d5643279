// Helpers the file readers of rlx_io share (private to rlx_io): the file mapping of rlx/io/file.h
// under its short name, and UTF-8 validation of names read from a file.
#pragma once

#include <cstddef>
#include <string_view>

#include "rlx/io/file.h"

namespace rlx::io_detail {

/// The mapping of a whole file (rlx/io/file.h) under the name the readers use.
using Mapping = FileMapping;
using rlx::map_file;

/// Index of the first byte of `s` that does not begin a well-formed UTF-8 sequence (RFC 3629:
/// no overlong forms, no surrogates, at most U+10FFFF), or npos if `s` is valid.
size_t invalid_utf8_at(std::string_view s);

}  // namespace rlx::io_detail
