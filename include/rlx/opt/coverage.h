// The op coverage table: every op with its traits, attributes and which layers implement it.
#pragma once

#include <string>

namespace rlx {

/// One row per op of ops.def: mnemonic, arity, attribute schema (name:type=default), and
/// whether shape inference, a reference kernel and (composites) a decomposition exist.
/// `markdown` selects a Markdown table (published as docs/ops.md) over aligned plain text.
std::string op_coverage_table(bool markdown);

}  // namespace rlx
