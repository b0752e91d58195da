// What the leading rank of a tensor-parallel group tells the others at the start of
// every engine step: the requests that arrived (with their ids and a fixed seed), the
// aborts, and whether the job is ending. Every rank then runs the same scheduler over
// the same requests, so every rank plans the same batch: one broadcast per step keeps
// the group in lockstep.
#pragma once

#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "base/status.h"
#include "engine/request.h"

namespace latte {

struct StepControl {
  bool shutdown = false;
  std::vector<std::pair<int64_t, GenerationRequest>> requests;  // (id, request)
  std::vector<int64_t> aborts;
};

std::vector<uint8_t> EncodeStepControl(const StepControl& control);
// kDataLoss for bytes EncodeStepControl did not write.
Result<StepControl> DecodeStepControl(const std::vector<uint8_t>& bytes);

}  // namespace latte
