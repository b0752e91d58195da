// Safetensors checkpoints: reading a model directory (one file, or shards named by
// model.safetensors.index.json) and writing files in the same format.
//
// File layout: an 8-byte little-endian u64 N, then N bytes of JSON header
//   {"<tensor>": {"dtype": "BF16", "shape": [..], "data_offsets": [begin, end]},
//    "__metadata__": {"<key>": "<value>", ...}}
// then the data section; offsets are relative to its start. Every shard is
// memory-mapped, so a tensor's bytes are used in place and loading copies nothing.
// Every header field is validated before a pointer into the mapping is handed out:
// a hostile or truncated file is an error, never a crash.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "base/dtype.h"
#include "base/mapped_file.h"
#include "base/status.h"

namespace latte {

struct TensorInfo {
  std::string name;  // "model.layers.0.self_attn.kv_b_proj.weight"
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;     // outermost first
  const uint8_t* data = nullptr;  // into the shard's mapping; valid while the Checkpoint lives
  size_t nbytes = 0;              // == DTypeRowBytes(dtype, NumElements()): whole blocks for block formats
  std::string file;               // path of the shard it lives in

  int64_t NumElements() const;
};

// A shape as error messages print it: "[7168, 1536]".
std::string ShapeString(const std::vector<int64_t>& shape);

// A model directory's weights.
class Checkpoint {
 public:
  // Opens DIR/model.safetensors.index.json if present (its "weight_map": tensor
  // name -> shard file name), else the single *.safetensors file in DIR (an error
  // if there is none, or several without an index). Every shard is held as
  // `residency` says (base/mapped_file.h: an mmap, or a copy on huge pages); a copy
  // calls `on_read` with the bytes read so far over all shards as it reads.
  static Result<Checkpoint> Open(const std::string& dir, FileResidency residency = FileResidency::kMapped,
                                 const std::function<void(uint64_t)>& on_read = nullptr);

  // Tensors that live elsewhere (a GGUF file's, renamed: model/gguf_checkpoint.h);
  // `owner` keeps their bytes alive as long as the Checkpoint.
  static Checkpoint FromTensors(std::vector<TensorInfo> tensors, std::shared_ptr<const void> owner);

  const TensorInfo* Find(const std::string& name) const;  // nullptr if absent
  // All tensors in all shards: shards in name order, each in data-offset order.
  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  size_t TotalBytes() const;  // sum of nbytes over tensors()

 private:
  Checkpoint() = default;

  std::vector<std::shared_ptr<MappedFile>> files_;  // keep the mappings alive
  std::shared_ptr<const void> owner_;               // FromTensors: keeps their bytes alive
  std::vector<TensorInfo> tensors_;
  std::unordered_map<std::string, size_t> by_name_;  // name -> index in tensors_
};

// Parses one mapped safetensors file: every tensor, validated against the file.
// Errors are one line naming the file (and the tensor, when there is one).
Result<std::vector<TensorInfo>> ReadSafetensorsHeader(const MappedFile& file);
// The same over `size` bytes at `data`, named `path` in messages; the tensors point
// into `data`. What fuzz/safetensors_fuzz.cc feeds arbitrary bytes through.
Result<std::vector<TensorInfo>> ReadSafetensorsHeader(const std::string& path, const uint8_t* data, size_t size);

// Writes one safetensors file. Tensors are written in the order added. Data is
// either moved in (one copy, owned by the writer) or produced at write time by a
// fill callback, so make-model can stream GBs while holding only the largest
// tensor in memory.
class SafetensorsWriter {
 public:
  // Writes exactly `nbytes` bytes of the tensor into `dst` (called once, by Write).
  using FillFn = std::function<void(uint8_t* dst, size_t nbytes)>;

  // The bytes are moved in; Write checks that their count matches shape and dtype.
  void Add(std::string name, DType dtype, std::vector<int64_t> shape, std::vector<uint8_t> bytes);
  // The bytes are produced by `fill` during Write into a scratch buffer reused
  // across tensors.
  void Add(std::string name, DType dtype, std::vector<int64_t> shape, FillFn fill);

  // Bytes the data section will hold (the sum of every tensor's size); what
  // WriteShardIndex's total_size sums over shards. 0 if a shape overflows.
  uint64_t DataBytes() const;

  // Validates every tensor (unique names, non-negative dims, byte counts), then
  // writes `path` via a temporary file renamed into place, so a failed write
  // never leaves a half-written file under the final name.
  Status Write(const std::string& path, const std::map<std::string, std::string>& metadata = {}) const;

 private:
  struct Entry {
    std::string name;
    DType dtype;
    std::vector<int64_t> shape;
    std::vector<uint8_t> bytes;  // used when fill is empty
    FillFn fill;
  };
  std::vector<Entry> entries_;
};

// Writes DIR/model.safetensors.index.json in the Hugging Face format:
// {"metadata": {"total_size": N}, "weight_map": {"<tensor>": "<shard file name>", ...}}.
Status WriteShardIndex(const std::string& dir, const std::map<std::string, std::string>& weight_map,
                       uint64_t total_size);

}  // namespace latte
