// ONNX Einsum as rlx ops: per operand, diagonals (a label repeated within it) and labels no one
// else needs are summed out; operands are then contracted left to right with dot_general
// (labels shared and still needed later are batch dims, shared and no longer needed are
// contracted); a final transpose orders the output's labels. "..." stands for the same run of
// dims in every operand, aligned from the right as numpy does.
#include <algorithm>
#include <map>
#include <set>

#include "importer.h"

namespace rlx::onnx::detail {

namespace {

// An operand and the label of each of its dims.
struct Term {
  Value v;
  std::string labels;
};

// Splits "ij,jk->ik" into input terms and the output; expands "..." into one placeholder label
// per dim (the digits '0'..'9' from the right, so ellipses of different rank align).
std::pair<std::vector<std::string>, std::string> parse(NodeContext& c, std::string eq,
                                                       const std::vector<int64_t>& ranks) {
  eq.erase(std::remove(eq.begin(), eq.end(), ' '), eq.end());
  const size_t arrow = eq.find("->");
  std::string lhs = eq.substr(0, arrow), out;
  std::vector<std::string> terms;
  for (size_t start = 0;;) {
    size_t comma = lhs.find(',', start);
    terms.push_back(lhs.substr(start, comma - start));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  c.require(terms.size() == ranks.size(), "the equation names " + std::to_string(terms.size()) +
                                              " operands, the node has " +
                                              std::to_string(ranks.size()));
  int64_t ellipsis_rank = 0;
  auto expand = [&](std::string t, int64_t rank) {
    const size_t at = t.find("...");
    if (at == std::string::npos) return t;
    const int64_t n = rank - static_cast<int64_t>(t.size() - 3);
    c.require(n >= 0 && n <= 10, "bad ellipsis in term '" + t + "'");
    ellipsis_rank = std::max(ellipsis_rank, n);
    std::string dots;
    for (int64_t i = n - 1; i >= 0; --i) dots += static_cast<char>('0' + i);
    return t.replace(at, 3, dots);
  };
  for (size_t i = 0; i < terms.size(); ++i) {
    terms[i] = expand(terms[i], ranks[i]);
    c.require(
        static_cast<int64_t>(terms[i].size()) == ranks[i],
        "term '" + terms[i] + "' does not match its operand's rank " + std::to_string(ranks[i]));
  }
  std::string dots;
  for (int64_t i = ellipsis_rank - 1; i >= 0; --i) dots += static_cast<char>('0' + i);
  if (arrow != std::string::npos) {
    out = eq.substr(arrow + 2);
    const size_t at = out.find("...");
    if (at != std::string::npos) out.replace(at, 3, dots);
  } else {  // implicit output: the ellipsis, then every label used once, alphabetically
    std::map<char, int> count;
    for (const std::string& t : terms)
      for (char l : t) ++count[l];
    out = dots;
    for (const auto& [l, n] : count)
      if (n == 1 && !(l >= '0' && l <= '9')) out += l;
  }
  return {terms, out};
}

// Sums out the diagonal of every label repeated within the term.
void take_diagonals(Graph& g, Term& t) {
  for (size_t i = 0; i < t.labels.size(); ++i)
    for (size_t j = i + 1; j < t.labels.size(); ++j) {
      if (t.labels[i] != t.labels[j]) continue;
      const Shape& s = g.shape(t.v);
      Value eye = g.eq(g.iota(DType::i64, s, static_cast<int64_t>(i)),
                       g.iota(DType::i64, s, static_cast<int64_t>(j)));
      t.v = g.reduce_sum(g.select(eye, t.v, g.scalar(0, g.dtype(t.v))), {static_cast<int64_t>(j)});
      t.labels.erase(j, 1);
      --j;
    }
}

// Sums out the labels of `t` that no one in `needed` uses.
void sum_unneeded(Graph& g, Term& t, const std::set<char>& needed) {
  std::vector<int64_t> axes;
  std::string kept;
  for (size_t i = 0; i < t.labels.size(); ++i) {
    if (needed.count(t.labels[i]))
      kept += t.labels[i];
    else
      axes.push_back(static_cast<int64_t>(i));
  }
  if (axes.empty()) return;
  t.v = g.reduce_sum(t.v, axes);
  t.labels = kept;
}

void convert_einsum(NodeContext& c) {
  Graph& g = c.g;
  std::vector<Value> xs = c.inputs();
  c.require(!xs.empty(), "needs at least one input");
  std::vector<int64_t> ranks;
  for (Value x : xs) ranks.push_back(g.shape(x).rank());
  const auto parsed = parse(c, c.attr_string("equation", ""), ranks);
  const std::vector<std::string>& labels = parsed.first;
  const std::string& out = parsed.second;
  std::vector<Term> terms;
  for (size_t i = 0; i < xs.size(); ++i) {
    terms.push_back({xs[i], labels[i]});
    take_diagonals(g, terms.back());
  }
  // Labels needed after operand i: the output's and those of the operands after it.
  auto needed_after = [&](size_t i) {
    std::set<char> s(out.begin(), out.end());
    for (size_t j = i + 1; j < terms.size(); ++j)
      s.insert(terms[j].labels.begin(), terms[j].labels.end());
    return s;
  };
  Term acc = terms[0];
  sum_unneeded(g, acc, needed_after(0));
  for (size_t i = 1; i < terms.size(); ++i) {
    Term b = terms[i];
    std::set<char> later = needed_after(i);
    std::set<char> for_b = later;
    for_b.insert(acc.labels.begin(), acc.labels.end());
    sum_unneeded(g, b, for_b);
    std::vector<int64_t> ab, bb, ac, bc;
    std::string batch, a_free, b_free;
    for (size_t k = 0; k < acc.labels.size(); ++k) {
      const char l = acc.labels[k];
      const size_t in_b = b.labels.find(l);
      if (in_b == std::string::npos) {
        a_free += l;
      } else if (later.count(l)) {
        ab.push_back(static_cast<int64_t>(k));
        bb.push_back(static_cast<int64_t>(in_b));
        batch += l;
      } else {
        ac.push_back(static_cast<int64_t>(k));
        bc.push_back(static_cast<int64_t>(in_b));
      }
    }
    for (char l : b.labels)
      if (acc.labels.find(l) == std::string::npos) b_free += l;
    acc.v = g.dot_general(acc.v, b.v, ab, bb, ac, bc);
    acc.labels = batch + a_free + b_free;
  }
  sum_unneeded(g, acc, std::set<char>(out.begin(), out.end()));
  std::vector<int64_t> perm;
  for (char l : out) {
    const size_t at = acc.labels.find(l);
    c.require(at != std::string::npos,
              std::string("output label '") + l + "' is not an input label");
    perm.push_back(static_cast<int64_t>(at));
  }
  c.set_output(0, g.transpose(acc.v, perm));
}

}  // namespace

void add_einsum_converters(ConverterTable& t) { t[{"", "Einsum"}] = convert_einsum; }

}  // namespace rlx::onnx::detail
