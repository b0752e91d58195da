#include "synth/random_checkpoint.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <vector>

#include "base/dtype.h"
#include "base/splitmix64.h"
#include "kernels/fp8_quantize.h"
#include "model/presets.h"
#include "model/safetensors.h"
#include "model/tensor_specs.h"
#include "synth/tiny_tokenizer.h"

namespace latte {
namespace {

namespace fs = std::filesystem;

// ---- Random values ----------------------------------------------------------------

uint64_t Fnv1a(const std::string& s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

// How one tensor's values are drawn: center + half_width * u, u uniform in (-1, 1).
struct ValueStream {
  uint64_t key = 0;  // from (seed, tensor name)
  float center = 0;
  float half_width = 0;

  // Element `index` in row-major order: output index + 1 of splitmix64 from `key`.
  float At(uint64_t index) const {
    const uint64_t bits = SplitMix64Mix(key + (index + 1) * kSplitMix64Gamma);
    // Top 24 bits, centred: u in (-1, 1), symmetric about 0, exact in float.
    const float u = (static_cast<float>(bits >> 40) + 0.5f) * (2.0f / 16777216.0f) - 1.0f;
    return center + half_width * u;
  }
};

// Uniform on [-a, a] has std a/sqrt(3).
constexpr float kSqrt3 = 1.7320508f;

// The scales of the file-top comment in random_checkpoint.h.
ValueStream StreamFor(const TensorSpec& spec, const ModelConfig& config, uint64_t seed) {
  ValueStream s;
  s.key = SplitMix64Mix(seed ^ SplitMix64Mix(Fnv1a(spec.name)));
  const float inv_sqrt_d = 1.0f / std::sqrt(static_cast<float>(config.hidden_size));
  switch (spec.kind) {
    case TensorKind::kEmbedding:
      s.half_width = kSqrt3 * (spec.name.ends_with("embed_tokens.weight") ? 1.0f : inv_sqrt_d);
      break;
    case TensorKind::kRouter: s.half_width = kSqrt3 * inv_sqrt_d; break;
    case TensorKind::kVector:
      if (spec.name.ends_with("e_score_correction_bias")) {
        s.half_width = 0.1f;
      } else {
        s.center = 1.0f;  // a norm weight: a gain near 1 keeps the normalised RMS near 1
        s.half_width = 0.1f;
      }
      break;
    case TensorKind::kLinear: {
      float stddev = 1.0f / std::sqrt(static_cast<float>(spec.shape[1]));
      if (spec.name.ends_with("o_proj.weight") || spec.name.ends_with("down_proj.weight")) {
        // These add into the residual stream: 2 L additions of std/sqrt(2 L) sum to O(1).
        stddev /= std::sqrt(2.0f * static_cast<float>(config.num_hidden_layers));
      }
      s.half_width = kSqrt3 * stddev;
      break;
    }
  }
  return s;
}

// ---- Filling tensor bytes -----------------------------------------------------------

// A tensor seen as rows x cols (a 1-D vector is one row).
struct Matrix {
  int64_t rows;
  int64_t cols;
};

Matrix AsMatrix(const std::vector<int64_t>& shape) {
  if (shape.size() == 1) return {1, shape[0]};
  return {shape[0], shape[1]};
}

// out[r - row_begin][c] for rows [row_begin, row_end).
void DrawRows(const ValueStream& s, Matrix m, int64_t row_begin, int64_t row_end, float* out) {
  for (int64_t r = row_begin; r < row_end; ++r) {
    const uint64_t base = static_cast<uint64_t>(r) * static_cast<uint64_t>(m.cols);
    float* row = out + (r - row_begin) * m.cols;
    for (int64_t c = 0; c < m.cols; ++c) row[c] = s.At(base + c);
  }
}

// Below this many elements a tensor is drawn on one thread: waking the OpenMP team
// costs more than drawing 64K values (~0.1 ms), and tiny models have hundreds of
// small tensors.
constexpr int64_t kParallelMinElements = 1 << 16;

bool WorthParallel(Matrix m) { return m.rows * m.cols >= kParallelMinElements; }

// F32 or BF16, one row per iteration. Every value depends only on its index, so the
// bytes are the same for any thread count.
void FillPlain(const ValueStream& s, Matrix m, DType dtype, uint8_t* dst) {
  const size_t elem = DTypeSize(dtype);
#pragma omp parallel if (WorthParallel(m))
  {
    std::vector<float> row(m.cols);      // row: [cols]
    std::vector<bf16> row_bf16(m.cols);  // row_bf16: [cols]
#pragma omp for schedule(static)
    for (int64_t r = 0; r < m.rows; ++r) {
      DrawRows(s, m, r, r + 1, row.data());
      uint8_t* out = dst + static_cast<size_t>(r) * m.cols * elem;
      if (dtype == DType::kF32) {
        std::memcpy(out, row.data(), m.cols * sizeof(float));
      } else {
        for (int64_t c = 0; c < m.cols; ++c) row_bf16[c] = F32ToBf16(row[c]);
        std::memcpy(out, row_bf16.data(), m.cols * sizeof(bf16));
      }
    }
  }
}

// The values of one block row (up to block_rows rows) and the scale_inv of each of
// its column blocks (kernels/fp8_quantize.h: max|w| / 448, so the block's largest
// value maps to +-448).
void DrawBlockRow(const ValueStream& s, Matrix m, const Fp8Quantization& q, int64_t block_row,
                  std::vector<float>& values, std::vector<float>& scales) {
  const int64_t r0 = block_row * q.block_rows;
  const int64_t r1 = std::min(m.rows, r0 + q.block_rows);
  values.resize((r1 - r0) * m.cols);  // values: [r1 - r0, cols]
  DrawRows(s, m, r0, r1, values.data());
  scales.resize((m.cols + q.block_cols - 1) / q.block_cols);  // scales: [col_blocks]
  Fp8BlockRowScales(values.data(), r1 - r0, m.cols, m.cols, q.block_cols, scales.data());
}

int64_t BlockRows(Matrix m, const Fp8Quantization& q) { return (m.rows + q.block_rows - 1) / q.block_rows; }

// The F8_E4M3 weight: each value divided by its block's scale_inv, rounded
// (kernels/fp8_quantize.h, the scheme --quantize fp8 applies at load).
void FillFp8(const ValueStream& s, Matrix m, const Fp8Quantization& q, uint8_t* dst) {
#pragma omp parallel if (WorthParallel(m))
  {
    std::vector<float> values, scales;
#pragma omp for schedule(dynamic)
    for (int64_t br = 0; br < BlockRows(m, q); ++br) {
      DrawBlockRow(s, m, q, br, values, scales);
      const int64_t rows = static_cast<int64_t>(values.size()) / m.cols;
      uint8_t* out = dst + static_cast<size_t>(br * q.block_rows) * m.cols;
      QuantizeFp8BlockRow(values.data(), rows, m.cols, m.cols, q.block_cols, scales.data(), out);
    }
  }
}

// The F32 <name>_scale_inv: [ceil(rows/128), ceil(cols/128)]. Redraws the values
// rather than caching them from FillFp8, so the two tensors stay independent
// (drawing, ~2 ns a value, is cheap next to FillFp8's rounding at ~14 ns).
void FillScaleInv(const ValueStream& s, Matrix m, const Fp8Quantization& q, uint8_t* dst) {
  const int64_t col_blocks = (m.cols + q.block_cols - 1) / q.block_cols;
#pragma omp parallel if (WorthParallel(m))
  {
    std::vector<float> values, scales;
#pragma omp for schedule(dynamic)
    for (int64_t br = 0; br < BlockRows(m, q); ++br) {
      DrawBlockRow(s, m, q, br, values, scales);
      std::memcpy(dst + static_cast<size_t>(br) * col_blocks * sizeof(float), scales.data(),
                  col_blocks * sizeof(float));
    }
  }
}

// ---- Planning the files -------------------------------------------------------------

struct PlannedTensor {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  SafetensorsWriter::FillFn fill;

  uint64_t Bytes() const {
    uint64_t n = DTypeSize(dtype);
    for (int64_t dim : shape) n *= static_cast<uint64_t>(dim);
    return n;
  }
};

// A weight and, under fp8, its scale_inv: kept in one shard, as the release does.
using TensorGroup = std::vector<PlannedTensor>;

// The storage dtype of a tensor that is not an fp8 linear (see the file-top comment).
DType PlainDType(const TensorSpec& spec, CheckpointDType dtype) {
  if (dtype == CheckpointDType::kF32) return DType::kF32;
  if (spec.name.ends_with("e_score_correction_bias")) return DType::kF32;  // as V3 stores it
  return DType::kBF16;
}

TensorGroup PlanTensor(const TensorSpec& spec, const ModelConfig& config, const RandomCheckpointOptions& options) {
  const ValueStream stream = StreamFor(spec, config, options.seed);
  const Matrix m = AsMatrix(spec.shape);
  if (options.dtype == CheckpointDType::kFp8 && spec.kind == TensorKind::kLinear) {
    const Fp8Quantization q = *config.quantization;
    return {{spec.name, DType::kF8E4M3, spec.shape, [=](uint8_t* dst, size_t) { FillFp8(stream, m, q, dst); }},
            {spec.name + "_scale_inv", DType::kF32, ScaleInvShape(spec.shape, q),
             [=](uint8_t* dst, size_t) { FillScaleInv(stream, m, q, dst); }}};
  }
  const DType dtype = PlainDType(spec, options.dtype);
  return {{spec.name, dtype, spec.shape, [=](uint8_t* dst, size_t) { FillPlain(stream, m, dtype, dst); }}};
}

// Greedy, in tensor order, as transformers' save_pretrained shards: a shard closes
// when the next group would take it past shard_bytes (a group bigger than that
// gets a shard of its own).
std::vector<std::vector<TensorGroup>> PlanShards(std::vector<TensorGroup> groups, uint64_t shard_bytes) {
  std::vector<std::vector<TensorGroup>> shards(1);
  uint64_t current = 0;
  for (TensorGroup& group : groups) {
    uint64_t bytes = 0;
    for (const PlannedTensor& t : group) bytes += t.Bytes();
    if (!shards.back().empty() && current + bytes > shard_bytes) {
      shards.emplace_back();
      current = 0;
    }
    shards.back().push_back(std::move(group));
    current += bytes;
  }
  return shards;
}

// "model-00002-of-00005.safetensors", as Hugging Face names shards.
std::string ShardName(size_t index, size_t count) {
  char name[64];
  std::snprintf(name, sizeof name, "model-%05zu-of-%05zu.safetensors", index + 1, count);
  return name;
}

// ---- Writing the directory ----------------------------------------------------------

// Removes weight files an earlier run may have left: a stale index or extra shard
// would make the reader see a different checkpoint from the one just written.
Status RemoveStaleWeights(const std::string& dir) {
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    const bool ours = name == "model.safetensors" || name == "model.safetensors.index.json" ||
                      (name.starts_with("model-") && name.ends_with(".safetensors"));
    if (ours && !fs::remove(entry.path(), ec)) {
      return Status::InvalidArgument(entry.path().string() + ": cannot remove stale file");
    }
  }
  if (ec) return Status::NotFound(dir + ": cannot list: " + ec.message());
  return Status::Ok();
}

Status WriteTextFile(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
  if (!out.flush()) return Status::Internal(path + ": cannot write");
  return Status::Ok();
}

Status CheckDTypeMatchesConfig(const ModelConfig& config, CheckpointDType dtype) {
  const bool fp8 = dtype == CheckpointDType::kFp8;
  if (fp8 && !config.quantization) {
    return Status::InvalidArgument("fp8 output needs config.quantization (quantization_config)");
  }
  if (!fp8 && config.quantization) {
    return Status::InvalidArgument("config has quantization_config but the dtype is not fp8");
  }
  return Status::Ok();
}

}  // namespace

std::optional<CheckpointDType> ParseCheckpointDType(const std::string& name) {
  if (name == "bf16") return CheckpointDType::kBf16;
  if (name == "f32") return CheckpointDType::kF32;
  if (name == "fp8") return CheckpointDType::kFp8;
  return std::nullopt;
}

Result<ModelConfig> MakeModelConfig(const std::string& preset, const MakeModelOverrides& overrides) {
  LATTE_ASSIGN_OR_RETURN(ModelConfig c, MakeModelPreset(preset));
  if (overrides.num_hidden_layers) {
    if (*overrides.num_hidden_layers < 1 || *overrides.num_hidden_layers > kMaxMakeModelLayers) {
      return Status::InvalidArgument("--layers must be in [1, " + std::to_string(kMaxMakeModelLayers) + "]");
    }
    c.num_hidden_layers = *overrides.num_hidden_layers;
  }
  if (overrides.vocab_size) {
    if (*overrides.vocab_size < TinyTokenizerSize() || *overrides.vocab_size > kMaxMakeModelVocab) {
      return Status::InvalidArgument("--vocab must be in [" + std::to_string(TinyTokenizerSize()) +
                                     " (the tokenizer's size), " + std::to_string(kMaxMakeModelVocab) + "]");
    }
    c.vocab_size = *overrides.vocab_size;
  }
  if (overrides.no_q_lora) c.q_lora_rank = std::nullopt;
  if (overrides.mtp_layers) {
    if (*overrides.mtp_layers < 0 || *overrides.mtp_layers > 4) {
      return Status::InvalidArgument("--mtp-layers must be in [0, 4]");
    }
    c.num_nextn_predict_layers = *overrides.mtp_layers;
  }
  if (overrides.rope) {
    if (*overrides.rope == "plain") {
      c.rope_scaling = std::nullopt;
    } else if (*overrides.rope == "yarn") {
      // Every preset has YaRN already; a config without it gets a 4x extension.
      if (!c.rope_scaling) {
        c.rope_scaling = YarnScaling{4, std::max<int64_t>(1, c.max_position_embeddings / 4), 32, 1, 1.0, 1.0};
      }
    } else {
      return Status::InvalidArgument("--rope must be plain or yarn, got \"" + *overrides.rope + "\"");
    }
  }
  c.quantization = overrides.dtype == CheckpointDType::kFp8 ? std::optional<Fp8Quantization>(Fp8Quantization{128, 128})
                                                            : std::nullopt;
  if (c.bos_token_id >= c.vocab_size || c.eos_token_id >= c.vocab_size) {
    c.bos_token_id = 0;
    c.eos_token_id = 1;
  }
  // Through config.json text and back: validates, and guarantees the file written
  // reads back as exactly this config.
  return ModelConfig::FromJsonText(c.ToJsonText());
}

Status WriteRandomCheckpoint(const ModelConfig& config, const RandomCheckpointOptions& options, const std::string& dir,
                             RandomCheckpointSummary* summary) {
  LATTE_RETURN_IF_ERROR(CheckDTypeMatchesConfig(config, options.dtype));
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec || !fs::is_directory(dir)) {
    return Status::Internal(dir + ": cannot create directory" + (ec ? ": " + ec.message() : ""));
  }
  LATTE_RETURN_IF_ERROR(RemoveStaleWeights(dir));
  LATTE_RETURN_IF_ERROR(WriteTextFile(dir + "/config.json", config.ToJsonText()));
  LATTE_RETURN_IF_ERROR(WriteTinyTokenizer(config, dir));

  std::vector<TensorGroup> groups;
  for (const TensorSpec& spec : ExpectedTensors(config)) {
    groups.push_back(PlanTensor(spec, config, options));
  }
  for (const TensorSpec& spec : ExpectedMtpTensors(config)) {
    groups.push_back(PlanTensor(spec, config, options));
  }
  const auto shards = PlanShards(std::move(groups), options.shard_bytes);

  const std::map<std::string, std::string> metadata = {{"format", "pt"}};
  std::map<std::string, std::string> weight_map;  // tensor -> shard file name
  RandomCheckpointSummary totals;
  totals.shards = static_cast<int64_t>(shards.size());
  for (size_t i = 0; i < shards.size(); ++i) {
    const std::string file = shards.size() == 1 ? "model.safetensors" : ShardName(i, shards.size());
    SafetensorsWriter writer;
    for (const TensorGroup& group : shards[i]) {
      for (const PlannedTensor& t : group) {
        writer.Add(t.name, t.dtype, t.shape, t.fill);
        weight_map[t.name] = file;
        ++totals.tensors;
      }
    }
    totals.bytes += writer.DataBytes();
    LATTE_RETURN_IF_ERROR(writer.Write(dir + "/" + file, metadata));
  }
  if (shards.size() > 1) LATTE_RETURN_IF_ERROR(WriteShardIndex(dir, weight_map, totals.bytes));
  if (summary != nullptr) *summary = totals;
  return Status::Ok();
}

Status WriteModelDirectory(const ModelConfig& config, const RandomCheckpointOptions& options, const std::string& dir,
                           bool replace, RandomCheckpointSummary* summary) {
  std::error_code ec;
  if (fs::exists(dir, ec) && !fs::is_directory(dir, ec)) return Status::NotFound(dir + " exists and is not a folder");
  if (fs::is_directory(dir, ec)) {
    for (const auto& entry : fs::directory_iterator(dir, ec)) {
      const std::string name = entry.path().filename().string();
      if (!name.ends_with(".safetensors") && name != "model.safetensors.index.json") continue;
      if (!replace) {
        return Status::InvalidArgument(dir + " already holds a model (" + name + "); give --force to replace it");
      }
      if (!fs::remove(entry.path(), ec)) return Status::InvalidArgument(entry.path().string() + ": cannot remove");
    }
  }
  // Beside `dir`, so the moves below stay on one file system.
  const fs::path target = fs::path(dir).lexically_normal();
  const fs::path parent = target.has_parent_path() ? target.parent_path() : fs::path(".");
  const fs::path temp = parent / (".latte-make-model-" + std::to_string(::getpid()) + "-" +
                                  (target.filename().empty() ? "out" : target.filename().string()));
  fs::remove_all(temp, ec);
  const Status written = WriteRandomCheckpoint(config, options, temp.string(), summary);
  if (!written.ok()) {
    fs::remove_all(temp, ec);
    return written;
  }
  if (!fs::exists(target, ec)) {
    fs::rename(temp, target, ec);
    if (ec) {
      fs::remove_all(temp, ec);
      return Status::InvalidArgument(dir + ": cannot move the new model into place: " + ec.message());
    }
    return Status::Ok();
  }
  // `dir` exists (empty, or --force): the weights first, config.json last, so the folder
  // reads as a model only once it is whole.
  std::vector<fs::path> files;
  for (const auto& entry : fs::directory_iterator(temp, ec)) files.push_back(entry.path());
  std::stable_partition(files.begin(), files.end(), [](const fs::path& f) { return f.filename() != "config.json"; });
  for (const fs::path& f : files) {
    fs::rename(f, target / f.filename(), ec);
    if (ec) {
      const std::string message = ec.message();
      fs::remove_all(temp, ec);
      return Status::InvalidArgument((target / f.filename()).string() + ": cannot move into place: " + message);
    }
  }
  fs::remove_all(temp, ec);
  return Status::Ok();
}

}  // namespace latte
