// Writes a float32 NumPy .npy file (format version 1.0), the form in which
// `latte generate --logits-out` hands logits to other tools.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"

namespace latte {

// data: row-major float32 of `shape`.
Status WriteNpyF32(const std::string& path, const std::vector<int64_t>& shape, const float* data);

// Reads a float32 C-order .npy file written by WriteNpyF32 (or NumPy); for tests.
Result<std::vector<float>> ReadNpyF32(const std::string& path, std::vector<int64_t>* shape);

}  // namespace latte
