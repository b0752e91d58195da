// A GGUF file of llama.cpp's `deepseek2` architecture (DeepSeek-V2, V2-Lite, V3, R1 as
// llama.cpp's convert_hf_to_gguf.py writes them) as latte's model: the ModelConfig from
// its metadata, and its tensors under the Hugging Face names the loader expects, in
// the types the file stores them (model/model_weights.h holds them as stored).
//
// Names: `blk.N.attn_kv_a_mqa.weight` is `model.layers.N.self_attn.kv_a_proj_with_mqa.weight`
// and so on (kGgufLayerNames); `token_embd`, `output_norm`, `output` are embed_tokens,
// model.norm and lm_head. Two things are not one-to-one:
//   - routed experts are stacked, `blk.N.ffn_gate_exps.weight`: [E, width, d]; expert e
//     is rows [e·width, (e+1)·width) of it, a view without a copy;
//   - kv_b_proj: older files store `attn_kv_b` [H·(d_n + d_v), d_c] as Hugging Face does;
//     newer ones split it for llama.cpp's absorbed attention into `attn_k_b`
//     [H, d_c, d_n] (W_UK,h transposed) and `attn_v_b` [H, d_v, d_c]. From those the
//     kv_b_proj rows are rebuilt (dequantized, f32): per head d_n rows of W_UK, d_v of W_UV.
// Config: the `deepseek2.*` keys (llama.cpp's names); q_lora is absent exactly when
// `attention.q_lora_rank` is absent or 0 (V2-Lite), never guessed from the layer count;
// files whose block_count counts the multi-token-prediction layers
// (`nextn_predict_layers`) have those left out of num_hidden_layers.
#pragma once

#include <memory>
#include <string>

#include "base/gguf_file.h"
#include "base/status.h"
#include "model/config.h"
#include "model/safetensors.h"

namespace latte {

// The GGUF file `--model PATH` names: PATH itself when it ends in ".gguf", the one
// .gguf in a directory (of a split set, its first file), or nullopt for a directory
// without one (a Hugging Face directory). Errors: a directory with several GGUF models.
Result<std::optional<std::string>> FindGgufFile(const std::string& path);

// The model's config from the metadata (`name`: the file, for messages). Errors name
// the GGUF key: another architecture, a missing or out-of-range key.
Result<ModelConfig> ConfigFromGguf(const GgufModel& gguf, const std::string& name);

// The tensors of `gguf` under Hugging Face names for `config`, pointing into the file
// (rebuilt kv_b_proj: into memory the Checkpoint owns). Errors: a tensor of a type
// latte does not compute on (named, with the supported list); k_b / v_b of the wrong
// shape. Shapes and missing tensors are the loader's check, against ExpectedTensors.
Result<Checkpoint> CheckpointFromGguf(std::shared_ptr<const GgufModel> gguf, const ModelConfig& config);

// The same tensors' names, types, shapes and bytes without reading any data (`latte calc
// --model`): a split kv_b_proj is listed in its rebuilt shape with attn_k_b's type and
// the bytes attn_k_b and attn_v_b take in the file, and no data.
Result<std::vector<TensorInfo>> GgufTensorTable(std::shared_ptr<const GgufModel> gguf, const ModelConfig& config);

}  // namespace latte
