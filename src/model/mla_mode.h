// How decode attention is computed (docs/mla.md, "The same attention, three ways").
#pragma once

#include <optional>
#include <string_view>

namespace latte {

enum class MlaMode {
  kAbsorbed,      // default: q → W_UKᵀ per head → latent attention → W_UV per head → o_proj
  kMaterialized,  // W_Q_UK and W_UV_O precomputed at load (the baseline)
  kNaive,         // K and V decompressed for every cached token at every step (reference)
};

inline std::string_view MlaModeName(MlaMode m) {
  switch (m) {
    case MlaMode::kAbsorbed: return "absorbed";
    case MlaMode::kMaterialized: return "materialized";
    case MlaMode::kNaive: return "naive";
  }
  return "?";
}

inline std::optional<MlaMode> ParseMlaMode(std::string_view s) {
  if (s == "absorbed") return MlaMode::kAbsorbed;
  if (s == "materialized") return MlaMode::kMaterialized;
  if (s == "naive") return MlaMode::kNaive;
  return std::nullopt;
}

}  // namespace latte
