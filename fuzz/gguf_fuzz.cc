// libFuzzer harness for the GGUF reader: arbitrary bytes are read as one .gguf file
// (GgufModel::Parse), then every metadata value is read through the typed getters and
// every tensor byte is touched. Errors are fine; a crash, a sanitizer report, or an
// accepted file whose tensors break the promises of base/gguf_file.h is a bug. Built by
// -DLATTE_FUZZ=ON; run by scripts/fuzz.sh.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <utility>
#include <vector>

#include "base/gguf_file.h"

namespace {

[[noreturn]] void Fail(const char* what, const latte::GgufTensor& t) {
  std::fprintf(stderr, "gguf_fuzz: tensor \"%s\": %s\n", t.name.c_str(), what);
  std::abort();
}

// Every getter on every key: each either succeeds or says what is wrong.
unsigned ReadEveryValue(const latte::GgufModel& model) {
  unsigned sum = 0;
  auto check = [](const latte::Status& s) {
    if (!s.ok() && s.message().empty()) std::abort();
  };
  for (const auto& [key, value] : model.metadata()) {
    if (model.Find(key) != &value) std::abort();
    sum += static_cast<unsigned>(latte::GgufValueTypeName(value.type).size());
    const auto i = model.GetInt(key);
    check(i.status());
    if (i.ok()) sum += static_cast<unsigned>(i.value());
    check(model.GetFloat(key).status());
    check(model.GetBool(key).status());
    const auto s = model.GetString(key);
    check(s.status());
    if (s.ok()) sum += static_cast<unsigned>(s.value().size());
    const auto strings = model.GetStringArray(key);
    check(strings.status());
    if (strings.ok()) {
      for (const std::string& x : strings.value()) sum += static_cast<unsigned>(x.size());
    }
    const auto ints = model.GetIntArray(key);
    check(ints.status());
    if (ints.ok()) {
      for (int64_t x : ints.value()) sum += static_cast<unsigned>(x);
    }
    const auto floats = model.GetFloatArray(key);
    check(floats.status());
    if (floats.ok()) sum += static_cast<unsigned>(floats.value().size());
  }
  return sum;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  latte::Result<latte::GgufModel> model = latte::GgufModel::Parse("fuzz.gguf", data, size);
  if (!model.ok()) {
    if (model.status().message().empty()) std::abort();  // every error says what is wrong
    return 0;
  }
  unsigned sum = ReadEveryValue(*model);
  const uint8_t* end = data + size;
  std::vector<std::pair<const uint8_t*, const uint8_t*>> ranges;
  size_t total = 0;
  for (const latte::GgufTensor& t : model->tensors()) {
    if (model->FindTensor(t.name) != &t) Fail("not found by name, or named twice", t);
    if (t.shape.empty() || t.shape.size() > 4) Fail("has no dims or more than 4", t);
    for (int64_t d : t.shape) {
      if (d < 0) Fail("has a negative dim", t);
    }
    // nbytes is the type's row bytes times the rows, and the bytes lie inside the input.
    int64_t block = 0;
    size_t block_bytes = 0;
    if (!latte::GgmlTypeBlock(t.ggml_type, &block, &block_bytes)) Fail("has an undefined type", t);
    if (t.shape.back() % block != 0) Fail("innermost dim not whole blocks", t);
    const int64_t elements = t.NumElements();
    const unsigned __int128 want = static_cast<unsigned __int128>(elements / block) * block_bytes;
    if (want != t.nbytes) Fail("nbytes differs from shape x block bytes", t);
    if (t.dtype != latte::DTypeFromGgmlType(t.ggml_type)) Fail("dtype differs from its ggml type's", t);
    if (t.data < data || t.data > end || t.nbytes > static_cast<size_t>(end - t.data)) {
      Fail("bytes outside the input", t);
    }
    // Read every byte: AddressSanitizer reports any that is not the input's.
    for (size_t i = 0; i < t.nbytes; ++i) sum += t.data[i];
    if (t.nbytes > 0) ranges.emplace_back(t.data, t.data + t.nbytes);
    total += t.nbytes;
  }
  if (total != model->TensorBytes() || total > size) std::abort();
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i) {
    if (ranges[i].first < ranges[i - 1].second) {
      std::fprintf(stderr, "gguf_fuzz: two tensors share bytes\n");
      std::abort();
    }
  }
  // Keeps the reads above from being optimized away.
  volatile unsigned sink = sum;
  (void)sink;
  return 0;
}
