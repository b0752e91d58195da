// Named model shapes. Real configs (what DeepSeek released) feed `latte calc`;
// make-model presets are random-weight test models in the same format.
#pragma once

#include <string>
#include <vector>

#include "base/status.h"
#include "model/config.h"

namespace latte {

// The one list of preset names every command takes (make-model, calc, bench attn):
// tiny, v2, v2-lite, v3, r1; and the same as "tiny, v2, v2-lite, v3, r1".
const std::vector<std::string>& PresetNames();
std::string PresetList();

// The shapes a preset name stands for, for the commands that need no weights (calc,
// bench attn): "v2" (DeepSeek-V2, 236B), "v2-lite" (DeepSeek-V2-Lite, 16B), "v3" and
// "r1" (DeepSeek-V3 / R1, 671B; same shapes): the released config.json values;
// "tiny": make-model's toy model.
Result<ModelConfig> ReleasedConfig(const std::string& name);

// What make-model writes for a preset name (random weights, so the released MoE
// sizes would be hundreds of GB):
//   "tiny":    a few layers of toy width; builds and runs in seconds.
//   "v2-lite": DeepSeek-V2-Lite shapes exactly (cut layers with --layers).
//   "v3", "r1": DeepSeek-V3/R1 attention shapes (d 7168, 128 heads, q_lora 1536,
//              kv_lora 512) and V3 routing, with the MoE and dense MLP shrunk
//              (16 experts of width 256, dense width 2048) so a few layers fit in a few GB.
//   "v2":      the same for DeepSeek-V2 (d 5120, 128 heads, V2 routing).
Result<ModelConfig> MakeModelPreset(const std::string& name);

}  // namespace latte
