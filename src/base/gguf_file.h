// GGUF files (llama.cpp's model format), read and written: a header, typed metadata
// (key → value), tensor infos, then the aligned tensor data. Knows no model words:
// what the keys and tensors mean is model/ (config, weights) and text/ (vocabulary).
//
// Layout (little-endian, version 3; version 2 reads the same; general.alignment a uint32
// power of two):
//   "GGUF" u32 version, u64 tensor_count, u64 metadata_kv_count,
//   metadata_kv_count × { string key, u32 value_type, value },
//   tensor_count × { string name, u32 n_dims, u64 ne[n_dims] (innermost first),
//                    u32 ggml_type, u64 offset (from the data section's start) },
//   padding to `general.alignment` (default 32), the data section.
// string = u64 length + bytes (no NUL); array = u32 element type + u64 count + elements.
// A split model (`NAME-00001-of-00003.gguf`) is several such files, each with
// `split.no`, `split.count` and `split.tensors.count`; GgufModel opens the set from
// its first file.
//
// Every count, length, type, shape and offset is validated against the file before a
// pointer into it is handed out: a truncated, hostile or corrupt file is an error naming
// the file and what is wrong, never a crash or an allocation the file's size does not
// justify.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <variant>
#include <vector>

#include "base/dtype.h"
#include "base/mapped_file.h"
#include "base/status.h"

namespace latte {

// GGUF's metadata value types, numbered as the format numbers them.
enum class GgufValueType : uint32_t {
  kUint8 = 0,
  kInt8 = 1,
  kUint16 = 2,
  kInt16 = 3,
  kUint32 = 4,
  kInt32 = 5,
  kFloat32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kUint64 = 10,
  kInt64 = 11,
  kFloat64 = 12,
};
std::string_view GgufValueTypeName(GgufValueType type);  // "uint32", "string", "array", ...; "unknown"

// One metadata value. Integers of every width are held as int64_t (uint64 values above
// INT64_MAX are refused at read), floats as double; arrays as a vector of one kind
// (an array of arrays is refused at read: Unimplemented).
struct GgufValue {
  GgufValueType type = GgufValueType::kUint32;
  GgufValueType array_type = GgufValueType::kUint32;  // kArray only: the elements' type
  std::variant<int64_t, double, bool, std::string, std::vector<int64_t>, std::vector<double>, std::vector<bool>,
               std::vector<std::string>>
      value;
};

// ggml's tensor type ids (ggml.h's enum ggml_type): the ones latte computes on map to a
// DType; the rest are known by name and block size so that a file holding them still
// reads (its bytes bounded) and a refusal can name them. The ids ggml removed (4, 5,
// 31-33, 36-38) are undefined here as they are in ggml.
std::optional<DType> DTypeFromGgmlType(uint32_t ggml_type);
// nullopt for F8_E4M3: ggml has no type for it.
std::optional<uint32_t> GgmlTypeFromDType(DType dtype);
// "Q4_K", "IQ2_XXS", ...; "type 99" for an id ggml does not define.
std::string GgmlTypeName(uint32_t ggml_type);
// A type's block: elements per block and bytes per block (1 and 4 for F32, 256 and 144
// for Q4_K); false for an id ggml does not define.
bool GgmlTypeBlock(uint32_t ggml_type, int64_t* block_elements, size_t* block_bytes);

struct GgufTensor {
  std::string name;               // "blk.0.attn_kv_a_mqa.weight"
  uint32_t ggml_type = 0;         // as stored
  std::optional<DType> dtype;     // nullopt: a type latte does not compute on (GgmlTypeName says which)
  std::vector<int64_t> shape;     // outermost first: ne reversed, so a matrix is [rows, cols]
  const uint8_t* data = nullptr;  // into the file's mapping
  size_t nbytes = 0;              // the type's row bytes × rows (trailing alignment padding not counted)
  std::string file;               // path of the (split) file it lives in

  int64_t NumElements() const;
};

// One GGUF file, mapped; or the set of a split model.
class GgufModel {
 public:
  // `path`: a .gguf file, or the first file of a split set (`-00001-of-0000N.gguf`:
  // the others are found beside it by name and checked by their split.* keys: each
  // file's split.count and split.no (0-based), the first's split.tensors.count against
  // the tensors found, tensor names unique across files). A later split's path is an
  // InvalidArgument naming the first. Metadata is the first file's; tensors are every
  // file's, in file then offset order. No two tensors of a file may share bytes.
  static Result<GgufModel> Open(const std::string& path, FileResidency residency = FileResidency::kMapped,
                                const std::function<void(uint64_t)>& on_read = nullptr);
  // The same over `size` bytes at `data`, named `path` in messages; tensors point into
  // `data`. One file: split.* keys are kept as metadata, not followed. What the fuzzer
  // feeds arbitrary bytes through.
  static Result<GgufModel> Parse(const std::string& path, const uint8_t* data, size_t size);

  uint32_t version() const { return version_; }
  const std::map<std::string, GgufValue>& metadata() const { return metadata_; }
  const GgufValue* Find(std::string_view key) const;

  // Typed getters: NotFound when the key is absent, DataLoss (naming the key, the type
  // wanted and the type found) when it holds something else. Integer getters accept any
  // integer type; GetFloat and GetFloatArray accept float32/float64 and integers.
  Result<int64_t> GetInt(std::string_view key) const;
  Result<double> GetFloat(std::string_view key) const;
  Result<bool> GetBool(std::string_view key) const;
  Result<std::string> GetString(std::string_view key) const;
  Result<std::vector<std::string>> GetStringArray(std::string_view key) const;
  Result<std::vector<int64_t>> GetIntArray(std::string_view key) const;
  Result<std::vector<double>> GetFloatArray(std::string_view key) const;

  const std::vector<GgufTensor>& tensors() const { return tensors_; }
  const GgufTensor* FindTensor(std::string_view name) const;  // nullptr if absent
  size_t TensorBytes() const;                                 // sum of nbytes
  // The files of the set (one unless split), in split order.
  std::vector<std::string> files() const;

 private:
  GgufModel() = default;
  Result<const GgufValue*> FindOrError(std::string_view key) const;
  Status WrongType(std::string_view key, const GgufValue& value, std::string_view wanted) const;

  std::string path_;                // the (first) file, for messages
  std::vector<std::string> paths_;  // files()
  uint32_t version_ = 0;
  std::map<std::string, GgufValue> metadata_;
  std::vector<GgufTensor> tensors_;
  std::unordered_map<std::string, size_t> by_name_;
  std::vector<std::shared_ptr<MappedFile>> files_;
};

// Writes one GGUF (version 3) file: metadata in the order added, then tensor infos and
// data in the order added, each tensor's data aligned to `alignment` (written as
// general.alignment when not 32). Data is moved in, or produced at write time by a fill
// callback (so a converter holds one tensor at a time).
class GgufWriter {
 public:
  using FillFn = std::function<void(uint8_t* dst, size_t nbytes)>;

  void SetInt(std::string key, GgufValueType type, int64_t value);  // any integer type
  void SetUint32(std::string key, uint32_t value) { SetInt(std::move(key), GgufValueType::kUint32, value); }
  void SetFloat32(std::string key, float value);
  void SetBool(std::string key, bool value);
  void SetString(std::string key, std::string value);
  void SetStringArray(std::string key, std::vector<std::string> values);
  void SetIntArray(std::string key, GgufValueType element_type, std::vector<int64_t> values);
  void SetFloat32Array(std::string key, std::vector<float> values);
  // A value as read (GgufModel::metadata()), for copying metadata from one file to another.
  void Set(std::string key, GgufValue value);

  // shape: outermost first ([rows, cols]), 1 to 4 dims; the last dim must be a whole
  // number of the type's blocks. `bytes` must be DTypeRowBytes(dtype, last dim) × the
  // other dims. F8_E4M3 (no ggml type) is refused by Write, as is a name over 63 bytes
  // (ggml's GGML_MAX_NAME).
  void AddTensor(std::string name, DType dtype, std::vector<int64_t> shape, std::vector<uint8_t> bytes);
  void AddTensor(std::string name, DType dtype, std::vector<int64_t> shape, FillFn fill);
  // A tensor of any ggml type id and any shape (0 to many dims) with its byte count
  // given; type, shape and byte count are written unchecked (tests of refusals).
  void AddRawTensor(std::string name, uint32_t ggml_type, std::vector<int64_t> shape, std::vector<uint8_t> bytes);

  void set_alignment(uint32_t alignment) { alignment_ = alignment; }

  // Validates (unique keys and names, byte counts, each value's type, integers in their
  // type's range, general.alignment if set equal to the alignment), writes `path`
  // through a temporary file renamed into place. Every tensor's data is padded to the
  // alignment, the last one's too, as ggml writes it.
  Status Write(const std::string& path) const;

 private:
  struct Entry {
    std::string name;
    std::optional<DType> dtype;  // nullopt: AddRawTensor's, of ggml_type and bytes.size()
    uint32_t ggml_type = 0;
    std::vector<int64_t> shape;
    std::vector<uint8_t> bytes;  // used when fill is empty
    FillFn fill;
  };
  std::vector<std::pair<std::string, GgufValue>> metadata_;
  std::vector<Entry> tensors_;
  uint32_t alignment_ = 32;
};

}  // namespace latte
