// Random-weight model directories for tests, written once per process into a temp dir.
#pragma once

#include <cstdlib>
#include <filesystem>
#include <map>
#include <string>

#include <gtest/gtest.h>

#include "model/deepseek.h"
#include "tools/random_checkpoint.h"

namespace latte::testing_models {

// LATTE_SMALL_TESTS=1 skips the r1-shaped models (GBs of weights): for sanitizer
// builds, where they would take most of an hour. CI runs them.
inline bool SkipLargeModels() {
  const char* v = std::getenv("LATTE_SMALL_TESTS");
  return v != nullptr && std::string(v) == "1";
}

// A temp directory for this test process, removed with everything in it when the
// process exits (the r1-shaped models are GBs: leaving them would fill the disk).
class TempDirectory {
 public:
  TempDirectory() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "latte-test-XXXXXX").string();
    const char* dir = ::mkdtemp(tmpl.data());
    if (dir == nullptr) {
      ADD_FAILURE() << "mkdtemp failed for " << tmpl;
      return;
    }
    path_ = dir;
  }
  ~TempDirectory() {
    std::error_code ignored;
    if (!path_.empty()) std::filesystem::remove_all(path_, ignored);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

inline std::string TempRoot() {
  static const TempDirectory root;
  return root.path();
}

// A model directory for (preset, overrides, dtype, seed), made on first use.
inline std::string MakeModel(const std::string& preset, MakeModelOverrides overrides, uint64_t seed = 7) {
  static std::map<std::string, std::string> made;
  std::string key = preset + "-L" + std::to_string(overrides.num_hidden_layers.value_or(0)) + "-V" +
                    std::to_string(overrides.vocab_size.value_or(0)) + (overrides.no_q_lora ? "-noq" : "") +
                    "-" + overrides.rope.value_or("default") + "-d" +
                    std::to_string(static_cast<int>(overrides.dtype)) + "-s" + std::to_string(seed);
  auto it = made.find(key);
  if (it != made.end()) return it->second;
  auto config = MakeModelConfig(preset, overrides);
  EXPECT_TRUE(config.ok()) << config.status().message();
  const std::string dir = TempRoot() + "/" + key;
  RandomCheckpointOptions options;
  options.dtype = overrides.dtype;
  options.seed = seed;
  const Status st = WriteRandomCheckpoint(config.value(), options, dir);
  EXPECT_TRUE(st.ok()) << st.message();
  made[key] = dir;
  return dir;
}

// Logits [P + decode_steps, vocab] for `tokens`: the first P in one prefill span,
// the rest fed one by one through the cache (teacher forcing, so modes see the same inputs).
inline std::vector<float> PrefillThenDecode(DeepSeekModel& model, const std::vector<int32_t>& tokens, int64_t P) {
  SequenceCaches caches = model.NewCaches(1, static_cast<int64_t>(tokens.size()));
  std::vector<float> all, logits;
  std::vector<int32_t> prompt(tokens.begin(), tokens.begin() + P);
  const SequenceSpan prefill[] = {{caches.table(0), 0, P, SpanLogits::kAll}};
  Status st = model.Forward(prompt, prefill, caches.cache(), logits);
  EXPECT_TRUE(st.ok()) << st.message();
  all = logits;
  for (int64_t pos = P; pos < static_cast<int64_t>(tokens.size()); ++pos) {
    const SequenceSpan step[] = {{caches.table(0), pos, 1, SpanLogits::kLast}};
    st = model.Forward(std::vector<int32_t>{tokens[pos]}, step, caches.cache(), logits);
    EXPECT_TRUE(st.ok()) << st.message();
    all.insert(all.end(), logits.begin(), logits.end());
  }
  return all;
}

}  // namespace latte::testing_models
