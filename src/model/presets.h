// Named model shapes. Real configs (what DeepSeek released) feed `latte calc`;
// make-model presets are random-weight test models in the same format.
#pragma once

#include <string>

#include "base/status.h"
#include "model/config.h"

namespace latte {

// "v2" (DeepSeek-V2, 236B), "v2-lite" (DeepSeek-V2-Lite, 16B), "v3" and "r1"
// (DeepSeek-V3 / R1, 671B; same shapes): the released config.json values.
Result<ModelConfig> ReleasedConfig(const std::string& name);

// make-model presets:
//   "tiny":    a few layers of toy width; builds and runs in seconds.
//   "v2-lite": DeepSeek-V2-Lite shapes exactly (cut layers with --layers).
//   "r1":      DeepSeek-V3/R1 attention shapes (d 7168, 128 heads, q_lora 1536,
//              kv_lora 512) and V3 routing, with the MoE and dense MLP shrunk
//              (16 experts of width 256, dense width 2048) so a few layers fit in a few GB.
Result<ModelConfig> MakeModelPreset(const std::string& name);

}  // namespace latte
