#include "base/gguf_file.h"

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <set>
#include <type_traits>
#include <unordered_set>

namespace latte {
namespace {

namespace fs = std::filesystem;

constexpr uint32_t kMagic = 0x46554747;  // "GGUF" read as a little-endian u32
constexpr uint32_t kDefaultAlignment = 32;
constexpr uint32_t kMaxDims = 4;        // ggml's GGML_MAX_DIMS
constexpr size_t kMaxWrittenName = 63;  // ggml's GGML_MAX_NAME (64) less the NUL
constexpr char kAlignmentKey[] = "general.alignment";
constexpr char kSplitCountKey[] = "split.count";
constexpr char kSplitNoKey[] = "split.no";
constexpr char kSplitTensorsKey[] = "split.tensors.count";
// The fewest bytes a metadata entry can take (u64 key length, u32 type, a 1-byte value)
// and a tensor info (u64 name length, u32 n_dims, one u64 dim, u32 type, u64 offset).
constexpr uint64_t kMinEntryBytes = 8 + 4 + 1;
constexpr uint64_t kMinTensorInfoBytes = 8 + 4 + 8 + 4 + 8;

// ---- ggml's tensor types ---------------------------------------------------------

// A ggml type's block: `block` elements stored in `bytes` bytes (ggml's type_traits
// blck_size and type_size; gguf-py's GGML_QUANT_SIZES).
struct GgmlTypeInfo {
  uint32_t id;
  const char* name;
  int64_t block;
  uint64_t bytes;
  std::optional<DType> dtype;
};

// Every id ggml.h defines. 4, 5 (Q4_2, Q4_3), 31-33 (Q4_0_4_4, ...) and 36-38
// (IQ4_NL_4_4, ...) were removed from ggml and from GGUF files, so they are unknown here.
constexpr GgmlTypeInfo kGgmlTypes[] = {
    {0, "F32", 1, 4, DType::kF32},
    {1, "F16", 1, 2, DType::kF16},
    {2, "Q4_0", 32, 18, DType::kQ4_0},
    {3, "Q4_1", 32, 20, std::nullopt},
    {6, "Q5_0", 32, 22, DType::kQ5_0},
    {7, "Q5_1", 32, 24, DType::kQ5_1},
    {8, "Q8_0", 32, 34, DType::kQ8_0},
    {9, "Q8_1", 32, 36, std::nullopt},
    {10, "Q2_K", 256, 84, DType::kQ2_K},
    {11, "Q3_K", 256, 110, DType::kQ3_K},
    {12, "Q4_K", 256, 144, DType::kQ4_K},
    {13, "Q5_K", 256, 176, DType::kQ5_K},
    {14, "Q6_K", 256, 210, DType::kQ6_K},
    {15, "Q8_K", 256, 292, std::nullopt},
    {16, "IQ2_XXS", 256, 66, DType::kIQ2_XXS},
    {17, "IQ2_XS", 256, 74, std::nullopt},
    {18, "IQ3_XXS", 256, 98, DType::kIQ3_XXS},
    {19, "IQ1_S", 256, 50, DType::kIQ1_S},
    {20, "IQ4_NL", 32, 18, DType::kIQ4_NL},
    {21, "IQ3_S", 256, 110, std::nullopt},
    {22, "IQ2_S", 256, 82, std::nullopt},
    {23, "IQ4_XS", 256, 136, DType::kIQ4_XS},
    {24, "I8", 1, 1, std::nullopt},
    {25, "I16", 1, 2, std::nullopt},
    {26, "I32", 1, 4, std::nullopt},
    {27, "I64", 1, 8, std::nullopt},
    {28, "F64", 1, 8, std::nullopt},
    {29, "IQ1_M", 256, 56, std::nullopt},
    {30, "BF16", 1, 2, DType::kBF16},
    {34, "TQ1_0", 256, 54, std::nullopt},
    {35, "TQ2_0", 256, 66, std::nullopt},
    {39, "MXFP4", 32, 17, std::nullopt},
    {40, "NVFP4", 64, 36, std::nullopt},
};

const GgmlTypeInfo* FindGgmlType(uint32_t id) {
  for (const GgmlTypeInfo& t : kGgmlTypes) {
    if (t.id == id) return &t;
  }
  return nullptr;
}

// ---- Messages --------------------------------------------------------------------

// A name from the file as messages print it: quoted, anything but printable ASCII as
// \xNN, and cut after 120 bytes, so a hostile name keeps the message one short line.
std::string Quote(std::string_view s) {
  constexpr size_t kMaxShown = 120;
  std::string out = "\"";
  for (size_t i = 0; i < s.size() && i < kMaxShown; ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20 || c >= 0x7f) {
      char hex[5];
      std::snprintf(hex, sizeof hex, "\\x%02x", c);
      out += hex;
    } else {
      out += static_cast<char>(c);
    }
  }
  out += '"';
  if (s.size() > kMaxShown) out += "... (" + std::to_string(s.size()) + " bytes)";
  return out;
}

std::string Range(uint64_t begin, uint64_t end) {
  std::string s = "[";
  s += std::to_string(begin);
  s += ", ";
  s += std::to_string(end);
  s += ")";
  return s;
}

std::string DimsString(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

// ---- Value types -----------------------------------------------------------------

bool IsValueType(uint32_t t) { return t <= static_cast<uint32_t>(GgufValueType::kFloat64); }

bool IsIntType(GgufValueType t) {
  switch (t) {
    case GgufValueType::kUint8:
    case GgufValueType::kInt8:
    case GgufValueType::kUint16:
    case GgufValueType::kInt16:
    case GgufValueType::kUint32:
    case GgufValueType::kInt32:
    case GgufValueType::kUint64:
    case GgufValueType::kInt64: return true;
    default: return false;
  }
}

bool IsFloatType(GgufValueType t) { return t == GgufValueType::kFloat32 || t == GgufValueType::kFloat64; }

// Bytes one value takes in the file; for a string the least (its u64 length).
uint64_t MinValueBytes(GgufValueType t) {
  switch (t) {
    case GgufValueType::kUint8:
    case GgufValueType::kInt8:
    case GgufValueType::kBool: return 1;
    case GgufValueType::kUint16:
    case GgufValueType::kInt16: return 2;
    case GgufValueType::kUint32:
    case GgufValueType::kInt32:
    case GgufValueType::kFloat32: return 4;
    case GgufValueType::kUint64:
    case GgufValueType::kInt64:
    case GgufValueType::kFloat64:
    case GgufValueType::kString: return 8;
    case GgufValueType::kArray: return 12;  // u32 type + u64 count
  }
  return 1;
}

// The values an integer type holds, as int64 (uint64 is held up to INT64_MAX).
std::pair<int64_t, int64_t> IntRange(GgufValueType t) {
  switch (t) {
    case GgufValueType::kUint8: return {0, 0xff};
    case GgufValueType::kInt8: return {-128, 127};
    case GgufValueType::kUint16: return {0, 0xffff};
    case GgufValueType::kInt16: return {-32768, 32767};
    case GgufValueType::kUint32: return {0, 0xffffffffll};
    case GgufValueType::kInt32: return {std::numeric_limits<int32_t>::min(), std::numeric_limits<int32_t>::max()};
    case GgufValueType::kUint64: return {0, std::numeric_limits<int64_t>::max()};
    default: return {std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max()};
  }
}

// "uint32", or "array of string".
std::string DescribeType(const GgufValue& v) {
  std::string s(GgufValueTypeName(v.type));
  if (v.type == GgufValueType::kArray) s += " of " + std::string(GgufValueTypeName(v.array_type));
  return s;
}

// ---- Reading ---------------------------------------------------------------------

// Reads little-endian fields front to back; every read is checked against the end.
class Cursor {
 public:
  Cursor(const uint8_t* data, size_t size) : data_(data), size_(size) {}

  size_t pos() const { return pos_; }
  size_t left() const { return size_ - pos_; }
  size_t size() const { return size_; }

  Status Take(size_t n, std::string_view what, const uint8_t** out) {
    if (n > left()) {
      return Status::DataLoss(std::string(what) + " at offset " + std::to_string(pos_) +
                              " runs past the end of the file (size " + std::to_string(size_) + ")");
    }
    *out = data_ + pos_;
    pos_ += n;
    return Status::Ok();
  }

  template <typename T> Status Read(std::string_view what, T* value) {
    const uint8_t* p = nullptr;
    LATTE_RETURN_IF_ERROR(Take(sizeof(T), what, &p));
    uint64_t bits = 0;
    for (size_t i = sizeof(T); i-- > 0;) bits = (bits << 8) | p[i];
    if constexpr (std::is_same_v<T, float>) {
      const auto u = static_cast<uint32_t>(bits);
      std::memcpy(value, &u, sizeof u);
    } else if constexpr (std::is_same_v<T, double>) {
      std::memcpy(value, &bits, sizeof bits);
    } else {
      *value = static_cast<T>(bits);
    }
    return Status::Ok();
  }

  // A GGUF string: u64 length, then the bytes, the length checked against what is left
  // before anything is allocated.
  Status ReadString(std::string_view what, std::string* out) {
    const size_t at = pos_;
    uint64_t length = 0;
    LATTE_RETURN_IF_ERROR(Read(std::string(what) + " length", &length));
    if (length > left()) {
      return Status::DataLoss(std::string(what) + " length " + std::to_string(length) + " at offset " +
                              std::to_string(at) + " is more than the " + std::to_string(left()) +
                              " bytes left in the file (size " + std::to_string(size_) + ")");
    }
    const uint8_t* p = nullptr;
    LATTE_RETURN_IF_ERROR(Take(static_cast<size_t>(length), what, &p));
    out->assign(reinterpret_cast<const char*>(p), static_cast<size_t>(length));
    return Status::Ok();
  }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
};

Status ReadInt(Cursor& c, GgufValueType type, int64_t* out) {
  switch (type) {
    case GgufValueType::kUint8: {
      uint8_t v = 0;
      LATTE_RETURN_IF_ERROR(c.Read("uint8 value", &v));
      *out = v;
      return Status::Ok();
    }
    case GgufValueType::kInt8: {
      uint8_t v = 0;
      LATTE_RETURN_IF_ERROR(c.Read("int8 value", &v));
      *out = static_cast<int8_t>(v);
      return Status::Ok();
    }
    case GgufValueType::kUint16: {
      uint16_t v = 0;
      LATTE_RETURN_IF_ERROR(c.Read("uint16 value", &v));
      *out = v;
      return Status::Ok();
    }
    case GgufValueType::kInt16: {
      uint16_t v = 0;
      LATTE_RETURN_IF_ERROR(c.Read("int16 value", &v));
      *out = static_cast<int16_t>(v);
      return Status::Ok();
    }
    case GgufValueType::kUint32: {
      uint32_t v = 0;
      LATTE_RETURN_IF_ERROR(c.Read("uint32 value", &v));
      *out = v;
      return Status::Ok();
    }
    case GgufValueType::kInt32: {
      uint32_t v = 0;
      LATTE_RETURN_IF_ERROR(c.Read("int32 value", &v));
      *out = static_cast<int32_t>(v);
      return Status::Ok();
    }
    case GgufValueType::kUint64: {
      const size_t at = c.pos();
      uint64_t v = 0;
      LATTE_RETURN_IF_ERROR(c.Read("uint64 value", &v));
      if (v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        return Status::Unimplemented("uint64 value " + std::to_string(v) + " at offset " + std::to_string(at) +
                                     " is above 2^63 - 1, the largest latte holds");
      }
      *out = static_cast<int64_t>(v);
      return Status::Ok();
    }
    case GgufValueType::kInt64: {
      uint64_t v = 0;
      LATTE_RETURN_IF_ERROR(c.Read("int64 value", &v));
      *out = static_cast<int64_t>(v);
      return Status::Ok();
    }
    default: return Status::Internal("ReadInt of a non-integer type");
  }
}

Status ReadFloat(Cursor& c, GgufValueType type, double* out) {
  if (type == GgufValueType::kFloat32) {
    float v = 0;
    LATTE_RETURN_IF_ERROR(c.Read("float32 value", &v));
    *out = v;
    return Status::Ok();
  }
  return c.Read("float64 value", out);
}

Status ReadBool(Cursor& c, bool* out) {
  const size_t at = c.pos();
  uint8_t v = 0;
  LATTE_RETURN_IF_ERROR(c.Read("bool value", &v));
  if (v > 1) {
    return Status::DataLoss("bool value at offset " + std::to_string(at) + " is " + std::to_string(v) +
                            ", neither 0 nor 1");
  }
  *out = v == 1;
  return Status::Ok();
}

// A value type as read from the file: one of GGUF's 13, or an error naming the number.
Status CheckValueType(uint32_t raw, size_t at, std::string_view what) {
  if (IsValueType(raw)) return Status::Ok();
  return Status::DataLoss(std::string(what) + " " + std::to_string(raw) + " at offset " + std::to_string(at) +
                          " is not a GGUF value type (0 to 12)");
}

Status ReadArray(Cursor& c, GgufValue* out) {
  size_t at = c.pos();
  uint32_t raw_type = 0;
  LATTE_RETURN_IF_ERROR(c.Read("array element type", &raw_type));
  LATTE_RETURN_IF_ERROR(CheckValueType(raw_type, at, "array element type"));
  const auto type = static_cast<GgufValueType>(raw_type);
  if (type == GgufValueType::kArray) {
    return Status::Unimplemented("array of arrays at offset " + std::to_string(at) + ": latte reads flat arrays only");
  }
  out->array_type = type;
  at = c.pos();
  uint64_t count = 0;
  LATTE_RETURN_IF_ERROR(c.Read("array count", &count));
  // Every element takes at least MinValueBytes, so the count is bounded by the bytes
  // left before anything is reserved.
  const uint64_t min_bytes = MinValueBytes(type);
  if (count > c.left() / min_bytes) {
    return Status::DataLoss("array of " + std::to_string(count) + " " + std::string(GgufValueTypeName(type)) +
                            " at offset " + std::to_string(at) + " needs at least " + std::to_string(min_bytes) +
                            " bytes each, more than the " + std::to_string(c.left()) +
                            " bytes left in the file (size " + std::to_string(c.size()) + ")");
  }
  const auto n = static_cast<size_t>(count);
  if (IsIntType(type)) {
    std::vector<int64_t> values(n);
    for (int64_t& v : values) LATTE_RETURN_IF_ERROR(ReadInt(c, type, &v));
    out->value = std::move(values);
  } else if (IsFloatType(type)) {
    std::vector<double> values(n);
    for (double& v : values) LATTE_RETURN_IF_ERROR(ReadFloat(c, type, &v));
    out->value = std::move(values);
  } else if (type == GgufValueType::kBool) {
    std::vector<bool> values(n);
    for (size_t i = 0; i < n; ++i) {
      bool b = false;
      LATTE_RETURN_IF_ERROR(ReadBool(c, &b));
      values[i] = b;
    }
    out->value = std::move(values);
  } else {
    std::vector<std::string> values(n);
    for (std::string& v : values) LATTE_RETURN_IF_ERROR(c.ReadString("string", &v));
    out->value = std::move(values);
  }
  return Status::Ok();
}

Status ReadValue(Cursor& c, GgufValueType type, GgufValue* out) {
  out->type = type;
  if (IsIntType(type)) {
    int64_t v = 0;
    LATTE_RETURN_IF_ERROR(ReadInt(c, type, &v));
    out->value = v;
  } else if (IsFloatType(type)) {
    double v = 0;
    LATTE_RETURN_IF_ERROR(ReadFloat(c, type, &v));
    out->value = v;
  } else if (type == GgufValueType::kBool) {
    bool v = false;
    LATTE_RETURN_IF_ERROR(ReadBool(c, &v));
    out->value = v;
  } else if (type == GgufValueType::kString) {
    std::string v;
    LATTE_RETURN_IF_ERROR(c.ReadString("string", &v));
    out->value = std::move(v);
  } else {
    LATTE_RETURN_IF_ERROR(ReadArray(c, out));
  }
  return Status::Ok();
}

// One tensor info as read, before the data section's start is known.
struct TensorInfoRecord {
  GgufTensor tensor;
  uint64_t offset = 0;  // from the data section's start
  uint64_t begin = 0;   // from the file's start, once known
};

// Validates the type and dims of `r` and sets nbytes; the message leaves naming the
// file and tensor to the caller.
Status CheckTensorShape(const std::vector<uint64_t>& ne, TensorInfoRecord* r) {
  const GgmlTypeInfo* type = FindGgmlType(r->tensor.ggml_type);
  if (type == nullptr) {
    return Status::DataLoss("ggml type " + std::to_string(r->tensor.ggml_type) + " is not one ggml defines");
  }
  r->tensor.dtype = type->dtype;
  std::vector<int64_t> dims;
  for (size_t i = 0; i < ne.size(); ++i) {
    if (ne[i] > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return Status::DataLoss("ne[" + std::to_string(i) + "] is " + std::to_string(static_cast<int64_t>(ne[i])) + " (" +
                              std::to_string(ne[i]) + " as unsigned), not a size");
    }
    dims.push_back(static_cast<int64_t>(ne[i]));
  }
  r->tensor.shape.assign(dims.rbegin(), dims.rend());
  // The element count must fit int64 (NumElements multiplies in order, so the non-zero
  // dims alone must: [2^62, 2, 0] holds 0 elements but overflows on the way).
  int64_t elements = 1;
  for (int64_t d : dims) {
    if (d != 0 && __builtin_mul_overflow(elements, d, &elements)) {
      return Status::DataLoss("shape " + DimsString(r->tensor.shape) + " has 2^63 or more elements");
    }
  }
  if (dims[0] % type->block != 0) {
    return Status::DataLoss("shape " + DimsString(r->tensor.shape) + " of " + type->name + ": the innermost dim " +
                            std::to_string(dims[0]) + " is not a whole number of " + std::to_string(type->block) +
                            "-element blocks");
  }
  uint64_t bytes = 0;
  if (__builtin_mul_overflow(static_cast<uint64_t>(dims[0] / type->block), type->bytes, &bytes)) {
    return Status::DataLoss("shape " + DimsString(r->tensor.shape) + " of " + type->name + " overflows a byte count");
  }
  for (size_t i = 1; i < dims.size(); ++i) {
    if (__builtin_mul_overflow(bytes, static_cast<uint64_t>(dims[i]), &bytes)) {
      return Status::DataLoss("shape " + DimsString(r->tensor.shape) + " of " + type->name + " overflows a byte count");
    }
  }
  if (bytes > std::numeric_limits<size_t>::max()) return Status::DataLoss("too many bytes for this machine");
  r->tensor.nbytes = static_cast<size_t>(bytes);
  return Status::Ok();
}

struct ParsedFile {
  uint32_t version = 0;
  std::map<std::string, GgufValue> metadata;
  std::vector<GgufTensor> tensors;  // in offset order
};

Status ReadHeader(const std::string& path, Cursor& c, uint32_t* version, uint64_t* tensor_count, uint64_t* kv_count) {
  if (c.size() < 4) {
    return Status::DataLoss(path + ": file is " + std::to_string(c.size()) + " bytes, too short for the GGUF magic");
  }
  uint32_t magic = 0;
  LATTE_RETURN_IF_ERROR(c.Read("magic", &magic));
  if (magic != kMagic) {
    std::string shown;
    for (int i = 0; i < 4; ++i) shown += static_cast<char>((magic >> (8 * i)) & 0xff);
    return Status::DataLoss(path + ": not a GGUF file: it starts with " + Quote(shown) + ", not \"GGUF\"");
  }
  Status s = c.Read("version", version);
  if (s.ok()) {
    if (*version == 1) {
      return Status::Unimplemented(path + ": GGUF version 1 (32-bit counts) is not supported; latte reads 2 and 3");
    }
    if (*version != 2 && *version != 3) {
      // A big-endian file's version reads byte-swapped here: 3 as 0x03000000.
      if (*version != 0 && (*version & 0xffff) == 0) {
        return Status::Unimplemented(path + ": GGUF version " + std::to_string(*version) +
                                     " looks like a big-endian file; latte reads little-endian GGUF only");
      }
      return Status::Unimplemented(path + ": GGUF version " + std::to_string(*version) +
                                   " is not supported; latte reads 2 and 3");
    }
  }
  if (s.ok()) s = c.Read("tensor count", tensor_count);
  if (s.ok()) s = c.Read("metadata count", kv_count);
  if (!s.ok()) return s.WithContext(path + ": header");
  if (*kv_count > c.left() / kMinEntryBytes) {
    return Status::DataLoss(path + ": header claims " + std::to_string(*kv_count) + " metadata entries, but the " +
                            std::to_string(c.left()) + " bytes after the header hold at most " +
                            std::to_string(c.left() / kMinEntryBytes));
  }
  if (*tensor_count > c.left() / kMinTensorInfoBytes) {
    return Status::DataLoss(path + ": header claims " + std::to_string(*tensor_count) + " tensors, but the " +
                            std::to_string(c.left()) + " bytes after the header hold at most " +
                            std::to_string(c.left() / kMinTensorInfoBytes) + " tensor infos");
  }
  return Status::Ok();
}

Status ReadMetadata(const std::string& path, Cursor& c, uint64_t kv_count, std::map<std::string, GgufValue>* out) {
  for (uint64_t i = 0; i < kv_count; ++i) {
    std::string key;
    Status s = c.ReadString("key", &key);
    if (!s.ok()) {
      return s.WithContext(path + ": metadata entry " + std::to_string(i) + " of " + std::to_string(kv_count));
    }
    const std::string context = path + ": metadata key " + Quote(key);
    const size_t at = c.pos();
    uint32_t raw_type = 0;
    s = c.Read("value type", &raw_type);
    if (s.ok()) s = CheckValueType(raw_type, at, "value type");
    GgufValue value;
    if (s.ok()) s = ReadValue(c, static_cast<GgufValueType>(raw_type), &value);
    if (!s.ok()) return s.WithContext(context);
    if (!out->emplace(std::move(key), std::move(value)).second) return Status::DataLoss(context + " appears twice");
  }
  return Status::Ok();
}

Result<uint32_t> ReadAlignment(const std::string& path, const std::map<std::string, GgufValue>& metadata) {
  auto it = metadata.find(kAlignmentKey);
  if (it == metadata.end()) return kDefaultAlignment;
  const std::string context = path + ": metadata key \"" + kAlignmentKey + "\"";
  const GgufValue& v = it->second;
  // uint32, as the GGUF spec, ggml and gguf-py have it.
  if (v.type != GgufValueType::kUint32) return Status::DataLoss(context + " holds " + DescribeType(v) + ", not uint32");
  const int64_t a = std::get<int64_t>(v.value);
  if (a == 0 || (a & (a - 1)) != 0) {
    return Status::DataLoss(context + " is " + std::to_string(a) + ", not a power of two");
  }
  return static_cast<uint32_t>(a);
}

Status ReadTensorInfos(const std::string& path, Cursor& c, uint64_t tensor_count, std::vector<TensorInfoRecord>* out) {
  std::unordered_set<std::string> names;
  out->reserve(static_cast<size_t>(tensor_count));
  for (uint64_t i = 0; i < tensor_count; ++i) {
    TensorInfoRecord r;
    r.tensor.file = path;
    Status s = c.ReadString("tensor name", &r.tensor.name);
    if (!s.ok()) {
      return s.WithContext(path + ": tensor info " + std::to_string(i) + " of " + std::to_string(tensor_count));
    }
    const std::string context = path + ": tensor " + Quote(r.tensor.name);
    const size_t at = c.pos();
    uint32_t n_dims = 0;
    s = c.Read("n_dims", &n_dims);
    if (s.ok() && (n_dims == 0 || n_dims > kMaxDims)) {
      s = Status::DataLoss("n_dims at offset " + std::to_string(at) + " is " + std::to_string(n_dims) +
                           "; GGUF tensors have 1 to 4");
    }
    std::vector<uint64_t> ne(s.ok() ? n_dims : 0);
    for (size_t d = 0; s.ok() && d < ne.size(); ++d) s = c.Read("ne[" + std::to_string(d) + "]", &ne[d]);
    if (s.ok()) s = c.Read("ggml type", &r.tensor.ggml_type);
    if (s.ok()) s = c.Read("offset", &r.offset);
    if (s.ok()) s = CheckTensorShape(ne, &r);
    if (!s.ok()) return s.WithContext(context);
    if (!names.insert(r.tensor.name).second) return Status::DataLoss(context + " appears twice");
    out->push_back(std::move(r));
  }
  return Status::Ok();
}

// Places every tensor in the data section at `data_start`, checks each lies inside the
// file and that no two share bytes, and returns them in offset order.
Result<std::vector<GgufTensor>> PlaceTensors(const std::string& path, const uint8_t* data, size_t size,
                                             uint64_t data_start, uint32_t alignment,
                                             std::vector<TensorInfoRecord> records) {
  for (TensorInfoRecord& r : records) {
    const std::string context = path + ": tensor " + Quote(r.tensor.name);
    if (r.offset % alignment != 0) {
      return Status::DataLoss(context + ": offset " + std::to_string(r.offset) +
                              " is not a multiple of the alignment " + std::to_string(alignment));
    }
    if (r.offset > size - data_start) {
      return Status::DataLoss(context + ": offset " + std::to_string(r.offset) + " from the data section's start (" +
                              std::to_string(data_start) + ") lies past the end of the file (size " +
                              std::to_string(size) + ")");
    }
    r.begin = data_start + r.offset;
    if (r.tensor.nbytes > size - r.begin) {
      const uint64_t end = r.begin + static_cast<uint64_t>(r.tensor.nbytes);
      const bool wraps = end < r.begin;  // a hostile byte count near 2^64
      return Status::DataLoss(context + " data " +
                              (wraps ? "of " + std::to_string(r.tensor.nbytes) + " bytes at " + std::to_string(r.begin)
                                     : Range(r.begin, end)) +
                              " runs past the end of the file (size " + std::to_string(size) + ")");
    }
    r.tensor.data = data + r.begin;
  }
  std::sort(records.begin(), records.end(), [](const TensorInfoRecord& a, const TensorInfoRecord& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.tensor.nbytes < b.tensor.nbytes;
  });
  const TensorInfoRecord* furthest = nullptr;  // the one reaching furthest so far
  for (const TensorInfoRecord& r : records) {
    if (r.tensor.nbytes == 0) continue;
    if (furthest != nullptr && r.begin < furthest->begin + furthest->tensor.nbytes) {
      return Status::DataLoss(path + ": tensors " + Quote(furthest->tensor.name) + " " +
                              Range(furthest->begin, furthest->begin + furthest->tensor.nbytes) + " and " +
                              Quote(r.tensor.name) + " " + Range(r.begin, r.begin + r.tensor.nbytes) + " share bytes");
    }
    if (furthest == nullptr || r.begin + r.tensor.nbytes > furthest->begin + furthest->tensor.nbytes) furthest = &r;
  }
  std::vector<GgufTensor> tensors;
  tensors.reserve(records.size());
  for (TensorInfoRecord& r : records) tensors.push_back(std::move(r.tensor));
  return tensors;
}

Result<ParsedFile> ParseFile(const std::string& path, const uint8_t* data, size_t size) {
  Cursor c(data, size);
  ParsedFile file;
  uint64_t tensor_count = 0;
  uint64_t kv_count = 0;
  LATTE_RETURN_IF_ERROR(ReadHeader(path, c, &file.version, &tensor_count, &kv_count));
  LATTE_RETURN_IF_ERROR(ReadMetadata(path, c, kv_count, &file.metadata));
  LATTE_ASSIGN_OR_RETURN(const uint32_t alignment, ReadAlignment(path, file.metadata));
  std::vector<TensorInfoRecord> records;
  LATTE_RETURN_IF_ERROR(ReadTensorInfos(path, c, tensor_count, &records));
  // The data section starts at the header's end rounded up to the alignment; a file
  // without tensors may end before that padding.
  const uint64_t header_end = c.pos();
  uint64_t data_start = 0;
  const bool wraps = __builtin_add_overflow(header_end, alignment - 1, &data_start);
  data_start = data_start / alignment * alignment;
  if (!records.empty() && (wraps || data_start > size)) {
    return Status::DataLoss(path + ": the data section starts at " + std::to_string(data_start) +
                            " (the header's end, " + std::to_string(header_end) + ", padded to the alignment " +
                            std::to_string(alignment) + "), past the end of the file (size " + std::to_string(size) +
                            ")");
  }
  LATTE_ASSIGN_OR_RETURN(file.tensors, PlaceTensors(path, data, size, data_start, alignment, std::move(records)));
  return file;
}

// ---- Split sets ------------------------------------------------------------------

// "DIR/NAME-00002-of-00005.gguf" as {DIR/NAME, 2, 5}, as llama.cpp's gguf-split names
// its files ("%s-%05d-of-%05d.gguf").
struct SplitName {
  std::string prefix;
  int no = 0;
  int count = 0;
};

std::optional<SplitName> ParseSplitName(const std::string& path) {
  constexpr std::string_view kTail = "-00000-of-00000.gguf";
  const std::string name = fs::path(path).filename().string();
  if (name.size() <= kTail.size()) return std::nullopt;
  const std::string_view tail = std::string_view(name).substr(name.size() - kTail.size());
  int no = 0;
  int count = 0;
  for (size_t i = 0; i < kTail.size(); ++i) {
    const char want = kTail[i];
    const char got = tail[i];
    if (want == '0') {
      if (got < '0' || got > '9') return std::nullopt;
      int& field = i < 6 ? no : count;
      field = field * 10 + (got - '0');
    } else if (want != got) {
      return std::nullopt;
    }
  }
  if (no < 1 || count < 1 || no > count) return std::nullopt;
  return SplitName{path.substr(0, path.size() - kTail.size()), no, count};
}

std::string SplitPath(const std::string& prefix, int no, int count) {
  char tail[32];
  std::snprintf(tail, sizeof tail, "-%05d-of-%05d.gguf", no, count);
  return prefix + tail;
}

// An integer split.* key of `metadata`, or nullopt when absent.
Result<std::optional<int64_t>> SplitKey(const std::string& path, const std::map<std::string, GgufValue>& metadata,
                                        const char* key) {
  auto it = metadata.find(key);
  if (it == metadata.end()) return std::optional<int64_t>();
  if (!IsIntType(it->second.type)) {
    return Status::DataLoss(path + ": metadata key " + Quote(key) + " holds " + DescribeType(it->second) +
                            ", not an integer");
  }
  return std::optional<int64_t>(std::get<int64_t>(it->second.value));
}

// ---- Writing ---------------------------------------------------------------------

// An output file written under a temporary name and renamed into place by Commit();
// destroyed uncommitted, it removes the temporary.
class AtomicFile {
 public:
  explicit AtomicFile(std::string path) : path_(std::move(path)), tmp_path_(path_ + ".tmp") {}
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;
  ~AtomicFile() {
    if (file_ != nullptr) std::fclose(file_);
    if (!committed_) std::remove(tmp_path_.c_str());
  }

  Status Open() {
    file_ = std::fopen(tmp_path_.c_str(), "wb");
    if (file_ == nullptr) return Status::Internal(tmp_path_ + ": cannot create: " + std::strerror(errno));
    return Status::Ok();
  }
  Status Write(const void* data, size_t n) {
    if (n > 0 && std::fwrite(data, 1, n, file_) != n) {
      return Status::Internal(tmp_path_ + ": write failed: " + std::strerror(errno));
    }
    return Status::Ok();
  }
  Status Commit() {
    const int rc = std::fclose(file_);
    file_ = nullptr;
    if (rc != 0) return Status::Internal(tmp_path_ + ": write failed: " + std::strerror(errno));
    if (std::rename(tmp_path_.c_str(), path_.c_str()) != 0) {
      return Status::Internal(path_ + ": cannot rename into place: " + std::strerror(errno));
    }
    committed_ = true;
    return Status::Ok();
  }

 private:
  std::string path_;
  std::string tmp_path_;
  std::FILE* file_ = nullptr;
  bool committed_ = false;
};

void PutBytes(std::vector<uint8_t>* out, uint64_t v, int n) {
  for (int i = 0; i < n; ++i) out->push_back(static_cast<uint8_t>(v >> (8 * i)));
}

void PutString(std::vector<uint8_t>* out, const std::string& s) {
  PutBytes(out, s.size(), 8);
  out->insert(out->end(), s.begin(), s.end());
}

void PutScalarInt(std::vector<uint8_t>* out, GgufValueType type, int64_t v) {
  PutBytes(out, static_cast<uint64_t>(v), static_cast<int>(MinValueBytes(type)));
}

void PutScalarFloat(std::vector<uint8_t>* out, GgufValueType type, double v) {
  if (type == GgufValueType::kFloat32) {
    const auto f = static_cast<float>(v);
    uint32_t bits = 0;
    std::memcpy(&bits, &f, sizeof bits);
    PutBytes(out, bits, 4);
  } else {
    uint64_t bits = 0;
    std::memcpy(&bits, &v, sizeof bits);
    PutBytes(out, bits, 8);
  }
}

Status CheckIntRange(GgufValueType type, int64_t v) {
  const auto [lo, hi] = IntRange(type);
  if (v < lo || v > hi) {
    return Status::InvalidArgument(std::to_string(v) + " does not fit " + std::string(GgufValueTypeName(type)));
  }
  return Status::Ok();
}

// Appends `v`'s type and value; InvalidArgument when its variant does not hold what
// its type says, or an integer does not fit its type.
Status EncodeValue(const GgufValue& v, std::vector<uint8_t>* out) {
  const uint32_t raw = static_cast<uint32_t>(v.type);
  if (!IsValueType(raw)) return Status::InvalidArgument("type " + std::to_string(raw) + " is not a GGUF value type");
  PutBytes(out, raw, 4);
  const std::string mismatch = "value does not hold what its type " + DescribeType(v) + " says";
  if (IsIntType(v.type)) {
    const int64_t* x = std::get_if<int64_t>(&v.value);
    if (x == nullptr) return Status::InvalidArgument(mismatch);
    LATTE_RETURN_IF_ERROR(CheckIntRange(v.type, *x));
    PutScalarInt(out, v.type, *x);
  } else if (IsFloatType(v.type)) {
    const double* x = std::get_if<double>(&v.value);
    if (x == nullptr) return Status::InvalidArgument(mismatch);
    PutScalarFloat(out, v.type, *x);
  } else if (v.type == GgufValueType::kBool) {
    const bool* x = std::get_if<bool>(&v.value);
    if (x == nullptr) return Status::InvalidArgument(mismatch);
    out->push_back(*x ? 1 : 0);
  } else if (v.type == GgufValueType::kString) {
    const std::string* x = std::get_if<std::string>(&v.value);
    if (x == nullptr) return Status::InvalidArgument(mismatch);
    PutString(out, *x);
  } else {
    const GgufValueType t = v.array_type;
    if (!IsValueType(static_cast<uint32_t>(t)) || t == GgufValueType::kArray) {
      return Status::InvalidArgument("array element type " + std::to_string(static_cast<uint32_t>(t)) +
                                     " is not a GGUF scalar or string type");
    }
    PutBytes(out, static_cast<uint32_t>(t), 4);
    if (IsIntType(t)) {
      const auto* xs = std::get_if<std::vector<int64_t>>(&v.value);
      if (xs == nullptr) return Status::InvalidArgument(mismatch);
      PutBytes(out, xs->size(), 8);
      for (int64_t x : *xs) {
        LATTE_RETURN_IF_ERROR(CheckIntRange(t, x));
        PutScalarInt(out, t, x);
      }
    } else if (IsFloatType(t)) {
      const auto* xs = std::get_if<std::vector<double>>(&v.value);
      if (xs == nullptr) return Status::InvalidArgument(mismatch);
      PutBytes(out, xs->size(), 8);
      for (double x : *xs) PutScalarFloat(out, t, x);
    } else if (t == GgufValueType::kBool) {
      const auto* xs = std::get_if<std::vector<bool>>(&v.value);
      if (xs == nullptr) return Status::InvalidArgument(mismatch);
      PutBytes(out, xs->size(), 8);
      for (bool x : *xs) out->push_back(x ? 1 : 0);
    } else {
      const auto* xs = std::get_if<std::vector<std::string>>(&v.value);
      if (xs == nullptr) return Status::InvalidArgument(mismatch);
      PutBytes(out, xs->size(), 8);
      for (const std::string& x : *xs) PutString(out, x);
    }
  }
  return Status::Ok();
}

uint64_t AlignUp(uint64_t n, uint64_t alignment) { return (n + alignment - 1) / alignment * alignment; }

}  // namespace

// ---- Public: types ---------------------------------------------------------------

std::string_view GgufValueTypeName(GgufValueType type) {
  switch (type) {
    case GgufValueType::kUint8: return "uint8";
    case GgufValueType::kInt8: return "int8";
    case GgufValueType::kUint16: return "uint16";
    case GgufValueType::kInt16: return "int16";
    case GgufValueType::kUint32: return "uint32";
    case GgufValueType::kInt32: return "int32";
    case GgufValueType::kFloat32: return "float32";
    case GgufValueType::kBool: return "bool";
    case GgufValueType::kString: return "string";
    case GgufValueType::kArray: return "array";
    case GgufValueType::kUint64: return "uint64";
    case GgufValueType::kInt64: return "int64";
    case GgufValueType::kFloat64: return "float64";
  }
  return "unknown";
}

std::optional<DType> DTypeFromGgmlType(uint32_t ggml_type) {
  const GgmlTypeInfo* t = FindGgmlType(ggml_type);
  return t == nullptr ? std::nullopt : t->dtype;
}

std::optional<uint32_t> GgmlTypeFromDType(DType dtype) {
  for (const GgmlTypeInfo& t : kGgmlTypes) {
    if (t.dtype == dtype) return t.id;
  }
  return std::nullopt;
}

std::string GgmlTypeName(uint32_t ggml_type) {
  const GgmlTypeInfo* t = FindGgmlType(ggml_type);
  return t == nullptr ? "type " + std::to_string(ggml_type) : t->name;
}

bool GgmlTypeBlock(uint32_t ggml_type, int64_t* block_elements, size_t* block_bytes) {
  const GgmlTypeInfo* t = FindGgmlType(ggml_type);
  if (t == nullptr) return false;
  *block_elements = t->block;
  *block_bytes = static_cast<size_t>(t->bytes);
  return true;
}

int64_t GgufTensor::NumElements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;  // validated at read: every partial product fits
  return n;
}

// ---- Public: reading -------------------------------------------------------------

Result<GgufModel> GgufModel::Parse(const std::string& path, const uint8_t* data, size_t size) {
  LATTE_ASSIGN_OR_RETURN(ParsedFile file, ParseFile(path, data, size));
  GgufModel model;
  model.version_ = file.version;
  model.path_ = path;
  model.paths_ = {path};
  model.metadata_ = std::move(file.metadata);
  model.tensors_ = std::move(file.tensors);
  for (size_t i = 0; i < model.tensors_.size(); ++i) model.by_name_.emplace(model.tensors_[i].name, i);
  return model;
}

Result<GgufModel> GgufModel::Open(const std::string& path, FileResidency residency,
                                  const std::function<void(uint64_t)>& on_read) {
  const std::optional<SplitName> split_name = ParseSplitName(path);
  if (split_name && split_name->no != 1) {
    return Status::InvalidArgument(path + ": is split " + std::to_string(split_name->no) + " of " +
                                   std::to_string(split_name->count) + "; pass the first, " +
                                   SplitPath(split_name->prefix, 1, split_name->count));
  }

  GgufModel model;
  model.path_ = path;
  uint64_t read_before = 0;  // bytes of the files already read
  // Maps and parses one file of the set into `model`.
  auto add_file = [&](const std::string& file_path) -> Result<ParsedFile> {
    std::function<void(size_t)> on_file_read;
    if (on_read) on_file_read = [&](size_t done) { on_read(read_before + done); };
    LATTE_ASSIGN_OR_RETURN(std::shared_ptr<MappedFile> mapped, MappedFile::Open(file_path, residency, on_file_read));
    read_before += mapped->size();
    LATTE_ASSIGN_OR_RETURN(ParsedFile file, ParseFile(file_path, mapped->data(), mapped->size()));
    for (GgufTensor& t : file.tensors) {
      if (const GgufTensor* other = model.FindTensor(t.name)) {
        return Status::DataLoss(file_path + ": tensor " + Quote(t.name) + " is also in " + other->file);
      }
      model.by_name_.emplace(t.name, model.tensors_.size());
      model.tensors_.push_back(std::move(t));
    }
    model.files_.push_back(std::move(mapped));
    model.paths_.push_back(file_path);
    return file;
  };

  LATTE_ASSIGN_OR_RETURN(ParsedFile first, add_file(path));
  model.version_ = first.version;
  LATTE_ASSIGN_OR_RETURN(const std::optional<int64_t> count, SplitKey(path, first.metadata, kSplitCountKey));
  LATTE_ASSIGN_OR_RETURN(const std::optional<int64_t> no, SplitKey(path, first.metadata, kSplitNoKey));
  LATTE_ASSIGN_OR_RETURN(const std::optional<int64_t> tensors_count, SplitKey(path, first.metadata, kSplitTensorsKey));
  model.metadata_ = std::move(first.metadata);

  const int64_t n = count.value_or(1);
  if (n < 1 || n > 99999) {
    return Status::DataLoss(path + ": split.count is " + std::to_string(n) + ", not 1 to 99999");
  }
  if (no && (*no < 0 || *no >= n)) {
    return Status::DataLoss(path + ": split.no is " + std::to_string(*no) + ", not 0 to " + std::to_string(n - 1) +
                            " (split.count " + std::to_string(n) + ")");
  }
  if (no.value_or(0) != 0) {
    return Status::InvalidArgument(path + ": is split " + std::to_string(*no + 1) + " of " + std::to_string(n) +
                                   " (split.no " + std::to_string(*no) + "); pass the first");
  }
  if (split_name && split_name->count != n) {
    return Status::DataLoss(path + ": named split 1 of " + std::to_string(split_name->count) +
                            " but its split.count is " + (count ? std::to_string(*count) : std::string("absent")));
  }
  if (n > 1 && !split_name) {
    return Status::DataLoss(path + ": split.count is " + std::to_string(n) + " but the name does not end in " +
                            SplitPath("", 1, static_cast<int>(n)) + ", so the other splits cannot be found");
  }
  if (n > 1) {
    if (!no) return Status::DataLoss(path + ": split.count is " + std::to_string(n) + " but split.no is absent");
    if (!tensors_count) {
      return Status::DataLoss(path + ": split.count is " + std::to_string(n) + " but split.tensors.count is absent");
    }
    for (int i = 2; i <= n; ++i) {
      const std::string split_path = SplitPath(split_name->prefix, i, static_cast<int>(n));
      std::error_code ec;
      if (!fs::exists(split_path, ec)) {
        return Status::NotFound(path + ": split " + std::to_string(i) + " of " + std::to_string(n) + ", " + split_path +
                                ", does not exist");
      }
      LATTE_ASSIGN_OR_RETURN(const ParsedFile file, add_file(split_path));
      LATTE_ASSIGN_OR_RETURN(const std::optional<int64_t> file_count,
                             SplitKey(split_path, file.metadata, kSplitCountKey));
      LATTE_ASSIGN_OR_RETURN(const std::optional<int64_t> file_no, SplitKey(split_path, file.metadata, kSplitNoKey));
      if (file_count != n) {
        return Status::DataLoss(split_path + ": split.count is " +
                                (file_count ? std::to_string(*file_count) : std::string("absent")) + ", but " + path +
                                " says " + std::to_string(n));
      }
      if (file_no != i - 1) {
        return Status::DataLoss(split_path + ": split.no is " +
                                (file_no ? std::to_string(*file_no) : std::string("absent")) + ", expected " +
                                std::to_string(i - 1) + " for split " + std::to_string(i) + " of " + std::to_string(n));
      }
    }
  }
  if (tensors_count && static_cast<uint64_t>(*tensors_count) != model.tensors_.size()) {
    return Status::DataLoss(path + ": split.tensors.count is " + std::to_string(*tensors_count) + " but the " +
                            std::to_string(model.paths_.size()) + " file(s) hold " +
                            std::to_string(model.tensors_.size()) + " tensors");
  }
  return model;
}

const GgufValue* GgufModel::Find(std::string_view key) const {
  auto it = metadata_.find(std::string(key));
  return it == metadata_.end() ? nullptr : &it->second;
}

Result<const GgufValue*> GgufModel::FindOrError(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) return Status::NotFound(path_ + ": no metadata key " + Quote(key));
  return v;
}

Status GgufModel::WrongType(std::string_view key, const GgufValue& v, std::string_view wanted) const {
  return Status::DataLoss(path_ + ": metadata key " + Quote(key) + " holds " + DescribeType(v) + ", wanted " +
                          std::string(wanted));
}

Result<int64_t> GgufModel::GetInt(std::string_view key) const {
  LATTE_ASSIGN_OR_RETURN(const GgufValue* v, FindOrError(key));
  if (!IsIntType(v->type)) return WrongType(key, *v, "an integer");
  return std::get<int64_t>(v->value);
}

Result<double> GgufModel::GetFloat(std::string_view key) const {
  LATTE_ASSIGN_OR_RETURN(const GgufValue* v, FindOrError(key));
  if (IsFloatType(v->type)) return std::get<double>(v->value);
  if (IsIntType(v->type)) return static_cast<double>(std::get<int64_t>(v->value));
  return WrongType(key, *v, "a number");
}

Result<bool> GgufModel::GetBool(std::string_view key) const {
  LATTE_ASSIGN_OR_RETURN(const GgufValue* v, FindOrError(key));
  if (v->type != GgufValueType::kBool) return WrongType(key, *v, "a bool");
  return std::get<bool>(v->value);
}

Result<std::string> GgufModel::GetString(std::string_view key) const {
  LATTE_ASSIGN_OR_RETURN(const GgufValue* v, FindOrError(key));
  if (v->type != GgufValueType::kString) return WrongType(key, *v, "a string");
  return std::get<std::string>(v->value);
}

Result<std::vector<std::string>> GgufModel::GetStringArray(std::string_view key) const {
  LATTE_ASSIGN_OR_RETURN(const GgufValue* v, FindOrError(key));
  if (v->type != GgufValueType::kArray || v->array_type != GgufValueType::kString) {
    return WrongType(key, *v, "an array of string");
  }
  return std::get<std::vector<std::string>>(v->value);
}

Result<std::vector<int64_t>> GgufModel::GetIntArray(std::string_view key) const {
  LATTE_ASSIGN_OR_RETURN(const GgufValue* v, FindOrError(key));
  if (v->type != GgufValueType::kArray || !IsIntType(v->array_type)) {
    return WrongType(key, *v, "an array of integers");
  }
  return std::get<std::vector<int64_t>>(v->value);
}

Result<std::vector<double>> GgufModel::GetFloatArray(std::string_view key) const {
  LATTE_ASSIGN_OR_RETURN(const GgufValue* v, FindOrError(key));
  if (v->type == GgufValueType::kArray && IsFloatType(v->array_type)) return std::get<std::vector<double>>(v->value);
  if (v->type == GgufValueType::kArray && IsIntType(v->array_type)) {
    const auto& ints = std::get<std::vector<int64_t>>(v->value);
    return std::vector<double>(ints.begin(), ints.end());
  }
  return WrongType(key, *v, "an array of numbers");
}

const GgufTensor* GgufModel::FindTensor(std::string_view name) const {
  auto it = by_name_.find(std::string(name));
  return it == by_name_.end() ? nullptr : &tensors_[it->second];
}

size_t GgufModel::TensorBytes() const {
  size_t total = 0;
  for (const GgufTensor& t : tensors_) total += t.nbytes;
  return total;
}

std::vector<std::string> GgufModel::files() const { return paths_; }

// ---- Public: writing -------------------------------------------------------------

void GgufWriter::SetInt(std::string key, GgufValueType type, int64_t value) {
  GgufValue v;
  v.type = type;
  v.value = value;
  Set(std::move(key), std::move(v));
}

void GgufWriter::SetFloat32(std::string key, float value) {
  GgufValue v;
  v.type = GgufValueType::kFloat32;
  v.value = static_cast<double>(value);
  Set(std::move(key), std::move(v));
}

void GgufWriter::SetBool(std::string key, bool value) {
  GgufValue v;
  v.type = GgufValueType::kBool;
  v.value = value;
  Set(std::move(key), std::move(v));
}

void GgufWriter::SetString(std::string key, std::string value) {
  GgufValue v;
  v.type = GgufValueType::kString;
  v.value = std::move(value);
  Set(std::move(key), std::move(v));
}

void GgufWriter::SetStringArray(std::string key, std::vector<std::string> values) {
  GgufValue v;
  v.type = GgufValueType::kArray;
  v.array_type = GgufValueType::kString;
  v.value = std::move(values);
  Set(std::move(key), std::move(v));
}

void GgufWriter::SetIntArray(std::string key, GgufValueType element_type, std::vector<int64_t> values) {
  GgufValue v;
  v.type = GgufValueType::kArray;
  v.array_type = element_type;
  v.value = std::move(values);
  Set(std::move(key), std::move(v));
}

void GgufWriter::SetFloat32Array(std::string key, std::vector<float> values) {
  GgufValue v;
  v.type = GgufValueType::kArray;
  v.array_type = GgufValueType::kFloat32;
  v.value = std::vector<double>(values.begin(), values.end());
  Set(std::move(key), std::move(v));
}

void GgufWriter::Set(std::string key, GgufValue value) { metadata_.emplace_back(std::move(key), std::move(value)); }

void GgufWriter::AddTensor(std::string name, DType dtype, std::vector<int64_t> shape, std::vector<uint8_t> bytes) {
  tensors_.push_back({std::move(name), dtype, 0, std::move(shape), std::move(bytes), nullptr});
}

void GgufWriter::AddTensor(std::string name, DType dtype, std::vector<int64_t> shape, FillFn fill) {
  tensors_.push_back({std::move(name), dtype, 0, std::move(shape), {}, std::move(fill)});
}

void GgufWriter::AddRawTensor(std::string name, uint32_t ggml_type, std::vector<int64_t> shape,
                              std::vector<uint8_t> bytes) {
  tensors_.push_back({std::move(name), std::nullopt, ggml_type, std::move(shape), std::move(bytes), nullptr});
}

Status GgufWriter::Write(const std::string& path) const {
  if (alignment_ == 0 || (alignment_ & (alignment_ - 1)) != 0) {
    return Status::InvalidArgument(path + ": alignment " + std::to_string(alignment_) + " is not a power of two");
  }
  // Metadata, validated as it is encoded.
  std::vector<uint8_t> kv;
  std::set<std::string> keys;
  for (const auto& [key, value] : metadata_) {
    const std::string context = path + ": metadata key " + Quote(key);
    if (!keys.insert(key).second) return Status::InvalidArgument(context + ": set twice");
    if (key == kAlignmentKey &&
        (value.type != GgufValueType::kUint32 || std::get_if<int64_t>(&value.value) == nullptr ||
         std::get<int64_t>(value.value) != alignment_)) {
      return Status::InvalidArgument(context + ": must be the uint32 " + std::to_string(alignment_) +
                                     " the writer aligns to (set_alignment)");
    }
    PutString(&kv, key);
    Status s = EncodeValue(value, &kv);
    if (!s.ok()) return s.WithContext(context);
  }
  uint64_t kv_count = metadata_.size();
  if (alignment_ != kDefaultAlignment && keys.count(kAlignmentKey) == 0) {
    PutString(&kv, kAlignmentKey);
    PutBytes(&kv, static_cast<uint32_t>(GgufValueType::kUint32), 4);
    PutBytes(&kv, alignment_, 4);
    ++kv_count;
  }

  // Tensor infos, each tensor's place in the data section.
  std::vector<uint8_t> infos;
  std::vector<uint64_t> sizes;
  std::set<std::string> names;
  uint64_t offset = 0;
  for (const Entry& e : tensors_) {
    const std::string context = path + ": tensor " + Quote(e.name);
    if (!names.insert(e.name).second) return Status::InvalidArgument(context + ": added twice");
    if (e.name.size() > kMaxWrittenName) {
      return Status::InvalidArgument(context + ": name is " + std::to_string(e.name.size()) +
                                     " bytes; ggml reads at most " + std::to_string(kMaxWrittenName));
    }
    uint32_t ggml_type = e.ggml_type;
    uint64_t nbytes = e.bytes.size();
    if (e.dtype) {
      const std::optional<uint32_t> type = GgmlTypeFromDType(*e.dtype);
      if (!type) {
        return Status::InvalidArgument(context + ": ggml has no type for " + std::string(DTypeName(*e.dtype)));
      }
      ggml_type = *type;
      if (e.shape.empty() || e.shape.size() > kMaxDims) {
        return Status::InvalidArgument(context + ": shape " + DimsString(e.shape) + " has " +
                                       std::to_string(e.shape.size()) + " dims; GGUF tensors have 1 to 4");
      }
      const int64_t block = DTypeBlockElements(*e.dtype);
      bool ok = e.shape.back() >= 0 && e.shape.back() % block == 0;
      uint64_t bytes = 0;
      ok = ok && !__builtin_mul_overflow(static_cast<uint64_t>(e.shape.back() / block),
                                         static_cast<uint64_t>(DTypeBlockBytes(*e.dtype)), &bytes);
      for (size_t i = 0; ok && i + 1 < e.shape.size(); ++i) {
        ok = e.shape[i] >= 0 && !__builtin_mul_overflow(bytes, static_cast<uint64_t>(e.shape[i]), &bytes);
      }
      if (!ok) {
        return Status::InvalidArgument(context + ": shape " + DimsString(e.shape) + " of " +
                                       std::string(DTypeName(*e.dtype)) +
                                       " has a negative dim, an innermost dim not a whole number of " +
                                       std::to_string(block) + "-element blocks, or too many bytes");
      }
      if (!e.fill && e.bytes.size() != bytes) {
        return Status::InvalidArgument(context + ": shape " + DimsString(e.shape) + " of " +
                                       std::string(DTypeName(*e.dtype)) + " needs " + std::to_string(bytes) +
                                       " bytes, got " + std::to_string(e.bytes.size()));
      }
      nbytes = bytes;
    }
    PutString(&infos, e.name);
    PutBytes(&infos, e.shape.size(), 4);
    for (auto it = e.shape.rbegin(); it != e.shape.rend(); ++it) PutBytes(&infos, static_cast<uint64_t>(*it), 8);
    PutBytes(&infos, ggml_type, 4);
    PutBytes(&infos, offset, 8);
    sizes.push_back(nbytes);
    offset = AlignUp(offset + nbytes, alignment_);
  }

  std::vector<uint8_t> header;
  PutBytes(&header, kMagic, 4);
  PutBytes(&header, 3, 4);
  PutBytes(&header, tensors_.size(), 8);
  PutBytes(&header, kv_count, 8);
  header.insert(header.end(), kv.begin(), kv.end());
  header.insert(header.end(), infos.begin(), infos.end());
  header.resize(AlignUp(header.size(), alignment_), 0);

  AtomicFile out(path);
  LATTE_RETURN_IF_ERROR(out.Open());
  LATTE_RETURN_IF_ERROR(out.Write(header.data(), header.size()));
  const std::vector<uint8_t> padding(alignment_, 0);
  std::vector<uint8_t> scratch;  // reused: holds one produced tensor at a time
  for (size_t i = 0; i < tensors_.size(); ++i) {
    const Entry& e = tensors_[i];
    const auto nbytes = static_cast<size_t>(sizes[i]);
    if (e.fill) {
      scratch.resize(nbytes);
      e.fill(scratch.data(), nbytes);
      LATTE_RETURN_IF_ERROR(out.Write(scratch.data(), nbytes));
    } else {
      LATTE_RETURN_IF_ERROR(out.Write(e.bytes.data(), nbytes));
    }
    LATTE_RETURN_IF_ERROR(out.Write(padding.data(), AlignUp(nbytes, alignment_) - nbytes));
  }
  return out.Commit();
}

}  // namespace latte
