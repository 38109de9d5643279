// The op reference table: every op with its arity, accepted dtypes and attribute schema.
#pragma once

#include <string>

namespace rlx {

/// One row per op of ops.def: mnemonic, arity, the dtypes it accepts (its ops.def dtype class)
/// and the attribute schema (name:type=default, ? optional, (a/b) allowed values). `markdown`
/// selects a Markdown table (published in docs/ops.md) over aligned plain text. Which layers
/// implement each op is the coverage matrix of tests/ops/coverage_test.cc, also in docs/ops.md.
std::string op_coverage_table(bool markdown);

}  // namespace rlx
