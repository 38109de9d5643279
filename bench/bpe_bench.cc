// BpeTokenizer encode throughput: encodes each NUL-separated document of a corpus file (made by
// bench/bpe_peer.py) and prints MB/s; writes the ids (one line per document) for the peer's
// exact-match check. Usage: rlx_bench_bpe CORPUS IDS_OUT [MODEL.gguf]
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "rlx/models/bpe_tokenizer.h"

int main(int argc, char** argv) {
  if (argc < 3) {
    std::cerr << "usage: rlx_bench_bpe CORPUS IDS_OUT [MODEL.gguf]\n";
    return 2;
  }
  try {
    rlx::BpeTokenizer tok = rlx::BpeTokenizer::from_gguf_file(
        argc > 3 ? std::string(argv[3]) : rlx::default_llm_gguf_path());
    std::ifstream in(argv[1], std::ios::binary);
    std::stringstream buf;
    buf << in.rdbuf();
    std::string all = buf.str();
    std::vector<std::string> docs;
    for (size_t i = 0; i <= all.size();) {
      size_t j = all.find('\0', i);
      if (j == std::string::npos) j = all.size();
      docs.push_back(all.substr(i, j - i));
      i = j + 1;
    }
    std::vector<std::vector<int32_t>> ids(docs.size());
    double best = 1e30;
    for (int rep = 0; rep < 3; ++rep) {  // best of 3: the machine is shared
      auto t0 = std::chrono::steady_clock::now();
      for (size_t d = 0; d < docs.size(); ++d) ids[d] = tok.encode(docs[d], false, false);
      best = std::min(best,
                      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    size_t n_ids = 0;
    std::ofstream out(argv[2]);
    for (const auto& v : ids) {
      n_ids += v.size();
      for (size_t k = 0; k < v.size(); ++k) out << (k ? " " : "") << v[k];
      out << "\n";
    }
    std::printf("rlx BpeTokenizer: %zu docs, %zu bytes, %zu ids, %.3f s, %.2f MB/s\n", docs.size(),
                all.size(), n_ids, best, static_cast<double>(all.size()) / 1e6 / best);
  } catch (const std::exception& e) {
    std::cerr << "rlx_bench_bpe: " << e.what() << "\n";
    return 1;
  }
}
