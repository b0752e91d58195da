// A Hugging Face DeepSeek directory written as a GGUF file of llama.cpp's `deepseek2`
// architecture, as llama.cpp's convert_hf_to_gguf.py followed by llama-quantize would
// write it (`latte convert`): the deepseek2.* metadata keys, the tokenizer.ggml.*
// vocabulary and tokenizer.chat_template, llama.cpp's tensor names, the routed experts
// stacked per layer ([E, width, d]), kv_b_proj as one attn_kv_b (the older layout) or
// split into attn_k_b / attn_v_b (the layout llama.cpp's MLA reads). What latte's GGUF
// reader is tested on, and what llama.cpp (the tests' oracle) reads too.
//
// Types: 1-D tensors and the router stay F32 (as llama-quantize leaves them); every
// other matrix takes `type`, or, where its rows are not a whole number of the type's
// blocks (k_b's d_n = 128 columns, V2-Lite's 1408-wide experts under a 256-value K
// format), the fallback llama-quantize takes: Q4_K -> Q5_0, Q5_K -> Q5_1, Q6_K -> Q8_0, Q2_K / Q3_K -> Q4_0,
// IQ4_XS -> IQ4_NL, F16 where 32 does not divide the row either. kQ4_K_M is llama.cpp's Q4_K_M recipe in
// outline: Q4_K, with Q6_K for lm_head, attn_v_b / attn_kv_b and ffn_down.
#pragma once

#include <optional>
#include <string>

#include "base/dtype.h"
#include "base/status.h"

namespace latte {

enum class GgufExportLayout {
  kSplitKvB,  // attn_k_b + attn_v_b (convert_hf_to_gguf.py since llama.cpp's MLA)
  kKvB,       // attn_kv_b, as Hugging Face stores it (older files)
};

struct GgufExportOptions {
  DType type = DType::kQ8_0;  // F32, F16, BF16, Q8_0, Q4_0, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS
  bool q4_k_m = false;        // the Q4_K_M mix (type is then Q4_K)
  GgufExportLayout layout = GgufExportLayout::kSplitKvB;
  // tokenizer.ggml.pre: "deepseek-v3" (V3/R1), "deepseek-llm" (V2). Empty: by the
  // config's architecture, as the converter decides.
  std::string pre;
};

// "F32", "F16", "BF16", "Q8_0", "Q4_0", "Q5_0", "Q5_1", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "IQ4_NL",
// "IQ4_XS", "Q4_K_M".
Result<GgufExportOptions> ParseGgufExportType(const std::string& name);

// Reads `model_dir` (config.json, safetensors in bf16 / f16 / f32 / fp8, tokenizer.json,
// tokenizer_config.json's chat template when present) and writes `out_path`.
Status ExportGguf(const std::string& model_dir, const std::string& out_path, const GgufExportOptions& options);

}  // namespace latte
