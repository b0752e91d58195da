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
  std::vector<int32_t> ranks;                                   // data-parallel: the rank that runs each request
  std::vector<int64_t> aborts;
};

std::vector<uint8_t> EncodeStepControl(const StepControl& control);
// kDataLoss for bytes EncodeStepControl did not write.
Result<StepControl> DecodeStepControl(const std::vector<uint8_t>& bytes);

// Under data-parallel attention, what each rank tells the others after every step
// (all-gathered): its tokens this step and its load, which the leader assigns new
// requests by and reports per rank.
struct StepShape {
  int64_t tokens = 0;
  int64_t running = 0;
  int64_t waiting = 0;
  int64_t kv_blocks_total = 0;
  int64_t kv_blocks_used = 0;
  int64_t kv_blocks_cached = 0;
  double collective_seconds = 0;  // inside collectives so far
  double step_seconds = 0;        // inside steps so far
};

// A data-parallel rank's outputs of one step, for the rank that serves their clients.
std::vector<uint8_t> EncodeOutputs(const std::vector<std::pair<int64_t, GenerationOutput>>& outputs);
Result<std::vector<std::pair<int64_t, GenerationOutput>>> DecodeOutputs(const std::vector<uint8_t>& bytes);

}  // namespace latte
