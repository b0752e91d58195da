// Safetensors reader and writer: round trips per dtype, a sharded checkpoint, and
// one test per validation error, each checking that the one-line message names
// the file and the tensor (the two things a user needs to find the problem).
#include "model/safetensors.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace latte {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::vector<uint8_t> RandomBytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> bytes(n);
  for (uint8_t& b : bytes) b = static_cast<uint8_t>(rng());
  return bytes;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void WriteFile(const std::string& path, const std::string& content) {
  std::ofstream out(path, std::ios::binary);
  out << content;
}

// A safetensors file with the header text given verbatim and `data_size` data bytes.
void WriteRawSafetensors(const std::string& path, const std::string& header, size_t data_size) {
  std::string file(8, '\0');
  const uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) file[i] = static_cast<char>(n >> (8 * i));
  file += header;
  file.append(data_size, '\x5a');
  WriteFile(path, file);
}

class SafetensorsTest : public testing::Test {
 protected:
  void SetUp() override {
    std::string templ = (fs::path(testing::TempDir()) / "safetensors_test_XXXXXX").string();
    ASSERT_NE(mkdtemp(templ.data()), nullptr) << std::strerror(errno);
    dir_ = templ;
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }

  std::string Path(const std::string& name) const { return (fs::path(dir_) / name).string(); }

  // Opens dir_ and returns the error message; fails the test if Open succeeded.
  std::string OpenError() {
    Result<Checkpoint> ckpt = Checkpoint::Open(dir_);
    EXPECT_FALSE(ckpt.ok()) << "Open unexpectedly succeeded";
    const std::string message = ckpt.status().message();
    EXPECT_EQ(message.find('\n'), std::string::npos) << "error is not one line: " << message;
    return message;
  }

  // model.safetensors with one header entry `entry` for tensor "w" and `data_size` data bytes.
  std::string OpenErrorForEntry(const std::string& entry, size_t data_size) {
    WriteRawSafetensors(Path("model.safetensors"), "{\"w\":" + entry + "}", data_size);
    return OpenError();
  }

  std::string dir_;
};

// Asserts `message` contains every one of `parts`.
void ExpectMentions(const std::string& message, std::initializer_list<std::string> parts) {
  for (const std::string& part : parts) {
    EXPECT_NE(message.find(part), std::string::npos)
        << "error \"" << message << "\" does not mention \"" << part << "\"";
  }
}

// ---- Round trips ---------------------------------------------------------------

TEST_F(SafetensorsTest, RoundTripEveryDType) {
  const std::vector<DType> dtypes = {DType::kF32, DType::kF16, DType::kBF16, DType::kF8E4M3};
  const std::vector<int64_t> shape = {3, 7};
  SafetensorsWriter writer;
  std::vector<std::vector<uint8_t>> expected;
  for (size_t i = 0; i < dtypes.size(); ++i) {
    expected.push_back(RandomBytes(21 * DTypeSize(dtypes[i]), 100 + static_cast<uint32_t>(i)));
    writer.Add("t." + std::string(DTypeName(dtypes[i])), dtypes[i], shape, expected.back());
  }
  ASSERT_TRUE(writer.Write(Path("model.safetensors"), {{"format", "pt"}}).ok());

  Result<Checkpoint> ckpt = Checkpoint::Open(dir_);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().message();
  ASSERT_EQ(ckpt->tensors().size(), dtypes.size());
  size_t total = 0;
  for (size_t i = 0; i < dtypes.size(); ++i) {
    const TensorInfo* t = ckpt->Find("t." + std::string(DTypeName(dtypes[i])));
    ASSERT_NE(t, nullptr);
    EXPECT_EQ(t->dtype, dtypes[i]);
    EXPECT_EQ(t->shape, shape);
    EXPECT_EQ(t->NumElements(), 21);
    EXPECT_EQ(t->file, Path("model.safetensors"));
    ASSERT_EQ(t->nbytes, expected[i].size());
    EXPECT_EQ(std::memcmp(t->data, expected[i].data(), t->nbytes), 0) << DTypeName(dtypes[i]);
    total += t->nbytes;
  }
  EXPECT_EQ(ckpt->TotalBytes(), total);
  EXPECT_EQ(ckpt->Find("absent"), nullptr);
}

TEST_F(SafetensorsTest, WriterPadsHeaderAndKeepsMetadata) {
  SafetensorsWriter writer;
  writer.Add("a", DType::kBF16, {5}, RandomBytes(10, 1));  // odd sizes push the header off 8
  ASSERT_TRUE(writer.Write(Path("m.safetensors"), {{"format", "pt"}}).ok());
  const std::string file = ReadFile(Path("m.safetensors"));
  ASSERT_GE(file.size(), 8u);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<uint8_t>(file[i]);
  EXPECT_EQ(n % 8, 0u);
  ASSERT_EQ(file.size(), 8 + n + 10);
  const json header = json::parse(file.substr(8, n));
  EXPECT_EQ(header["__metadata__"]["format"], "pt");
  EXPECT_EQ(header["a"]["dtype"], "BF16");
  EXPECT_EQ(header["a"]["data_offsets"], json({0, 10}));
  EXPECT_FALSE(fs::exists(Path("m.safetensors.tmp")));
}

// A huge-page copy puts the data section on a cache line whatever the header's length
// (a writer pads it to 8 bytes only): every 64-byte tensor starts on a line, with the
// bytes the mapping gives.
TEST_F(SafetensorsTest, HugePageCopyPutsTensorsOnCacheLines) {
  for (size_t meta = 0; meta < 8; ++meta) {
    SafetensorsWriter writer;
    std::vector<std::vector<uint8_t>> expected;
    for (uint32_t i = 0; i < 3; ++i) {
      expected.push_back(RandomBytes(64 * (i + 1), 10 * static_cast<uint32_t>(meta) + i));
      writer.Add("t" + std::to_string(i), DType::kBF16, {32 * (i + 1)}, expected.back());
    }
    // Metadata of 8·meta bytes moves the data section through every 8-byte offset in a line.
    ASSERT_TRUE(writer.Write(Path("model.safetensors"), {{"pad", std::string(8 * meta, 'x')}}).ok());
    const std::string file = ReadFile(Path("model.safetensors"));
    uint64_t n = 0;
    for (int b = 7; b >= 0; --b) n = (n << 8) | static_cast<uint8_t>(file[b]);
    SCOPED_TRACE("data section at " + std::to_string(8 + n) + " (mod 64: " + std::to_string((8 + n) % 64) + ")");
    for (FileResidency residency : {FileResidency::kHugePageCopy, FileResidency::kMapped}) {
      Result<Checkpoint> ckpt = Checkpoint::Open(dir_, residency);
      ASSERT_TRUE(ckpt.ok()) << ckpt.status().message();
      for (uint32_t i = 0; i < 3; ++i) {
        const TensorInfo* t = ckpt->Find("t" + std::to_string(i));
        ASSERT_NE(t, nullptr);
        ASSERT_EQ(t->nbytes, expected[i].size());
        EXPECT_EQ(std::memcmp(t->data, expected[i].data(), t->nbytes), 0);
        const uintptr_t line = reinterpret_cast<uintptr_t>(t->data) % 64;
        if (residency == FileResidency::kHugePageCopy) {
          EXPECT_EQ(line, 0u) << "t" << i;
        } else {  // a mapping keeps the file's offsets
          EXPECT_EQ(line, (8 + n + 64 * i * (i + 1) / 2) % 64) << "t" << i;
        }
      }
    }
  }
}

TEST_F(SafetensorsTest, FillCallbackStreamsData) {
  const std::vector<uint8_t> big = RandomBytes(4096 * 4, 7);
  const std::vector<uint8_t> small = RandomBytes(2 * 3, 8);
  SafetensorsWriter writer;
  writer.Add("big", DType::kF32, {64, 64}, [&](uint8_t* dst, size_t n) {
    ASSERT_EQ(n, big.size());
    std::memcpy(dst, big.data(), n);
  });
  writer.Add("small", DType::kF16, {3}, [&](uint8_t* dst, size_t n) {
    ASSERT_EQ(n, small.size());
    std::memcpy(dst, small.data(), n);
  });
  writer.Add("empty", DType::kBF16, {0, 4}, std::vector<uint8_t>{});
  EXPECT_EQ(writer.DataBytes(), big.size() + small.size());
  ASSERT_TRUE(writer.Write(Path("model.safetensors")).ok());

  Result<Checkpoint> ckpt = Checkpoint::Open(dir_);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().message();
  const TensorInfo* b = ckpt->Find("big");
  const TensorInfo* s = ckpt->Find("small");
  const TensorInfo* e = ckpt->Find("empty");
  ASSERT_TRUE(b && s && e);
  ASSERT_EQ(b->nbytes, big.size());
  ASSERT_EQ(s->nbytes, small.size());
  EXPECT_EQ(std::memcmp(b->data, big.data(), big.size()), 0);
  EXPECT_EQ(std::memcmp(s->data, small.data(), small.size()), 0);
  EXPECT_EQ(e->nbytes, 0u);
  EXPECT_EQ(e->NumElements(), 0);
}

// Writes two shards and their index: "a" and "b" in shard 1, "c" in shard 2.
void WriteTwoShards(const std::string& dir, std::vector<std::vector<uint8_t>>* data) {
  *data = {RandomBytes(8, 1), RandomBytes(12, 2), RandomBytes(6, 3)};
  SafetensorsWriter shard1;
  shard1.Add("a", DType::kF32, {2}, (*data)[0]);
  shard1.Add("b", DType::kBF16, {2, 3}, (*data)[1]);
  SafetensorsWriter shard2;
  shard2.Add("c", DType::kF8E4M3, {6}, (*data)[2]);
  ASSERT_TRUE(shard1.Write(dir + "/model-00001-of-00002.safetensors").ok());
  ASSERT_TRUE(shard2.Write(dir + "/model-00002-of-00002.safetensors").ok());
  ASSERT_TRUE(WriteShardIndex(dir,
                              {{"a", "model-00001-of-00002.safetensors"},
                               {"b", "model-00001-of-00002.safetensors"},
                               {"c", "model-00002-of-00002.safetensors"}},
                              shard1.DataBytes() + shard2.DataBytes())
                  .ok());
}

TEST_F(SafetensorsTest, ShardedCheckpointWithIndex) {
  std::vector<std::vector<uint8_t>> data;
  WriteTwoShards(dir_, &data);

  const json index = json::parse(ReadFile(Path("model.safetensors.index.json")));
  EXPECT_EQ(index["metadata"]["total_size"], 26);
  EXPECT_EQ(index["weight_map"]["c"], "model-00002-of-00002.safetensors");

  Result<Checkpoint> ckpt = Checkpoint::Open(dir_);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().message();
  ASSERT_EQ(ckpt->tensors().size(), 3u);
  EXPECT_EQ(ckpt->TotalBytes(), 26u);
  const char* names[] = {"a", "b", "c"};
  for (int i = 0; i < 3; ++i) {
    const TensorInfo* t = ckpt->Find(names[i]);
    ASSERT_NE(t, nullptr) << names[i];
    ASSERT_EQ(t->nbytes, data[i].size());
    EXPECT_EQ(std::memcmp(t->data, data[i].data(), t->nbytes), 0) << names[i];
  }
  EXPECT_EQ(ckpt->Find("c")->file, Path("model-00002-of-00002.safetensors"));
  EXPECT_EQ(ckpt->Find("b")->dtype, DType::kBF16);
}

// ---- Errors in one file --------------------------------------------------------

TEST_F(SafetensorsTest, ErrorFileShorterThanLengthField) {
  WriteFile(Path("model.safetensors"), "abc");
  ExpectMentions(OpenError(), {"model.safetensors", "3 bytes", "too short"});
}

TEST_F(SafetensorsTest, ErrorHeaderLengthLargerThanFile) {
  std::string file(8, '\0');
  file[0] = static_cast<char>(200);
  file += "{}";
  WriteFile(Path("model.safetensors"), file);
  ExpectMentions(OpenError(), {"model.safetensors", "header length 200", "2 bytes"});
}

TEST_F(SafetensorsTest, ErrorHugeHeaderLengthDoesNotWrap) {
  WriteFile(Path("model.safetensors"), std::string(8, '\xff') + "{}");
  ExpectMentions(OpenError(), {"model.safetensors", "header length 18446744073709551615"});
}

TEST_F(SafetensorsTest, ErrorHeaderNotJson) {
  WriteRawSafetensors(Path("model.safetensors"), "{\"w\": {\"dtype\": ", 0);
  ExpectMentions(OpenError(), {"model.safetensors", "not valid JSON"});
}

TEST_F(SafetensorsTest, ErrorHeaderNotObject) {
  WriteRawSafetensors(Path("model.safetensors"), "[1, 2]", 0);
  ExpectMentions(OpenError(), {"model.safetensors", "must be a JSON object", "array"});
}

TEST_F(SafetensorsTest, ErrorEntryNotObject) {
  ExpectMentions(OpenErrorForEntry("[1]", 0), {"model.safetensors", "tensor \"w\"", "object"});
}

TEST_F(SafetensorsTest, ErrorMissingDtype) {
  ExpectMentions(OpenErrorForEntry(R"({"shape":[1],"data_offsets":[0,4]})", 4),
                 {"model.safetensors", "tensor \"w\"", "missing \"dtype\""});
}

TEST_F(SafetensorsTest, ErrorMissingShape) {
  ExpectMentions(OpenErrorForEntry(R"({"dtype":"F32","data_offsets":[0,4]})", 4),
                 {"model.safetensors", "tensor \"w\"", "missing \"shape\""});
}

TEST_F(SafetensorsTest, ErrorMissingDataOffsets) {
  ExpectMentions(OpenErrorForEntry(R"({"dtype":"F32","shape":[1]})", 4),
                 {"model.safetensors", "tensor \"w\"", "missing \"data_offsets\""});
}

TEST_F(SafetensorsTest, ErrorDtypeNotString) {
  ExpectMentions(OpenErrorForEntry(R"({"dtype":4,"shape":[1],"data_offsets":[0,4]})", 4),
                 {"model.safetensors", "tensor \"w\"", "\"dtype\" must be a string"});
}

TEST_F(SafetensorsTest, ErrorShapeNotArray) {
  ExpectMentions(OpenErrorForEntry(R"({"dtype":"F32","shape":"1","data_offsets":[0,4]})", 4),
                 {"model.safetensors", "tensor \"w\"", "\"shape\" must be an array"});
}

TEST_F(SafetensorsTest, ErrorShapeDimNotInteger) {
  ExpectMentions(OpenErrorForEntry(R"({"dtype":"F32","shape":[1.5],"data_offsets":[0,4]})", 4),
                 {"model.safetensors", "tensor \"w\"", "dimension 0 must be an integer"});
}

TEST_F(SafetensorsTest, ErrorNegativeDim) {
  ExpectMentions(OpenErrorForEntry(R"({"dtype":"F32","shape":[2,-1],"data_offsets":[0,4]})", 4),
                 {"model.safetensors", "tensor \"w\"", "dimension 1 is negative"});
}

TEST_F(SafetensorsTest, ErrorDimAboveInt64) {
  ExpectMentions(OpenErrorForEntry(R"({"dtype":"F32","shape":[9223372036854775808],"data_offsets":[0,4]})", 4),
                 {"model.safetensors", "tensor \"w\"", "too large"});
}

TEST_F(SafetensorsTest, ErrorUnknownDtypeI64) {
  ExpectMentions(OpenErrorForEntry(R"({"dtype":"I64","shape":[1],"data_offsets":[0,8]})", 8),
                 {"model.safetensors", "tensor \"w\"", "\"I64\""});
}

TEST_F(SafetensorsTest, ErrorUnknownDtypeF8E5M2) {
  ExpectMentions(OpenErrorForEntry(R"({"dtype":"F8_E5M2","shape":[1],"data_offsets":[0,1]})", 1),
                 {"model.safetensors", "tensor \"w\"", "\"F8_E5M2\""});
}

TEST_F(SafetensorsTest, ErrorDataOffsetsOneInt) {
  ExpectMentions(OpenErrorForEntry(R"({"dtype":"F32","shape":[1],"data_offsets":[4]})", 4),
                 {"model.safetensors", "tensor \"w\"", "array of two integers"});
}

TEST_F(SafetensorsTest, ErrorDataOffsetsNotInts) {
  ExpectMentions(OpenErrorForEntry(R"({"dtype":"F32","shape":[1],"data_offsets":["0","4"]})", 4),
                 {"model.safetensors", "tensor \"w\"", "data_offsets[0] must be an integer"});
}

TEST_F(SafetensorsTest, ErrorDataOffsetsNegative) {
  ExpectMentions(OpenErrorForEntry(R"({"dtype":"F32","shape":[1],"data_offsets":[-4,0]})", 4),
                 {"model.safetensors", "tensor \"w\"", "non-negative"});
}

TEST_F(SafetensorsTest, ErrorDataOffsetsBeginAfterEnd) {
  ExpectMentions(OpenErrorForEntry(R"({"dtype":"F32","shape":[1],"data_offsets":[8,4]})", 8),
                 {"model.safetensors", "tensor \"w\"", "[8, 4]", "end before"});
}

TEST_F(SafetensorsTest, ErrorDataOffsetsBeyondDataSection) {
  ExpectMentions(OpenErrorForEntry(R"({"dtype":"F32","shape":[2],"data_offsets":[0,8]})", 4),
                 {"model.safetensors", "tensor \"w\"", "[0, 8] lie outside the 4-byte data section"});
}

TEST_F(SafetensorsTest, ErrorByteSizeMismatch) {
  ExpectMentions(OpenErrorForEntry(R"({"dtype":"BF16","shape":[3],"data_offsets":[0,8]})", 8),
                 {"model.safetensors", "tensor \"w\"", "needs 6 bytes", "hold 8"});
}

TEST_F(SafetensorsTest, ErrorShapeProductOverflows) {
  ExpectMentions(OpenErrorForEntry(R"({"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,4]})", 4),
                 {"model.safetensors", "tensor \"w\"", "too many elements"});
}

// 0 bytes, but its element count overflows int64 before the 0 (the safetensors
// fuzzer's finding: TensorInfo::NumElements multiplied 2^62 by 2).
TEST_F(SafetensorsTest, ErrorEmptyShapeWhoseOtherDimsOverflow) {
  for (const char* shape : {"[4611686018427387904,2,0]", "[0,4611686018427387904,2]", "[4611686018427387904,0,2]"}) {
    SCOPED_TRACE(shape);
    ExpectMentions(
        OpenErrorForEntry(std::string(R"({"dtype":"F8_E4M3","shape":)") + shape + R"(,"data_offsets":[0,0]})", 0),
        {"model.safetensors", "tensor \"w\"", "too many elements"});
  }
  // An empty tensor of ordinary dims is fine.
  WriteRawSafetensors(Path("model.safetensors"), R"({"w":{"dtype":"BF16","shape":[4096,0],"data_offsets":[0,0]}})", 0);
  Result<Checkpoint> ckpt = Checkpoint::Open(dir_);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().message();
  EXPECT_EQ(ckpt->Find("w")->NumElements(), 0);
}

TEST_F(SafetensorsTest, ErrorSameTensorTwiceInHeader) {
  WriteRawSafetensors(Path("model.safetensors"),
                      R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                      R"("w":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                      8);
  ExpectMentions(OpenError(), {"model.safetensors", "tensor \"w\"", "appears twice"});
}

TEST_F(SafetensorsTest, ErrorOverlappingTensors) {
  WriteRawSafetensors(Path("model.safetensors"),
                      R"({"first":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                      R"("second":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                      12);
  ExpectMentions(OpenError(), {"model.safetensors", "\"first\"", "\"second\"", "overlap"});
}

TEST_F(SafetensorsTest, ErrorTruncatedFile) {
  SafetensorsWriter writer;
  writer.Add("model.layers.0.self_attn.kv_b_proj.weight", DType::kBF16, {32, 64}, RandomBytes(32 * 64 * 2, 5));
  ASSERT_TRUE(writer.Write(Path("model.safetensors")).ok());
  const uintmax_t size = fs::file_size(Path("model.safetensors"));
  fs::resize_file(Path("model.safetensors"), size - 2048);
  ExpectMentions(OpenError(), {"model.safetensors", "tensor \"model.layers.0.self_attn.kv_b_proj.weight\"",
                               "[0, 4096] lie outside the 2048-byte data section"});
}

// Hostile input must give an error or a checkpoint whose tensors all lie inside
// the file, never a crash (run under ASan/UBSan to catch out-of-bounds reads).
TEST_F(SafetensorsTest, CorruptedFilesNeverCrash) {
  SafetensorsWriter writer;
  writer.Add("a", DType::kF32, {2, 3}, RandomBytes(24, 1));
  writer.Add("b", DType::kBF16, {5}, RandomBytes(10, 2));
  ASSERT_TRUE(writer.Write(Path("valid.bin")).ok());
  const std::string valid = ReadFile(Path("valid.bin"));

  // Returns whether the content opened.
  auto check = [&](const std::string& content, const std::string& what) {
    WriteFile(Path("model.safetensors"), content);
    Result<Checkpoint> ckpt = Checkpoint::Open(dir_);
    if (!ckpt.ok()) {
      EXPECT_NE(ckpt.status().message().find("model.safetensors"), std::string::npos) << what;
      return false;
    }
    size_t sum = 0;
    for (const TensorInfo& t : ckpt->tensors()) {
      EXPECT_EQ(t.nbytes, static_cast<size_t>(t.NumElements()) * DTypeSize(t.dtype)) << what;
      sum += t.nbytes;
      volatile uint8_t sink = 0;
      for (size_t i = 0; i < t.nbytes; ++i) sink = sink ^ t.data[i];  // touches every byte
    }
    EXPECT_LE(sum, content.size()) << what;
    return true;
  };

  for (size_t n = 0; n < valid.size(); ++n) check(valid.substr(0, n), "truncated to " + std::to_string(n));
  int opened = 0;
  std::mt19937 rng(42);
  for (int trial = 0; trial < 300; ++trial) {
    std::string mutated = valid;
    const size_t pos = rng() % mutated.size();
    mutated[pos] = static_cast<char>(rng());
    opened += check(mutated, "byte " + std::to_string(pos) + " changed");
  }
  // Changes in the data section (and in header whitespace) leave a valid file:
  // the check above really exercised successful opens, not only errors.
  EXPECT_GT(opened, 0);
}

// ---- Directory and index errors ------------------------------------------------

TEST_F(SafetensorsTest, ErrorNoSafetensorsFile) { ExpectMentions(OpenError(), {dir_, "no *.safetensors file"}); }

TEST_F(SafetensorsTest, ErrorSeveralFilesWithoutIndex) {
  std::vector<std::vector<uint8_t>> data;
  WriteTwoShards(dir_, &data);
  fs::remove(Path("model.safetensors.index.json"));
  ExpectMentions(OpenError(), {"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors",
                               "model.safetensors.index.json"});
}

TEST_F(SafetensorsTest, ErrorIndexNotJson) {
  std::vector<std::vector<uint8_t>> data;
  WriteTwoShards(dir_, &data);
  WriteFile(Path("model.safetensors.index.json"), "{\"weight_map\": {");
  ExpectMentions(OpenError(), {"model.safetensors.index.json", "not valid JSON"});
}

TEST_F(SafetensorsTest, ErrorIndexNotObject) {
  std::vector<std::vector<uint8_t>> data;
  WriteTwoShards(dir_, &data);
  WriteFile(Path("model.safetensors.index.json"), "\"weights\"");
  ExpectMentions(OpenError(), {"model.safetensors.index.json", "JSON object", "string"});
}

TEST_F(SafetensorsTest, ErrorIndexMissingWeightMap) {
  std::vector<std::vector<uint8_t>> data;
  WriteTwoShards(dir_, &data);
  WriteFile(Path("model.safetensors.index.json"), R"({"metadata":{"total_size":26}})");
  ExpectMentions(OpenError(), {"model.safetensors.index.json", "missing \"weight_map\""});
}

TEST_F(SafetensorsTest, ErrorIndexWeightMapNotObject) {
  std::vector<std::vector<uint8_t>> data;
  WriteTwoShards(dir_, &data);
  WriteFile(Path("model.safetensors.index.json"), R"({"weight_map":["a"]})");
  ExpectMentions(OpenError(), {"model.safetensors.index.json", "\"weight_map\" must be an object"});
}

TEST_F(SafetensorsTest, ErrorIndexShardNotString) {
  std::vector<std::vector<uint8_t>> data;
  WriteTwoShards(dir_, &data);
  WriteFile(Path("model.safetensors.index.json"), R"({"weight_map":{"a":1}})");
  ExpectMentions(OpenError(), {"model.safetensors.index.json", "tensor \"a\"", "shard must be a string"});
}

TEST_F(SafetensorsTest, ErrorIndexShardOutsideDirectory) {
  std::vector<std::vector<uint8_t>> data;
  WriteTwoShards(dir_, &data);
  WriteFile(Path("model.safetensors.index.json"), R"({"weight_map":{"a":"../x.safetensors"}})");
  ExpectMentions(OpenError(), {"model.safetensors.index.json", "tensor \"a\"", "\"../x.safetensors\""});
}

TEST_F(SafetensorsTest, ErrorIndexNamesMissingShard) {
  std::vector<std::vector<uint8_t>> data;
  WriteTwoShards(dir_, &data);
  fs::remove(Path("model-00002-of-00002.safetensors"));
  ExpectMentions(OpenError(), {"model.safetensors.index.json", "\"model-00002-of-00002.safetensors\"", "tensor \"c\"",
                               "does not exist"});
}

TEST_F(SafetensorsTest, ErrorIndexedTensorMissingFromShard) {
  std::vector<std::vector<uint8_t>> data;
  WriteTwoShards(dir_, &data);
  ASSERT_TRUE(WriteShardIndex(dir_,
                              {{"a", "model-00001-of-00002.safetensors"},
                               {"b", "model-00001-of-00002.safetensors"},
                               {"c", "model-00002-of-00002.safetensors"},
                               {"d", "model-00002-of-00002.safetensors"}},
                              26)
                  .ok());
  ExpectMentions(OpenError(), {"model-00002-of-00002.safetensors", "tensor \"d\"", "missing from the shard"});
}

TEST_F(SafetensorsTest, ErrorIndexedTensorInOtherShard) {
  std::vector<std::vector<uint8_t>> data;
  WriteTwoShards(dir_, &data);
  ASSERT_TRUE(WriteShardIndex(dir_,
                              {{"a", "model-00002-of-00002.safetensors"},
                               {"b", "model-00001-of-00002.safetensors"},
                               {"c", "model-00002-of-00002.safetensors"}},
                              26)
                  .ok());
  ExpectMentions(OpenError(),
                 {"model-00002-of-00002.safetensors", "tensor \"a\"", "missing from the shard", "it is in"});
}

TEST_F(SafetensorsTest, ErrorSameTensorInTwoShards) {
  std::vector<std::vector<uint8_t>> data;
  WriteTwoShards(dir_, &data);
  SafetensorsWriter shard2;
  shard2.Add("c", DType::kF8E4M3, {6}, data[2]);
  shard2.Add("a", DType::kF32, {2}, data[0]);  // also in shard 1
  ASSERT_TRUE(shard2.Write(Path("model-00002-of-00002.safetensors")).ok());
  ExpectMentions(OpenError(), {"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors", "tensor \"a\""});
}

TEST_F(SafetensorsTest, ErrorNotADirectory) {
  Result<Checkpoint> ckpt = Checkpoint::Open(Path("nope"));
  ASSERT_FALSE(ckpt.ok());
  ExpectMentions(ckpt.status().message(), {"nope", "not a directory"});
}

// ---- Writer errors -------------------------------------------------------------

TEST_F(SafetensorsTest, WriterRejectsWrongByteCount) {
  SafetensorsWriter writer;
  writer.Add("w", DType::kF32, {3}, RandomBytes(8, 1));
  const Status s = writer.Write(Path("model.safetensors"));
  ASSERT_FALSE(s.ok());
  ExpectMentions(s.message(), {"model.safetensors", "tensor \"w\"", "needs 12 bytes, got 8"});
  EXPECT_FALSE(fs::exists(Path("model.safetensors")));
  EXPECT_FALSE(fs::exists(Path("model.safetensors.tmp")));
}

TEST_F(SafetensorsTest, WriterRejectsDuplicateName) {
  SafetensorsWriter writer;
  writer.Add("w", DType::kF32, {1}, RandomBytes(4, 1));
  writer.Add("w", DType::kF32, {1}, RandomBytes(4, 2));
  const Status s = writer.Write(Path("model.safetensors"));
  ASSERT_FALSE(s.ok());
  ExpectMentions(s.message(), {"model.safetensors", "tensor \"w\"", "added twice"});
}

TEST_F(SafetensorsTest, WriterRejectsNegativeDim) {
  SafetensorsWriter writer;
  writer.Add("w", DType::kF32, {-1}, std::vector<uint8_t>{});
  const Status s = writer.Write(Path("model.safetensors"));
  ASSERT_FALSE(s.ok());
  ExpectMentions(s.message(), {"model.safetensors", "tensor \"w\"", "negative"});
}

}  // namespace
}  // namespace latte
