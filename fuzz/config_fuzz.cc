// libFuzzer harness for config.json: arbitrary text is parsed as a model's config.
// Errors are fine. A config that parses must round-trip through ToJsonText, and
// everything a loader and `latte calc` derive from it (the checkpoint's tensor list,
// the cost model's bytes and FLOPs in every mode) must come out without a crash, a
// sanitizer report (UBSan: integer overflow) or a runaway allocation. Built by
// -DLATTE_FUZZ=ON; run by scripts/fuzz.sh.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "model/config.h"
#include "model/cost_model.h"
#include "model/tensor_specs.h"

namespace {

[[noreturn]] void Fail(const char* what, const std::string& detail) {
  std::fprintf(stderr, "config_fuzz: %s\n%s\n", what, detail.c_str());
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  latte::Result<latte::ModelConfig> config = latte::ModelConfig::FromJsonText(text);
  if (!config.ok()) {
    if (config.status().message().empty()) Fail("an error without a message", text);
    return 0;
  }
  const latte::ModelConfig& c = *config;

  // What make-model writes from a config must read back as the same config.
  const std::string written = c.ToJsonText();
  latte::Result<latte::ModelConfig> reread = latte::ModelConfig::FromJsonText(written);
  if (!reread.ok()) Fail("ToJsonText's output does not parse", reread.status().message() + "\n" + written);
  if (reread->ToJsonText() != written) Fail("ToJsonText does not round-trip", written);
  if (!std::isfinite(c.SoftmaxScale()) || !(c.SoftmaxScale() > 0)) Fail("softmax scale", written);

  // The loader's tensor list.
  int64_t values = 0;
  for (const latte::TensorSpec& t : latte::ExpectedTensors(c)) {
    int64_t n = 1;
    for (int64_t dim : t.shape) {
      if (dim <= 0) Fail(("tensor " + t.name + " has a dimension <= 0").c_str(), written);
      n *= dim;
    }
    values += n;
  }
  // `latte calc` and the benchmarks' cost model.
  for (latte::MlaMode mode : latte::kMlaModesInPrintOrder) {
    const latte::WeightCosts costs = latte::ComputeWeightCosts(c, mode);
    if (costs.model_params.Checkpoint() != values) {
      Fail("the cost model's checkpoint values differ from the tensor list's", written);
    }
    (void)latte::HeldWeightBytes(c, mode);
    (void)latte::DecodeFlopsPerCachedRow(c, mode);
    (void)latte::ComputeAttentionStepCosts(c, mode, /*batch=*/8, /*context=*/4096);
    (void)latte::DecodeCostsPerToken(c, mode, /*batch=*/8, /*context=*/4096, latte::WeightValueBytes::Uniform(2),
                                     /*kv_value_bytes=*/2);
  }
  (void)latte::ComputeMaterializeExtra(c, /*gpus=*/8);
  (void)latte::ComputeDecodeProjectionFlops(c);
  (void)latte::ComputeAttentionCoreFlops(c);
  (void)latte::ComputeKvCacheBytes(c);
  (void)latte::ComputeAttentionCoreStepCosts(c, /*batch=*/8, /*context=*/4096);
  (void)latte::PrefillCostsPerToken(c, /*prompt=*/512, latte::WeightValueBytes::Uniform(2),
                                    /*kv_value_bytes=*/2);
  return 0;
}
