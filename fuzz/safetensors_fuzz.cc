// libFuzzer harness for the safetensors header parser: arbitrary bytes are read as a
// whole .safetensors file (8-byte length, JSON header, data section). Errors are
// fine; a crash, a sanitizer report, or an accepted header whose tensors break the
// promises of model/safetensors.h is a bug. Built by -DLATTE_FUZZ=ON; run by
// scripts/fuzz.sh.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <utility>
#include <vector>

#include "base/dtype.h"
#include "model/safetensors.h"

namespace {

[[noreturn]] void Fail(const char* what, const latte::TensorInfo& t) {
  std::fprintf(stderr, "safetensors_fuzz: tensor \"%s\" %s: %s\n", t.name.c_str(), latte::ShapeString(t.shape).c_str(),
               what);
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  latte::Result<std::vector<latte::TensorInfo>> tensors = latte::ReadSafetensorsHeader("fuzz.safetensors", data, size);
  if (!tensors.ok()) {
    if (tensors.status().message().empty()) std::abort();  // every error says what is wrong
    return 0;
  }
  const uint8_t* end = data + size;
  std::set<std::string> names;
  std::vector<std::pair<const uint8_t*, const uint8_t*>> ranges;
  unsigned sum = 0;
  for (const latte::TensorInfo& t : *tensors) {
    if (!names.insert(t.name).second) Fail("named twice", t);
    if (t.name == "__metadata__") Fail("is the metadata key", t);
    // The byte count is the shape's, and the bytes lie inside the data section.
    if (static_cast<uint64_t>(t.NumElements()) * latte::DTypeSize(t.dtype) != t.nbytes) {
      Fail("nbytes differs from shape x dtype size", t);
    }
    if (t.data < data + 8 || t.data > end || t.nbytes > static_cast<size_t>(end - t.data)) {
      Fail("bytes outside the input", t);
    }
    // Read every byte: AddressSanitizer reports any that is not the input's.
    for (size_t i = 0; i < t.nbytes; ++i) sum += t.data[i];
    if (t.nbytes > 0) ranges.emplace_back(t.data, t.data + t.nbytes);
  }
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i) {
    if (ranges[i].first < ranges[i - 1].second) {
      std::fprintf(stderr, "safetensors_fuzz: two tensors share bytes\n");
      std::abort();
    }
  }
  // Keeps the reads above from being optimized away.
  volatile unsigned sink = sum;
  (void)sink;
  return 0;
}
