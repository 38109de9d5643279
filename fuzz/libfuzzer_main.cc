// libFuzzer's entry point for one target, chosen at compile time by RLX_FUZZ_TARGET (the name of
// a function of fuzz_targets.h); fuzz/CMakeLists.txt builds one executable per target.
#include <cstdio>
#include <cstdlib>
#include <exception>

#include "fuzz_targets.h"

#ifndef RLX_FUZZ_TARGET
#error "define RLX_FUZZ_TARGET to a function of fuzz_targets.h"
#endif

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // The targets catch the rlx::Error they allow; anything else that escapes is a finding.
  // Aborting (rather than letting it unwind through libFuzzer) makes libFuzzer save the input.
  try {
    return rlx::fuzz::RLX_FUZZ_TARGET(data, size);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "==rlx fuzz finding== %s\n", e.what());
  } catch (...) {
    std::fprintf(stderr, "==rlx fuzz finding== an exception not derived from std::exception\n");
  }
  std::abort();
}
