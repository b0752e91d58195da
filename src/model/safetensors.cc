#include "model/safetensors.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

namespace latte {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

constexpr char kIndexFileName[] = "model.safetensors.index.json";
constexpr char kSuffix[] = ".safetensors";
constexpr size_t kLengthFieldBytes = 8;
// The reference implementation (huggingface/safetensors) refuses headers over
// 100 MB; a real 671B checkpoint's largest shard header is about 100 KB.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

// A string as a JSON literal: quoted, with control characters escaped, so a
// hostile tensor name cannot break the one-line error message.
std::string Quote(const std::string& s) { return json(s).dump(-1, ' ', false, json::error_handler_t::replace); }

std::string TensorContext(const std::string& file, const std::string& tensor) {
  return file + ": tensor " + Quote(tensor);
}

std::string OffsetsString(uint64_t begin, uint64_t end) {
  // Appends rather than "[" + ...: GCC 12 warns falsely (-Wrestrict) on that form.
  std::string s = "[";
  s += std::to_string(begin);
  s += ", ";
  s += std::to_string(end);
  s += "]";
  return s;
}

// product(shape) * DTypeSize(dtype), or nullopt if a dim is negative or the
// product of the non-zero dims (times the dtype size) overflows int64: a hostile
// header can claim [2^40, 2^40], or [2^62, 2, 0], whose 0 bytes would pass a check
// of the whole product but whose NumElements() overflows on the way to 0.
std::optional<uint64_t> CheckedByteSize(const std::vector<int64_t>& shape, DType dtype) {
  int64_t bytes = static_cast<int64_t>(DTypeSize(dtype));
  bool empty = false;
  for (int64_t dim : shape) {
    if (dim < 0) return std::nullopt;
    if (dim == 0) {
      empty = true;
    } else if (__builtin_mul_overflow(bytes, dim, &bytes)) {
      return std::nullopt;
    }
  }
  return empty ? 0 : static_cast<uint64_t>(bytes);
}

uint64_t ReadLittleEndianU64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

// ---- Reading one file ----------------------------------------------------------

// One header entry, validated; offsets are relative to the data section.
struct ParsedEntry {
  TensorInfo info;
  uint64_t begin = 0;
  uint64_t end = 0;
};

Result<DType> ParseEntryDType(const json& entry) {
  auto it = entry.find("dtype");
  if (it == entry.end()) return Status::DataLoss("missing \"dtype\"");
  if (!it->is_string()) {
    return Status::DataLoss(std::string("\"dtype\" must be a string, got ") + it->type_name());
  }
  const std::string name = it->get<std::string>();
  std::optional<DType> dtype = ParseDType(name);
  if (!dtype) {
    return Status::Unimplemented("unsupported dtype " + Quote(name) + " (expected F32, F16, BF16 or F8_E4M3)");
  }
  return *dtype;
}

Result<std::vector<int64_t>> ParseEntryShape(const json& entry) {
  auto it = entry.find("shape");
  if (it == entry.end()) return Status::DataLoss("missing \"shape\"");
  if (!it->is_array()) {
    return Status::DataLoss(std::string("\"shape\" must be an array, got ") + it->type_name());
  }
  std::vector<int64_t> shape;
  for (size_t i = 0; i < it->size(); ++i) {
    const json& dim = (*it)[i];
    if (!dim.is_number_integer()) {
      return Status::DataLoss("shape dimension " + std::to_string(i) + " must be an integer, got " + dim.type_name());
    }
    // nlohmann stores non-negative literals as unsigned; above INT64_MAX they
    // would wrap negative on get<int64_t>().
    if (dim.is_number_unsigned()) {
      const uint64_t v = dim.get<uint64_t>();
      if (v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        return Status::DataLoss("shape dimension " + std::to_string(i) + " (" + std::to_string(v) + ") is too large");
      }
      shape.push_back(static_cast<int64_t>(v));
    } else {
      const int64_t v = dim.get<int64_t>();
      if (v < 0) {
        return Status::DataLoss("shape dimension " + std::to_string(i) + " is negative (" + std::to_string(v) + ")");
      }
      shape.push_back(v);
    }
  }
  return shape;
}

Status ParseEntryOffsets(const json& entry, uint64_t* begin, uint64_t* end) {
  auto it = entry.find("data_offsets");
  if (it == entry.end()) return Status::DataLoss("missing \"data_offsets\"");
  if (!it->is_array() || it->size() != 2) {
    return Status::DataLoss(
        "\"data_offsets\" must be an array of two integers, got " +
        (it->is_array() ? "an array of " + std::to_string(it->size()) : std::string(it->type_name())));
  }
  for (size_t i = 0; i < 2; ++i) {
    if (!(*it)[i].is_number_integer()) {
      return Status::DataLoss("data_offsets[" + std::to_string(i) + "] must be an integer, got " +
                              (*it)[i].type_name());
    }
  }
  if (!(*it)[0].is_number_unsigned() || !(*it)[1].is_number_unsigned()) {
    return Status::DataLoss("\"data_offsets\" must be non-negative, got [" + std::to_string((*it)[0].get<int64_t>()) +
                            ", " + std::to_string((*it)[1].get<int64_t>()) + "]");
  }
  *begin = (*it)[0].get<uint64_t>();
  *end = (*it)[1].get<uint64_t>();
  return Status::Ok();
}

// Validates one header entry against the data section; the error message leaves
// naming the file and tensor to the caller.
Result<ParsedEntry> ParseEntry(const std::string& name, const json& entry, const uint8_t* data, uint64_t data_size) {
  if (!entry.is_object()) {
    return Status::DataLoss(std::string("entry must be an object, got ") + entry.type_name());
  }
  ParsedEntry e;
  e.info.name = name;
  LATTE_ASSIGN_OR_RETURN(e.info.dtype, ParseEntryDType(entry));
  LATTE_ASSIGN_OR_RETURN(e.info.shape, ParseEntryShape(entry));
  LATTE_RETURN_IF_ERROR(ParseEntryOffsets(entry, &e.begin, &e.end));
  const std::string offsets = OffsetsString(e.begin, e.end);
  if (e.begin > e.end) return Status::DataLoss("data_offsets " + offsets + " end before they begin");
  if (e.end > data_size) {
    return Status::DataLoss("data_offsets " + offsets + " lie outside the " + std::to_string(data_size) +
                            "-byte data section");
  }
  std::optional<uint64_t> expected = CheckedByteSize(e.info.shape, e.info.dtype);
  if (!expected) {
    return Status::DataLoss("shape " + ShapeString(e.info.shape) + " has too many elements");
  }
  if (*expected != e.end - e.begin) {
    return Status::DataLoss("shape " + ShapeString(e.info.shape) + " of " + std::string(DTypeName(e.info.dtype)) +
                            " needs " + std::to_string(*expected) + " bytes but data_offsets " + offsets + " hold " +
                            std::to_string(e.end - e.begin));
  }
  e.info.data = data + e.begin;
  e.info.nbytes = static_cast<size_t>(e.end - e.begin);
  return e;
}

// Sorts by offset and rejects byte ranges shared by two tensors: two weights
// aliasing the same bytes is a corrupt file, never an intended layout.
Status CheckNoOverlap(const std::string& path, std::vector<ParsedEntry>* entries) {
  std::sort(entries->begin(), entries->end(), [](const ParsedEntry& a, const ParsedEntry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  const ParsedEntry* furthest = nullptr;  // the entry reaching furthest so far
  for (const ParsedEntry& e : *entries) {
    if (furthest != nullptr && e.begin < furthest->end && e.begin < e.end) {
      return Status::DataLoss(path + ": tensors " + Quote(furthest->info.name) + " " +
                              OffsetsString(furthest->begin, furthest->end) + " and " + Quote(e.info.name) + " " +
                              OffsetsString(e.begin, e.end) + " overlap");
    }
    if (furthest == nullptr || e.end > furthest->end) furthest = &e;
  }
  return Status::Ok();
}

// ---- Opening a directory -------------------------------------------------------

std::string JoinPath(const std::string& dir, const std::string& name) { return (fs::path(dir) / name).string(); }

Result<std::string> ReadTextFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::NotFound(path + ": cannot open: " + std::strerror(errno));
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) return Status::Internal(path + ": read failed");
  return text.str();
}

// A shard must be a plain file name in the checkpoint directory; "../x" or an
// absolute path in a downloaded index must not reach outside it.
bool IsPlainFileName(const std::string& name) {
  return !name.empty() && name != "." && name != ".." && name.find('/') == std::string::npos &&
         name.find('\0') == std::string::npos;
}

// model.safetensors.index.json -> {tensor name: shard file name}.
Result<std::map<std::string, std::string>> ReadWeightMap(const std::string& index_path) {
  LATTE_ASSIGN_OR_RETURN(std::string text, ReadTextFile(index_path));
  const json index = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (index.is_discarded()) return Status::DataLoss(index_path + ": not valid JSON");
  if (!index.is_object()) {
    return Status::DataLoss(index_path + ": must be a JSON object, got " + index.type_name());
  }
  auto it = index.find("weight_map");
  if (it == index.end()) return Status::DataLoss(index_path + ": missing \"weight_map\"");
  if (!it->is_object()) {
    return Status::DataLoss(index_path + ": \"weight_map\" must be an object, got " + it->type_name());
  }
  std::map<std::string, std::string> weight_map;
  for (const auto& [tensor, shard] : it->items()) {
    if (!shard.is_string()) {
      return Status::DataLoss(index_path + ": weight_map: tensor " + Quote(tensor) + ": shard must be a string, got " +
                              shard.type_name());
    }
    const std::string shard_name = shard.get<std::string>();
    if (!IsPlainFileName(shard_name)) {
      return Status::DataLoss(index_path + ": weight_map: tensor " + Quote(tensor) + ": shard " + Quote(shard_name) +
                              " is not a file name in the checkpoint directory");
    }
    weight_map.emplace(tensor, shard_name);
  }
  return weight_map;
}

// The single *.safetensors file of an unsharded checkpoint.
Result<std::string> FindSingleFile(const std::string& dir) {
  std::error_code ec;
  std::vector<std::string> names;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.size() > std::strlen(kSuffix) && name.ends_with(kSuffix) && it->is_regular_file(ec)) {
      names.push_back(name);
    }
  }
  if (ec) return Status::NotFound(dir + ": cannot list: " + ec.message());
  if (names.empty()) {
    return Status::NotFound(dir + ": no *.safetensors file and no " + std::string(kIndexFileName));
  }
  if (names.size() > 1) {
    std::sort(names.begin(), names.end());
    std::string list;
    for (const std::string& n : names) list += (list.empty() ? "" : ", ") + n;
    return Status::DataLoss(dir + ": " + std::to_string(names.size()) + " *.safetensors files (" + list + ") but no " +
                            kIndexFileName + " to say which tensors each holds");
  }
  return JoinPath(dir, names[0]);
}

}  // namespace

// ---- Public reading API --------------------------------------------------------

std::string ShapeString(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

int64_t TensorInfo::NumElements() const {
  int64_t n = 1;
  for (int64_t dim : shape) n *= dim;  // validated at load: every partial product fits
  return n;
}

Result<std::vector<TensorInfo>> ReadSafetensorsHeader(const MappedFile& file) {
  return ReadSafetensorsHeader(file.path(), file.data(), file.size());
}

Result<std::vector<TensorInfo>> ReadSafetensorsHeader(const std::string& path, const uint8_t* bytes, size_t size) {
  if (size < kLengthFieldBytes) {
    return Status::DataLoss(path + ": file is " + std::to_string(size) +
                            " bytes, too short for the 8-byte header length");
  }
  const uint64_t header_size = ReadLittleEndianU64(bytes);
  const uint64_t after_length = size - kLengthFieldBytes;
  if (header_size > after_length) {
    return Status::DataLoss(path + ": header length " + std::to_string(header_size) + " is larger than the " +
                            std::to_string(after_length) + " bytes after the length field");
  }
  if (header_size > kMaxHeaderBytes) {
    return Status::DataLoss(path + ": header length " + std::to_string(header_size) + " exceeds the " +
                            std::to_string(kMaxHeaderBytes) + "-byte limit");
  }
  const uint8_t* header_begin = bytes + kLengthFieldBytes;
  // nlohmann keeps the last of two equal keys; a tensor named twice would then
  // silently lose one entry, so the parse callback watches the top-level keys.
  std::set<std::string> keys;
  std::string duplicate;
  const json::parser_callback_t find_duplicate = [&](int depth, json::parse_event_t event, json& parsed) {
    if (depth == 1 && event == json::parse_event_t::key && parsed.is_string() &&
        !keys.insert(parsed.get<std::string>()).second && duplicate.empty()) {
      duplicate = parsed.get<std::string>();
    }
    return true;
  };
  const json header = json::parse(header_begin, header_begin + header_size, find_duplicate,
                                  /*allow_exceptions=*/false);
  if (header.is_discarded()) return Status::DataLoss(path + ": header is not valid JSON");
  if (!duplicate.empty()) {
    return Status::DataLoss(TensorContext(path, duplicate) + ": appears twice in the header");
  }
  if (!header.is_object()) {
    return Status::DataLoss(path + ": header must be a JSON object, got " + header.type_name());
  }

  const uint8_t* data = header_begin + header_size;
  const uint64_t data_size = after_length - header_size;
  std::vector<ParsedEntry> entries;
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") continue;  // free-form strings; nothing here needs them
    Result<ParsedEntry> e = ParseEntry(name, entry, data, data_size);
    if (!e.ok()) return e.status().WithContext(TensorContext(path, name));
    e->info.file = path;
    entries.push_back(std::move(e.value()));
  }
  LATTE_RETURN_IF_ERROR(CheckNoOverlap(path, &entries));

  std::vector<TensorInfo> tensors;
  tensors.reserve(entries.size());
  for (ParsedEntry& e : entries) tensors.push_back(std::move(e.info));
  return tensors;
}

namespace {

// Where a safetensors file's data section starts, modulo 64: after the 8-byte length field
// and the header it gives. Every tensor's offset in it is a multiple of its element size,
// and in the files latte and the usual converters write each tensor's bytes are a multiple
// of 64, so a copy that puts this offset on a cache line puts every tensor on one. 0 when
// the length field cannot be read (the header check reports that file).
size_t DataSectionLineOffset(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  uint8_t field[kLengthFieldBytes];
  if (!in.read(reinterpret_cast<char*>(field), sizeof field)) return 0;
  return static_cast<size_t>((kLengthFieldBytes + ReadLittleEndianU64(field) % 64) % 64);
}

}  // namespace

Result<Checkpoint> Checkpoint::Open(const std::string& dir, FileResidency residency,
                                    const std::function<void(uint64_t)>& on_read) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return Status::NotFound(dir + ": not a directory");

  // Shard file name -> the first tensor the index maps to it (for error messages).
  std::map<std::string, std::string> shards;
  std::map<std::string, std::string> weight_map;
  const std::string index_path = JoinPath(dir, kIndexFileName);
  const bool sharded = fs::exists(index_path, ec);
  if (sharded) {
    LATTE_ASSIGN_OR_RETURN(weight_map, ReadWeightMap(index_path));
    for (const auto& [tensor, shard] : weight_map) shards.emplace(shard, tensor);
  } else {
    LATTE_ASSIGN_OR_RETURN(std::string path, FindSingleFile(dir));
    shards.emplace(fs::path(path).filename().string(), "");
  }

  Checkpoint checkpoint;
  uint64_t read_before = 0;  // bytes of the shards already read
  for (const auto& [shard, first_tensor] : shards) {
    const std::string path = JoinPath(dir, shard);
    if (sharded && !fs::is_regular_file(path, ec)) {
      return Status::NotFound(index_path + ": shard " + Quote(shard) + " (holding tensor " + Quote(first_tensor) +
                              ") does not exist");
    }
    std::function<void(size_t)> on_file_read;
    if (on_read) on_file_read = [&](size_t done) { on_read(read_before + done); };
    const size_t line_offset = residency == FileResidency::kHugePageCopy ? DataSectionLineOffset(path) : 0;
    LATTE_ASSIGN_OR_RETURN(std::shared_ptr<MappedFile> file,
                           MappedFile::Open(path, residency, on_file_read, line_offset));
    read_before += file->size();
    LATTE_ASSIGN_OR_RETURN(std::vector<TensorInfo> tensors, ReadSafetensorsHeader(*file));
    for (TensorInfo& t : tensors) {
      if (const TensorInfo* other = checkpoint.Find(t.name)) {
        return Status::DataLoss(TensorContext(path, t.name) + ": also in " + other->file);
      }
      checkpoint.by_name_.emplace(t.name, checkpoint.tensors_.size());
      checkpoint.tensors_.push_back(std::move(t));
    }
    checkpoint.files_.push_back(std::move(file));
  }

  // The index is what a loader trusts for where each tensor lives: a tensor it
  // lists must really be in that shard.
  for (const auto& [tensor, shard] : weight_map) {
    const std::string path = JoinPath(dir, shard);
    const TensorInfo* found = checkpoint.Find(tensor);
    if (found == nullptr || found->file != path) {
      return Status::DataLoss(TensorContext(path, tensor) + ": listed in " + kIndexFileName +
                              " but missing from the shard" +
                              (found != nullptr ? " (it is in " + found->file + ")" : ""));
    }
  }
  return checkpoint;
}

const TensorInfo* Checkpoint::Find(const std::string& name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : &tensors_[it->second];
}

Checkpoint Checkpoint::FromTensors(std::vector<TensorInfo> tensors, std::shared_ptr<const void> owner) {
  Checkpoint c;
  c.tensors_ = std::move(tensors);
  c.owner_ = std::move(owner);
  for (size_t i = 0; i < c.tensors_.size(); ++i) c.by_name_.emplace(c.tensors_[i].name, i);
  return c;
}

size_t Checkpoint::TotalBytes() const {
  size_t total = 0;
  for (const TensorInfo& t : tensors_) total += t.nbytes;
  return total;
}

// ---- Writing -------------------------------------------------------------------

namespace {

// An output file written under a temporary name and renamed into place by
// Commit(); destroyed uncommitted, it removes the temporary.
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

// JSON text, or an error instead of nlohmann's exception on invalid UTF-8 names.
Result<std::string> DumpJson(const json& j, int indent, const std::string& path) {
  try {
    return j.dump(indent);
  } catch (const json::exception& e) {
    return Status::Internal(path + ": cannot encode JSON: " + e.what());
  }
}

}  // namespace

void SafetensorsWriter::Add(std::string name, DType dtype, std::vector<int64_t> shape, std::vector<uint8_t> bytes) {
  entries_.push_back({std::move(name), dtype, std::move(shape), std::move(bytes), nullptr});
}

void SafetensorsWriter::Add(std::string name, DType dtype, std::vector<int64_t> shape, FillFn fill) {
  entries_.push_back({std::move(name), dtype, std::move(shape), {}, std::move(fill)});
}

uint64_t SafetensorsWriter::DataBytes() const {
  uint64_t total = 0;
  for (const Entry& e : entries_) {
    std::optional<uint64_t> bytes = CheckedByteSize(e.shape, e.dtype);
    if (!bytes || __builtin_add_overflow(total, *bytes, &total)) return 0;
  }
  return total;
}

Status SafetensorsWriter::Write(const std::string& path, const std::map<std::string, std::string>& metadata) const {
  // Validate everything before creating the file, and lay out the data section.
  json header = json::object();
  std::set<std::string> names;
  uint64_t offset = 0;
  for (const Entry& e : entries_) {
    const std::string context = TensorContext(path, e.name);
    if (e.name.empty() || e.name == "__metadata__") return Status::InvalidArgument(context + ": reserved name");
    if (!names.insert(e.name).second) return Status::InvalidArgument(context + ": added twice");
    std::optional<uint64_t> bytes = CheckedByteSize(e.shape, e.dtype);
    if (!bytes) {
      return Status::InvalidArgument(context + ": shape " + ShapeString(e.shape) +
                                     " has a negative dimension or too many elements");
    }
    if (!e.fill && e.bytes.size() != *bytes) {
      return Status::InvalidArgument(context + ": shape " + ShapeString(e.shape) + " of " +
                                     std::string(DTypeName(e.dtype)) + " needs " + std::to_string(*bytes) +
                                     " bytes, got " + std::to_string(e.bytes.size()));
    }
    header[e.name] = {
        {"dtype", std::string(DTypeName(e.dtype))}, {"shape", e.shape}, {"data_offsets", {offset, offset + *bytes}}};
    offset += *bytes;
  }
  if (!metadata.empty()) header["__metadata__"] = metadata;

  LATTE_ASSIGN_OR_RETURN(std::string header_text, DumpJson(header, -1, path));
  // Spaces up to a multiple of 8, so the data section (and every f32/bf16 tensor
  // in it, given the offsets are multiples of the element size) stays aligned.
  header_text.append((8 - header_text.size() % 8) % 8, ' ');
  uint8_t length_field[kLengthFieldBytes];
  for (size_t i = 0; i < kLengthFieldBytes; ++i) {
    length_field[i] = static_cast<uint8_t>(static_cast<uint64_t>(header_text.size()) >> (8 * i));
  }

  AtomicFile out(path);
  LATTE_RETURN_IF_ERROR(out.Open());
  LATTE_RETURN_IF_ERROR(out.Write(length_field, sizeof length_field));
  LATTE_RETURN_IF_ERROR(out.Write(header_text.data(), header_text.size()));
  std::vector<uint8_t> scratch;  // reused: holds one produced tensor at a time
  for (const Entry& e : entries_) {
    if (e.fill) {
      const size_t nbytes = static_cast<size_t>(*CheckedByteSize(e.shape, e.dtype));
      scratch.resize(nbytes);
      e.fill(scratch.data(), nbytes);
      LATTE_RETURN_IF_ERROR(out.Write(scratch.data(), nbytes));
    } else {
      LATTE_RETURN_IF_ERROR(out.Write(e.bytes.data(), e.bytes.size()));
    }
  }
  return out.Commit();
}

Status WriteShardIndex(const std::string& dir, const std::map<std::string, std::string>& weight_map,
                       uint64_t total_size) {
  const std::string path = JoinPath(dir, kIndexFileName);
  const json index = {{"metadata", {{"total_size", total_size}}}, {"weight_map", weight_map}};
  LATTE_ASSIGN_OR_RETURN(std::string text, DumpJson(index, 2, path));
  text += '\n';
  AtomicFile out(path);
  LATTE_RETURN_IF_ERROR(out.Open());
  LATTE_RETURN_IF_ERROR(out.Write(text.data(), text.size()));
  return out.Commit();
}

}  // namespace latte
