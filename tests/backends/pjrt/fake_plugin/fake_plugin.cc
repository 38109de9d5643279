// A fake PJRT plugin for the loader's error tests: GetPjrtApi reports API version 99.0, so rlx
// must refuse it before calling anything else in the table.
#include <cstddef>

namespace {

struct FakeApi {
  size_t struct_size;
  void* extension_start;
  size_t version_struct_size;
  void* version_extension_start;
  int major_version;
  int minor_version;
};

const FakeApi kApi = {sizeof(FakeApi), nullptr, 24, nullptr, 99, 0};

}  // namespace

extern "C" __attribute__((visibility("default"))) const void* GetPjrtApi() { return &kApi; }
