// GGUF reader and writer: round trips (every metadata type, every tensor dtype, other
// alignments, split sets), and one test per damage class, each checking that the one-line
// message names the file and the problem. Damaged files are built byte by byte (Bytes)
// and parsed from buffers of their exact size, so AddressSanitizer sees any overread.
#include "base/gguf_file.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <initializer_list>
#include <limits>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

namespace latte {
namespace {

namespace fs = std::filesystem;

constexpr char kName[] = "model.gguf";  // what Parse names the buffer in messages

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

// Asserts `message` contains every one of `parts`.
void ExpectMentions(const std::string& message, std::initializer_list<std::string> parts) {
  for (const std::string& part : parts) {
    EXPECT_NE(message.find(part), std::string::npos)
        << "error \"" << message << "\" does not mention \"" << part << "\"";
  }
}

// A GGUF file built field by field, little-endian.
class Bytes {
 public:
  Bytes& U8(uint8_t v) { return Int(v, 1); }
  Bytes& U16(uint16_t v) { return Int(v, 2); }
  Bytes& U32(uint32_t v) { return Int(v, 4); }
  Bytes& U64(uint64_t v) { return Int(v, 8); }
  Bytes& Raw(const std::string& s) {
    s_ += s;
    return *this;
  }
  Bytes& Str(const std::string& s) { return U64(s.size()).Raw(s); }
  Bytes& Header(uint64_t n_tensors, uint64_t n_kv, uint32_t version = 3) {
    return Raw("GGUF").U32(version).U64(n_tensors).U64(n_kv);
  }
  // A metadata entry's key and type; the value follows.
  Bytes& Key(const std::string& key, GgufValueType type) { return Str(key).U32(static_cast<uint32_t>(type)); }
  Bytes& KvU32(const std::string& key, uint32_t v) { return Key(key, GgufValueType::kUint32).U32(v); }
  // ne innermost first, as the file stores it.
  Bytes& Tensor(const std::string& name, std::vector<uint64_t> ne, uint32_t ggml_type, uint64_t offset) {
    Str(name).U32(static_cast<uint32_t>(ne.size()));
    for (uint64_t d : ne) U64(d);
    return U32(ggml_type).U64(offset);
  }
  Bytes& PadTo(size_t alignment) {
    s_.append((alignment - s_.size() % alignment) % alignment, '\0');
    return *this;
  }
  Bytes& Random(size_t n, uint32_t seed) {
    const std::vector<uint8_t> r = RandomBytes(n, seed);
    s_.append(r.begin(), r.end());
    return *this;
  }
  const std::string& str() const { return s_; }
  size_t size() const { return s_.size(); }

 private:
  Bytes& Int(uint64_t v, int n) {
    for (int i = 0; i < n; ++i) s_ += static_cast<char>((v >> (8 * i)) & 0xff);
    return *this;
  }
  std::string s_;
};

// Bytes copied to a heap buffer of exactly their size, kept alive with the model.
struct Parsed {
  std::vector<uint8_t> buffer;
  Result<GgufModel> model = Status::Internal("not parsed");
};

std::unique_ptr<Parsed> ParseBytes(const std::string& bytes) {
  auto p = std::make_unique<Parsed>();
  p->buffer.assign(bytes.begin(), bytes.end());
  p->model = GgufModel::Parse(kName, p->buffer.data(), p->buffer.size());
  return p;
}

// Parses `bytes` expecting an error of `code`; returns its message after checking it is
// one line naming the file.
std::string ParseError(const std::string& bytes, StatusCode code = StatusCode::kDataLoss) {
  std::unique_ptr<Parsed> p = ParseBytes(bytes);
  EXPECT_FALSE(p->model.ok()) << "Parse unexpectedly succeeded";
  const Status& s = p->model.status();
  EXPECT_EQ(s.code(), code) << StatusCodeName(s.code()) << ": " << s.message();
  EXPECT_EQ(s.message().find('\n'), std::string::npos) << "error is not one line: " << s.message();
  EXPECT_EQ(s.message().rfind(std::string(kName) + ": ", 0), 0u) << "error does not name the file: " << s.message();
  return s.message();
}

class GgufTest : public testing::Test {
 protected:
  void SetUp() override {
    std::string templ = (fs::path(testing::TempDir()) / "gguf_test_XXXXXX").string();
    ASSERT_NE(mkdtemp(templ.data()), nullptr) << std::strerror(errno);
    dir_ = templ;
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  std::string Path(const std::string& name) const { return (fs::path(dir_) / name).string(); }

  std::string dir_;
};

// ---- ggml's types ----------------------------------------------------------------

TEST(GgufTypes, IdsAndBlocksMatchGgml) {
  struct Expected {
    uint32_t id;
    const char* name;
    int64_t block;
    size_t bytes;
  };
  // ggml.h's enum ggml_type and type_traits (blck_size, type_size).
  const Expected expected[] = {
      {0, "F32", 1, 4},         {1, "F16", 1, 2},         {2, "Q4_0", 32, 18},      {3, "Q4_1", 32, 20},
      {6, "Q5_0", 32, 22},      {7, "Q5_1", 32, 24},      {8, "Q8_0", 32, 34},      {9, "Q8_1", 32, 36},
      {10, "Q2_K", 256, 84},    {11, "Q3_K", 256, 110},   {12, "Q4_K", 256, 144},   {13, "Q5_K", 256, 176},
      {14, "Q6_K", 256, 210},   {15, "Q8_K", 256, 292},   {16, "IQ2_XXS", 256, 66}, {17, "IQ2_XS", 256, 74},
      {18, "IQ3_XXS", 256, 98}, {19, "IQ1_S", 256, 50},   {20, "IQ4_NL", 32, 18},   {21, "IQ3_S", 256, 110},
      {22, "IQ2_S", 256, 82},   {23, "IQ4_XS", 256, 136}, {24, "I8", 1, 1},         {25, "I16", 1, 2},
      {26, "I32", 1, 4},        {27, "I64", 1, 8},        {28, "F64", 1, 8},        {29, "IQ1_M", 256, 56},
      {30, "BF16", 1, 2},       {34, "TQ1_0", 256, 54},   {35, "TQ2_0", 256, 66},   {39, "MXFP4", 32, 17},
      {40, "NVFP4", 64, 36},
  };
  std::set<uint32_t> defined;
  for (const Expected& e : expected) {
    SCOPED_TRACE(e.name);
    defined.insert(e.id);
    EXPECT_EQ(GgmlTypeName(e.id), e.name);
    int64_t block = 0;
    size_t bytes = 0;
    ASSERT_TRUE(GgmlTypeBlock(e.id, &block, &bytes));
    EXPECT_EQ(block, e.block);
    EXPECT_EQ(bytes, e.bytes);
  }
  for (uint32_t id : {4u, 5u, 31u, 32u, 33u, 36u, 37u, 38u, 41u, 99u, 0xffffffffu}) {
    if (defined.count(id)) continue;
    int64_t block = 0;
    size_t bytes = 0;
    EXPECT_FALSE(GgmlTypeBlock(id, &block, &bytes)) << id;
    EXPECT_EQ(GgmlTypeName(id), "type " + std::to_string(id));
    EXPECT_EQ(DTypeFromGgmlType(id), std::nullopt);
  }
}

TEST(GgufTypes, DTypesMapBothWaysWithTheSameBlocks) {
  const std::vector<std::pair<DType, uint32_t>> mapped = {
      {DType::kF32, 0},      {DType::kF16, 1},    {DType::kBF16, 30},   {DType::kQ8_0, 8},    {DType::kQ4_0, 2},
      {DType::kQ4_K, 12},    {DType::kQ5_K, 13},  {DType::kQ6_K, 14},   {DType::kQ5_0, 6},    {DType::kQ5_1, 7},
      {DType::kQ3_K, 11},    {DType::kQ2_K, 10},  {DType::kIQ4_NL, 20}, {DType::kIQ4_XS, 23}, {DType::kIQ2_XXS, 16},
      {DType::kIQ3_XXS, 18}, {DType::kIQ1_S, 19},
  };
  for (const auto& [dtype, id] : mapped) {
    SCOPED_TRACE(std::string(DTypeName(dtype)));
    EXPECT_EQ(GgmlTypeFromDType(dtype), id);
    EXPECT_EQ(DTypeFromGgmlType(id), dtype);
    EXPECT_EQ(GgmlTypeName(id), DTypeName(dtype));
    int64_t block = 0;
    size_t bytes = 0;
    ASSERT_TRUE(GgmlTypeBlock(id, &block, &bytes));
    EXPECT_EQ(block, DTypeBlockElements(dtype));
    EXPECT_EQ(bytes, DTypeBlockBytes(dtype));
  }
  EXPECT_EQ(GgmlTypeFromDType(DType::kF8E4M3), std::nullopt);
  EXPECT_EQ(DTypeFromGgmlType(17), std::nullopt);  // IQ2_XS: known, not computed on
  EXPECT_EQ(GgufValueTypeName(GgufValueType::kFloat64), "float64");
  EXPECT_EQ(GgufValueTypeName(static_cast<GgufValueType>(13)), "unknown");
}

// ---- Round trips -----------------------------------------------------------------

TEST_F(GgufTest, RoundTripEveryMetadataType) {
  const int64_t i64_min = std::numeric_limits<int64_t>::min();
  const int64_t i64_max = std::numeric_limits<int64_t>::max();
  GgufWriter writer;
  writer.SetInt("u8", GgufValueType::kUint8, 255);
  writer.SetInt("i8", GgufValueType::kInt8, -128);
  writer.SetInt("u16", GgufValueType::kUint16, 65535);
  writer.SetInt("i16", GgufValueType::kInt16, -32768);
  writer.SetUint32("u32", 4294967295u);
  writer.SetInt("i32", GgufValueType::kInt32, std::numeric_limits<int32_t>::min());
  writer.SetInt("u64", GgufValueType::kUint64, i64_max);
  writer.SetInt("i64", GgufValueType::kInt64, i64_min);
  writer.SetFloat32("f32", 0.1f);
  GgufValue f64;
  f64.type = GgufValueType::kFloat64;
  f64.value = 0.1;
  writer.Set("f64", f64);
  writer.SetBool("yes", true);
  writer.SetBool("no", false);
  writer.SetString("name", "DeepSeek-V3 \xe2\x9c\x93");
  writer.SetString("empty", "");
  writer.SetString("binary", std::string("a\0b\n", 4));
  writer.SetIntArray("a.u8", GgufValueType::kUint8, {0, 7, 255});
  writer.SetIntArray("a.i8", GgufValueType::kInt8, {-128, 0, 127});
  writer.SetIntArray("a.u16", GgufValueType::kUint16, {0, 65535});
  writer.SetIntArray("a.i16", GgufValueType::kInt16, {-32768, 32767});
  writer.SetIntArray("a.u32", GgufValueType::kUint32, {0, 4294967295});
  writer.SetIntArray("a.i32", GgufValueType::kInt32, {-2147483648ll, 2147483647});
  writer.SetIntArray("a.u64", GgufValueType::kUint64, {0, i64_max});
  writer.SetIntArray("a.i64", GgufValueType::kInt64, {i64_min, -1, i64_max});
  writer.SetIntArray("a.empty", GgufValueType::kInt32, {});
  writer.SetFloat32Array("a.f32", {1.5f, -0.1f, 3e38f});
  GgufValue f64s;
  f64s.type = GgufValueType::kArray;
  f64s.array_type = GgufValueType::kFloat64;
  f64s.value = std::vector<double>{0.1, -1e300};
  writer.Set("a.f64", f64s);
  GgufValue bools;
  bools.type = GgufValueType::kArray;
  bools.array_type = GgufValueType::kBool;
  bools.value = std::vector<bool>{true, false, true};
  writer.Set("a.bool", bools);
  writer.SetStringArray("a.str", {"<s>", "", "\xe4\xb8\xad"});
  writer.SetStringArray("a.str_empty", {});
  ASSERT_TRUE(writer.Write(Path("m.gguf")).ok());
  EXPECT_FALSE(fs::exists(Path("m.gguf.tmp")));

  Result<GgufModel> m = GgufModel::Open(Path("m.gguf"));
  ASSERT_TRUE(m.ok()) << m.status().message();
  EXPECT_EQ(m->version(), 3u);
  EXPECT_EQ(m->metadata().size(), 29u);  // no general.alignment at the default 32
  EXPECT_EQ(m->Find("general.alignment"), nullptr);
  EXPECT_TRUE(m->tensors().empty());
  EXPECT_EQ(m->files(), std::vector<std::string>{Path("m.gguf")});

  const std::vector<std::pair<std::string, int64_t>> ints = {
      {"u8", 255},           {"i8", -128},           {"u16", 65535},   {"i16", -32768},
      {"u32", 4294967295ll}, {"i32", -2147483648ll}, {"u64", i64_max}, {"i64", i64_min}};
  const GgufValueType int_types[] = {GgufValueType::kUint8,  GgufValueType::kInt8,   GgufValueType::kUint16,
                                     GgufValueType::kInt16,  GgufValueType::kUint32, GgufValueType::kInt32,
                                     GgufValueType::kUint64, GgufValueType::kInt64};
  for (size_t i = 0; i < ints.size(); ++i) {
    SCOPED_TRACE(ints[i].first);
    ASSERT_NE(m->Find(ints[i].first), nullptr);
    EXPECT_EQ(m->Find(ints[i].first)->type, int_types[i]);
    Result<int64_t> v = m->GetInt(ints[i].first);
    ASSERT_TRUE(v.ok()) << v.status().message();
    EXPECT_EQ(*v, ints[i].second);
    Result<double> f = m->GetFloat(ints[i].first);  // integers read as numbers too
    ASSERT_TRUE(f.ok());
    EXPECT_EQ(*f, static_cast<double>(ints[i].second));
  }
  EXPECT_EQ(m->Find("f32")->type, GgufValueType::kFloat32);
  EXPECT_EQ(m->GetFloat("f32").value(), static_cast<double>(0.1f));
  EXPECT_EQ(m->Find("f64")->type, GgufValueType::kFloat64);
  EXPECT_EQ(m->GetFloat("f64").value(), 0.1);
  EXPECT_EQ(m->GetBool("yes").value(), true);
  EXPECT_EQ(m->GetBool("no").value(), false);
  EXPECT_EQ(m->GetString("name").value(), "DeepSeek-V3 \xe2\x9c\x93");
  EXPECT_EQ(m->GetString("empty").value(), "");
  EXPECT_EQ(m->GetString("binary").value(), std::string("a\0b\n", 4));

  EXPECT_EQ(m->GetIntArray("a.u8").value(), (std::vector<int64_t>{0, 7, 255}));
  EXPECT_EQ(m->Find("a.u8")->array_type, GgufValueType::kUint8);
  EXPECT_EQ(m->GetIntArray("a.i8").value(), (std::vector<int64_t>{-128, 0, 127}));
  EXPECT_EQ(m->GetIntArray("a.u16").value(), (std::vector<int64_t>{0, 65535}));
  EXPECT_EQ(m->GetIntArray("a.i16").value(), (std::vector<int64_t>{-32768, 32767}));
  EXPECT_EQ(m->GetIntArray("a.u32").value(), (std::vector<int64_t>{0, 4294967295}));
  EXPECT_EQ(m->GetIntArray("a.i32").value(), (std::vector<int64_t>{-2147483648ll, 2147483647}));
  EXPECT_EQ(m->GetIntArray("a.u64").value(), (std::vector<int64_t>{0, i64_max}));
  EXPECT_EQ(m->Find("a.u64")->array_type, GgufValueType::kUint64);
  EXPECT_EQ(m->GetIntArray("a.i64").value(), (std::vector<int64_t>{i64_min, -1, i64_max}));
  EXPECT_EQ(m->GetIntArray("a.empty").value(), std::vector<int64_t>{});
  EXPECT_EQ(m->Find("a.empty")->array_type, GgufValueType::kInt32);
  EXPECT_EQ(m->GetFloatArray("a.f32").value(),
            (std::vector<double>{1.5, static_cast<double>(-0.1f), static_cast<double>(3e38f)}));
  EXPECT_EQ(m->Find("a.f32")->array_type, GgufValueType::kFloat32);
  EXPECT_EQ(m->GetFloatArray("a.f64").value(), (std::vector<double>{0.1, -1e300}));
  EXPECT_EQ(m->GetFloatArray("a.u8").value(), (std::vector<double>{0, 7, 255}));  // integers as numbers
  EXPECT_EQ(std::get<std::vector<bool>>(m->Find("a.bool")->value), (std::vector<bool>{true, false, true}));
  EXPECT_EQ(m->GetStringArray("a.str").value(), (std::vector<std::string>{"<s>", "", "\xe4\xb8\xad"}));
  EXPECT_EQ(m->GetStringArray("a.str_empty").value(), std::vector<std::string>{});
}

// Metadata copied value by value (Set) from a file read reads back the same.
TEST_F(GgufTest, SetCopiesMetadataAsRead) {
  GgufWriter writer;
  writer.SetInt("a", GgufValueType::kInt16, -7);
  writer.SetFloat32Array("b", {0.5f, 2.0f});
  writer.SetStringArray("c", {"x", "y"});
  writer.SetBool("d", true);
  ASSERT_TRUE(writer.Write(Path("a.gguf")).ok());
  Result<GgufModel> a = GgufModel::Open(Path("a.gguf"));
  ASSERT_TRUE(a.ok()) << a.status().message();

  GgufWriter copy;
  for (const auto& [key, value] : a->metadata()) copy.Set(key, value);
  ASSERT_TRUE(copy.Write(Path("b.gguf")).ok());
  EXPECT_EQ(ReadFile(Path("a.gguf")), ReadFile(Path("b.gguf")));  // keys were already in order
}

TEST_F(GgufTest, RoundTripEverySupportedTensorDType) {
  const DType dtypes[] = {DType::kF32,  DType::kF16,  DType::kBF16, DType::kQ8_0,
                          DType::kQ4_0, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K};
  struct Want {
    std::string name;
    DType dtype;
    std::vector<int64_t> shape;
    std::vector<uint8_t> bytes;
  };
  std::vector<Want> want;
  uint32_t seed = 1;
  for (DType dtype : dtypes) {
    const int64_t block = DTypeBlockElements(dtype);
    // A matrix, and a vector, a 3-D and a 4-D tensor of each.
    for (const std::vector<int64_t>& shape :
         std::vector<std::vector<int64_t>>{{3, 2 * block}, {block}, {2, 3, block}, {2, 1, 3, 2 * block}}) {
      int64_t rows = 1;
      for (size_t i = 0; i + 1 < shape.size(); ++i) rows *= shape[i];
      const size_t bytes = DTypeRowBytes(dtype, shape.back()) * static_cast<size_t>(rows);
      want.push_back({std::string(DTypeName(dtype)) + "." + std::to_string(shape.size()) + "d", dtype, shape,
                      RandomBytes(bytes, seed++)});
    }
  }
  GgufWriter writer;
  for (const Want& w : want) writer.AddTensor(w.name, w.dtype, w.shape, w.bytes);
  writer.AddTensor("empty", DType::kF32, {0, 4}, std::vector<uint8_t>{});
  ASSERT_TRUE(writer.Write(Path("m.gguf")).ok());

  Result<GgufModel> m = GgufModel::Open(Path("m.gguf"));
  ASSERT_TRUE(m.ok()) << m.status().message();
  ASSERT_EQ(m->tensors().size(), want.size() + 1);
  size_t total = 0;
  for (const Want& w : want) {
    SCOPED_TRACE(w.name);
    const GgufTensor* t = m->FindTensor(w.name);
    ASSERT_NE(t, nullptr);
    EXPECT_EQ(t->dtype, w.dtype);
    EXPECT_EQ(t->ggml_type, *GgmlTypeFromDType(w.dtype));
    EXPECT_EQ(t->shape, w.shape);
    EXPECT_EQ(t->file, Path("m.gguf"));
    int64_t elements = 1;
    for (int64_t d : w.shape) elements *= d;
    EXPECT_EQ(t->NumElements(), elements);
    ASSERT_EQ(t->nbytes, w.bytes.size());
    EXPECT_EQ(std::memcmp(t->data, w.bytes.data(), t->nbytes), 0);
    total += t->nbytes;
  }
  EXPECT_EQ(m->TensorBytes(), total);
  EXPECT_EQ(m->FindTensor("empty")->nbytes, 0u);
  EXPECT_EQ(m->FindTensor("empty")->NumElements(), 0);
  EXPECT_EQ(m->FindTensor("absent"), nullptr);
  // Tensors come in offset order, each at a multiple of 32 from the file's start, and
  // the file ends padded (as ggml writes it).
  const std::string file = ReadFile(Path("m.gguf"));
  std::unique_ptr<Parsed> p = ParseBytes(file);
  ASSERT_TRUE(p->model.ok()) << p->model.status().message();
  const uint8_t* previous = nullptr;
  for (const GgufTensor& t : p->model->tensors()) {
    EXPECT_EQ((t.data - p->buffer.data()) % 32, 0) << t.name;
    EXPECT_GE(t.data, previous) << t.name;
    previous = t.data;
  }
  EXPECT_EQ(file.size() % 32, 0u);
}

// Types latte does not compute on still read, with their bytes bounded: dtype nullopt.
TEST_F(GgufTest, TypesLatteDoesNotComputeOnRead) {
  GgufWriter writer;
  std::vector<std::pair<uint32_t, std::vector<uint8_t>>> want;
  for (uint32_t id = 0; id < 64; ++id) {
    int64_t block = 0;
    size_t bytes = 0;
    if (!GgmlTypeBlock(id, &block, &bytes)) continue;
    want.emplace_back(id, RandomBytes(3 * 2 * bytes, id + 100));
    writer.AddRawTensor("t" + std::to_string(id), id, {3, 2 * block}, want.back().second);
  }
  ASSERT_EQ(want.size(), 33u);
  ASSERT_TRUE(writer.Write(Path("m.gguf")).ok());
  Result<GgufModel> m = GgufModel::Open(Path("m.gguf"));
  ASSERT_TRUE(m.ok()) << m.status().message();
  for (const auto& [id, bytes] : want) {
    SCOPED_TRACE(GgmlTypeName(id));
    const GgufTensor* t = m->FindTensor("t" + std::to_string(id));
    ASSERT_NE(t, nullptr);
    EXPECT_EQ(t->ggml_type, id);
    EXPECT_EQ(t->dtype, DTypeFromGgmlType(id));
    ASSERT_EQ(t->nbytes, bytes.size());
    EXPECT_EQ(std::memcmp(t->data, bytes.data(), bytes.size()), 0);
  }
  EXPECT_EQ(m->FindTensor("t17")->dtype, std::nullopt);  // IQ2_XS
  EXPECT_EQ(m->FindTensor("t39")->dtype, std::nullopt);  // MXFP4
}

TEST_F(GgufTest, RoundTripAlignmentsOtherThan32) {
  for (uint32_t alignment : {1u, 8u, 64u, 4096u}) {
    SCOPED_TRACE("alignment " + std::to_string(alignment));
    const std::vector<uint8_t> a = RandomBytes(6, alignment);  // F16 [3]: odd sizes push off the alignment
    const std::vector<uint8_t> b = RandomBytes(4 * 34, alignment + 1);
    GgufWriter writer;
    writer.SetString("general.name", "x");
    writer.AddTensor("a", DType::kF16, {3}, a);
    writer.AddTensor("b", DType::kQ8_0, {2, 64}, b);
    writer.set_alignment(alignment);
    const std::string path = Path("m" + std::to_string(alignment) + ".gguf");
    ASSERT_TRUE(writer.Write(path).ok());
    const std::string file = ReadFile(path);
    EXPECT_EQ(file.size() % alignment, 0u);
    std::unique_ptr<Parsed> p = ParseBytes(file);
    ASSERT_TRUE(p->model.ok()) << p->model.status().message();
    const GgufModel& m = *p->model;
    if (alignment == 32) {
      EXPECT_EQ(m.Find("general.alignment"), nullptr);
    } else {
      ASSERT_NE(m.Find("general.alignment"), nullptr);
      EXPECT_EQ(m.Find("general.alignment")->type, GgufValueType::kUint32);
      EXPECT_EQ(m.GetInt("general.alignment").value(), alignment);
    }
    for (const GgufTensor& t : m.tensors()) EXPECT_EQ((t.data - p->buffer.data()) % alignment, 0) << t.name;
    ASSERT_EQ(m.FindTensor("a")->nbytes, a.size());
    EXPECT_EQ(std::memcmp(m.FindTensor("a")->data, a.data(), a.size()), 0);
    ASSERT_EQ(m.FindTensor("b")->nbytes, b.size());
    EXPECT_EQ(std::memcmp(m.FindTensor("b")->data, b.data(), b.size()), 0);
  }
}

TEST_F(GgufTest, FillCallbacksProduceBytesAtWriteTime) {
  const std::vector<uint8_t> big = RandomBytes(16 * 210, 7);
  const std::vector<uint8_t> small = RandomBytes(2 * 5, 8);
  int calls = 0;
  GgufWriter writer;
  writer.AddTensor("big", DType::kQ6_K, {4, 1024}, [&](uint8_t* dst, size_t n) {
    ++calls;
    ASSERT_EQ(n, big.size());
    std::memcpy(dst, big.data(), n);
  });
  writer.AddTensor("small", DType::kBF16, {5}, [&](uint8_t* dst, size_t n) {
    ++calls;
    ASSERT_EQ(n, small.size());
    std::memcpy(dst, small.data(), n);
  });
  EXPECT_EQ(calls, 0);
  ASSERT_TRUE(writer.Write(Path("m.gguf")).ok());
  EXPECT_EQ(calls, 2);
  Result<GgufModel> m = GgufModel::Open(Path("m.gguf"), FileResidency::kHugePageCopy);
  ASSERT_TRUE(m.ok()) << m.status().message();
  ASSERT_EQ(m->FindTensor("big")->nbytes, big.size());
  EXPECT_EQ(std::memcmp(m->FindTensor("big")->data, big.data(), big.size()), 0);
  ASSERT_EQ(m->FindTensor("small")->nbytes, small.size());
  EXPECT_EQ(std::memcmp(m->FindTensor("small")->data, small.data(), small.size()), 0);
}

TEST_F(GgufTest, Version2ReadsAsVersion3) {
  GgufWriter writer;
  writer.SetString("general.architecture", "deepseek2");
  writer.AddTensor("w", DType::kF32, {2, 2}, RandomBytes(16, 3));
  ASSERT_TRUE(writer.Write(Path("m.gguf")).ok());
  std::string file = ReadFile(Path("m.gguf"));
  ASSERT_EQ(file[4], 3);
  file[4] = 2;
  std::unique_ptr<Parsed> p = ParseBytes(file);
  ASSERT_TRUE(p->model.ok()) << p->model.status().message();
  EXPECT_EQ(p->model->version(), 2u);
  EXPECT_EQ(p->model->GetString("general.architecture").value(), "deepseek2");
  EXPECT_EQ(p->model->FindTensor("w")->nbytes, 16u);
}

TEST_F(GgufTest, GettersNameKeyAndTypes) {
  GgufWriter writer;
  writer.SetString("s", "text");
  writer.SetInt("u8", GgufValueType::kUint8, 3);
  writer.SetIntArray("ints", GgufValueType::kInt32, {1, 2});
  writer.SetStringArray("strs", {"a"});
  writer.SetBool("b", true);
  ASSERT_TRUE(writer.Write(Path("m.gguf")).ok());
  Result<GgufModel> m = GgufModel::Open(Path("m.gguf"));
  ASSERT_TRUE(m.ok()) << m.status().message();

  Result<int64_t> absent = m->GetInt("llama.block_count");
  ASSERT_FALSE(absent.ok());
  EXPECT_EQ(absent.status().code(), StatusCode::kNotFound);
  ExpectMentions(absent.status().message(), {Path("m.gguf"), "\"llama.block_count\""});

  auto expect_wrong = [&](const Status& s, std::initializer_list<std::string> parts) {
    EXPECT_EQ(s.code(), StatusCode::kDataLoss) << s.message();
    ExpectMentions(s.message(), {Path("m.gguf")});
    ExpectMentions(s.message(), parts);
  };
  expect_wrong(m->GetInt("s").status(), {"\"s\"", "holds string", "wanted an integer"});
  expect_wrong(m->GetFloat("b").status(), {"\"b\"", "holds bool", "wanted a number"});
  expect_wrong(m->GetBool("u8").status(), {"\"u8\"", "holds uint8", "wanted a bool"});
  expect_wrong(m->GetString("ints").status(), {"\"ints\"", "holds array of int32", "wanted a string"});
  expect_wrong(m->GetStringArray("ints").status(), {"\"ints\"", "holds array of int32", "wanted an array of string"});
  expect_wrong(m->GetIntArray("strs").status(), {"\"strs\"", "holds array of string", "wanted an array of integers"});
  expect_wrong(m->GetFloatArray("s").status(), {"\"s\"", "holds string", "wanted an array of numbers"});
  expect_wrong(m->GetIntArray("u8").status(), {"\"u8\"", "holds uint8"});
  EXPECT_EQ(m->GetIntArray("ints").value(), (std::vector<int64_t>{1, 2}));
}

// ---- The writer's refusals ---------------------------------------------------------

TEST_F(GgufTest, WriterRefusesWhatItCannotWrite) {
  const std::string path = Path("m.gguf");
  auto expect_refused = [&](const GgufWriter& w, std::initializer_list<std::string> parts) {
    const Status s = w.Write(path);
    ASSERT_FALSE(s.ok());
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.message();
    ExpectMentions(s.message(), {path});
    ExpectMentions(s.message(), parts);
    EXPECT_FALSE(fs::exists(path));
    EXPECT_FALSE(fs::exists(path + ".tmp"));
  };
  {
    GgufWriter w;
    w.SetUint32("k", 1);
    w.SetString("k", "again");
    expect_refused(w, {"\"k\"", "set twice"});
  }
  {
    GgufWriter w;
    w.AddTensor("t", DType::kF32, {1}, RandomBytes(4, 1));
    w.AddTensor("t", DType::kF32, {1}, RandomBytes(4, 2));
    expect_refused(w, {"tensor \"t\"", "added twice"});
  }
  {
    GgufWriter w;
    w.AddTensor("t", DType::kBF16, {3}, RandomBytes(8, 1));
    expect_refused(w, {"tensor \"t\"", "needs 6 bytes, got 8"});
  }
  {
    GgufWriter w;
    w.AddTensor("t", DType::kQ4_K, {2, 128}, RandomBytes(144, 1));
    expect_refused(w, {"tensor \"t\"", "[2, 128]", "256-element blocks"});
  }
  {
    GgufWriter w;
    w.AddTensor("t", DType::kF8E4M3, {4}, RandomBytes(4, 1));
    expect_refused(w, {"tensor \"t\"", "no type for F8_E4M3"});
  }
  {
    GgufWriter w;
    w.AddTensor("t", DType::kF32, {1, 1, 1, 1, 1}, RandomBytes(4, 1));
    expect_refused(w, {"tensor \"t\"", "5 dims"});
  }
  {
    GgufWriter w;
    w.AddTensor(std::string(64, 'n'), DType::kF32, {1}, RandomBytes(4, 1));
    expect_refused(w, {"64 bytes", "at most 63"});
  }
  for (uint32_t alignment : {0u, 3u, 48u}) {
    GgufWriter w;
    w.set_alignment(alignment);
    expect_refused(w, {"alignment " + std::to_string(alignment), "power of two"});
  }
  {
    GgufWriter w;
    w.SetUint32("general.alignment", 64);  // the writer aligns to 32
    expect_refused(w, {"\"general.alignment\"", "set_alignment"});
  }
  {
    GgufWriter w;
    w.SetInt("k", GgufValueType::kUint8, 256);
    expect_refused(w, {"\"k\"", "256 does not fit uint8"});
  }
  {
    GgufWriter w;
    w.SetIntArray("k", GgufValueType::kInt16, {1, -40000});
    expect_refused(w, {"\"k\"", "-40000 does not fit int16"});
  }
  {
    GgufWriter w;
    w.SetInt("k", GgufValueType::kString, 1);
    expect_refused(w, {"\"k\"", "does not hold what its type string says"});
  }
  {
    GgufWriter w;
    w.SetIntArray("k", GgufValueType::kArray, {});
    expect_refused(w, {"\"k\"", "array element type 9"});
  }
}

// ---- Damage: header and counts -----------------------------------------------------

TEST_F(GgufTest, DamageEmptyFile) {
  WriteFile(Path("empty.gguf"), "");
  Result<GgufModel> m = GgufModel::Open(Path("empty.gguf"));
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), StatusCode::kDataLoss);
  ExpectMentions(m.status().message(), {Path("empty.gguf"), "file is 0 bytes", "too short"});
  ExpectMentions(ParseError(""), {"0 bytes"});
}

TEST_F(GgufTest, DamageMissingFile) {
  Result<GgufModel> m = GgufModel::Open(Path("absent.gguf"));
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), StatusCode::kNotFound);
  ExpectMentions(m.status().message(), {Path("absent.gguf")});
}

TEST_F(GgufTest, DamageBadMagic) {
  ExpectMentions(ParseError(Bytes().Raw("GGML").U32(3).U64(0).U64(0).str()),
                 {"not a GGUF file", "starts with \"GGML\""});
  ExpectMentions(ParseError(std::string("\x89PNG\r\n", 6)), {"not a GGUF file", "\"\\x89PNG\""});
}

TEST_F(GgufTest, DamageUnsupportedVersion) {
  ExpectMentions(ParseError(Bytes().Header(0, 0, 1).str(), StatusCode::kUnimplemented),
                 {"GGUF version 1", "reads 2 and 3"});
  ExpectMentions(ParseError(Bytes().Header(0, 0, 4).str(), StatusCode::kUnimplemented),
                 {"GGUF version 4", "reads 2 and 3"});
  ExpectMentions(ParseError(Bytes().Header(0, 0, 0).str(), StatusCode::kUnimplemented), {"GGUF version 0"});
  ExpectMentions(ParseError(Bytes().Header(0, 0, 0x03000000).str(), StatusCode::kUnimplemented), {"big-endian"});
}

TEST_F(GgufTest, DamageHugeCounts) {
  ExpectMentions(ParseError(Bytes().Header(0, uint64_t{1} << 62).str()),
                 {"claims 4611686018427387904 metadata entries", "0 bytes after the header"});
  ExpectMentions(ParseError(Bytes().Header(~uint64_t{0}, 0).Random(100, 1).str()),
                 {"claims 18446744073709551615 tensors", "100 bytes", "at most 3 tensor infos"});
  ExpectMentions(ParseError(Bytes().Header(0, 10).KvU32("a", 1).str()), {"claims 10 metadata entries"});
}

// ---- Damage: metadata --------------------------------------------------------------

TEST_F(GgufTest, DamageHugeStringLength) {
  ExpectMentions(ParseError(Bytes().Header(0, 1).U64(uint64_t{1} << 60).Raw("general.name").U32(8).str()),
                 {"metadata entry 0 of 1", "key length 1152921504606846976 at offset 24", "bytes left"});
  ExpectMentions(
      ParseError(Bytes().Header(0, 1).Key("general.name", GgufValueType::kString).U64(uint64_t{1} << 60).str()),
      {"metadata key \"general.name\"", "string length 1152921504606846976", "0 bytes left"});
  ExpectMentions(ParseError(Bytes().Header(1, 0).U64(~uint64_t{0}).Random(40, 2).str()),
                 {"tensor info 0 of 1", "tensor name length 18446744073709551615"});
  // A string array's strings are bounded one by one too.
  ExpectMentions(ParseError(Bytes()
                                .Header(0, 1)
                                .Key("tokenizer.ggml.tokens", GgufValueType::kArray)
                                .U32(8)
                                .U64(2)
                                .Str("a")
                                .U64(uint64_t{1} << 40)
                                .Raw("b")
                                .str()),
                 {"\"tokenizer.ggml.tokens\"", "string length 1099511627776", "1 bytes left"});
}

TEST_F(GgufTest, DamageHugeArrayCount) {
  ExpectMentions(ParseError(Bytes()
                                .Header(0, 1)
                                .Key("tokenizer.ggml.token_type", GgufValueType::kArray)
                                .U32(static_cast<uint32_t>(GgufValueType::kUint8))
                                .U64(uint64_t{1} << 60)
                                .Random(16, 3)
                                .str()),
                 {"\"tokenizer.ggml.token_type\"", "array of 1152921504606846976 uint8", "16 bytes left"});
  ExpectMentions(ParseError(Bytes()
                                .Header(0, 1)
                                .Key("tokenizer.ggml.tokens", GgufValueType::kArray)
                                .U32(static_cast<uint32_t>(GgufValueType::kString))
                                .U64(3)
                                .Str("a")
                                .Str("b")
                                .str()),
                 {"array of 3 string", "at least 8 bytes each", "more than the 18 bytes left"});
}

TEST_F(GgufTest, DamageBadValueType) {
  ExpectMentions(ParseError(Bytes().Header(0, 1).Str("general.name").U32(13).U64(0).str()),
                 {"metadata key \"general.name\"", "value type 13", "not a GGUF value type"});
  ExpectMentions(ParseError(Bytes().Header(0, 1).Key("a", GgufValueType::kArray).U32(99).U64(0).str()),
                 {"metadata key \"a\"", "array element type 99"});
}

TEST_F(GgufTest, DamageNestedArrayIsUnimplemented) {
  ExpectMentions(ParseError(Bytes()
                                .Header(0, 1)
                                .Key("nested", GgufValueType::kArray)
                                .U32(static_cast<uint32_t>(GgufValueType::kArray))
                                .U64(0)
                                .str(),
                            StatusCode::kUnimplemented),
                 {"metadata key \"nested\"", "array of arrays"});
}

TEST_F(GgufTest, DamageUint64AboveInt64Max) {
  ExpectMentions(ParseError(Bytes().Header(0, 1).Key("big", GgufValueType::kUint64).U64(uint64_t{1} << 63).str(),
                            StatusCode::kUnimplemented),
                 {"metadata key \"big\"", "uint64 value 9223372036854775808"});
}

TEST_F(GgufTest, DamageBoolNeitherZeroNorOne) {
  ExpectMentions(ParseError(Bytes().Header(0, 1).Key("flag", GgufValueType::kBool).U8(2).str()),
                 {"metadata key \"flag\"", "bool value at offset", "is 2"});
}

TEST_F(GgufTest, DamageDuplicateKey) {
  ExpectMentions(ParseError(Bytes().Header(0, 2).KvU32("llama.block_count", 1).KvU32("llama.block_count", 2).str()),
                 {"metadata key \"llama.block_count\" appears twice"});
}

TEST_F(GgufTest, DamageBadAlignment) {
  for (uint32_t alignment : {0u, 3u, 24u}) {
    ExpectMentions(ParseError(Bytes().Header(0, 1).KvU32("general.alignment", alignment).str()),
                   {"\"general.alignment\" is " + std::to_string(alignment), "not a power of two"});
  }
  ExpectMentions(ParseError(Bytes().Header(0, 1).Key("general.alignment", GgufValueType::kUint64).U64(64).str()),
                 {"\"general.alignment\" holds uint64, not uint32"});
  ExpectMentions(ParseError(Bytes().Header(0, 1).Key("general.alignment", GgufValueType::kString).Str("32").str()),
                 {"\"general.alignment\" holds string, not uint32"});
}

// Key names from the file are quoted with their control bytes escaped: one line.
TEST_F(GgufTest, DamageHostileNamesStayOneLine) {
  const std::string key = "evil\nkey\"" + std::string(300, 'x');
  const std::string message = ParseError(Bytes().Header(0, 1).Key(key, GgufValueType::kBool).U8(7).str());
  ExpectMentions(message, {"\"evil\\x0akey\\\"", "(309 bytes)"});
  EXPECT_LT(message.size(), 300u);
}

// ---- Damage: tensor infos ----------------------------------------------------------

// One tensor "w" of `ne` and `type` at offset 0 with `data_bytes` random data bytes.
std::string OneTensor(std::vector<uint64_t> ne, uint32_t type, size_t data_bytes, uint64_t offset = 0) {
  return Bytes().Header(1, 0).Tensor("w", std::move(ne), type, offset).PadTo(32).Random(data_bytes, 9).str();
}

TEST_F(GgufTest, DamageUnknownGgmlType) {
  ExpectMentions(ParseError(OneTensor({4}, 99, 64)), {"tensor \"w\"", "ggml type 99", "not one ggml defines"});
  ExpectMentions(ParseError(OneTensor({32}, 31, 64)), {"tensor \"w\"", "ggml type 31"});  // Q4_0_4_4: removed
}

TEST_F(GgufTest, DamageNDims) {
  ExpectMentions(ParseError(OneTensor({}, 0, 64)), {"tensor \"w\"", "n_dims", "is 0", "1 to 4"});
  ExpectMentions(ParseError(OneTensor({1, 1, 1, 1, 1}, 0, 64)), {"tensor \"w\"", "is 5", "1 to 4"});
  ExpectMentions(ParseError(Bytes().Header(1, 0).Str("w").U32(0xffffffff).Random(40, 1).str()),
                 {"tensor \"w\"", "is 4294967295"});
}

TEST_F(GgufTest, DamageInnermostDimNotWholeBlocks) {
  ExpectMentions(ParseError(OneTensor({100, 2}, 12, 1024)),
                 {"tensor \"w\"", "[2, 100] of Q4_K", "innermost dim 100", "256-element blocks"});
  ExpectMentions(ParseError(OneTensor({48}, 8, 64)), {"tensor \"w\"", "innermost dim 48", "32-element blocks"});
}

TEST_F(GgufTest, DamageDimsTooLarge) {
  ExpectMentions(ParseError(OneTensor({4, uint64_t{1} << 63}, 0, 64)), {"tensor \"w\"", "ne[1]", "not a size"});
  ExpectMentions(ParseError(OneTensor({uint64_t{1} << 32, uint64_t{1} << 32}, 0, 64)),
                 {"tensor \"w\"", "2^63 or more elements"});
  // 0 elements, but the product of the other dims overflows (NumElements multiplies in order).
  ExpectMentions(ParseError(OneTensor({0, uint64_t{1} << 62, 2}, 0, 64)), {"tensor \"w\"", "2^63 or more elements"});
  ExpectMentions(ParseError(OneTensor({uint64_t{1} << 62}, 0, 64)), {"tensor \"w\"", "overflows a byte count"});
  ExpectMentions(ParseError(OneTensor({uint64_t{1} << 61}, 28, 64)), {"tensor \"w\"", "F64 overflows a byte count"});
}

TEST_F(GgufTest, DamageOffsetMisaligned) {
  ExpectMentions(ParseError(OneTensor({4}, 0, 64, 4)),
                 {"tensor \"w\"", "offset 4 is not a multiple of the alignment 32"});
  // Under general.alignment = 64, 32 is misaligned.
  ExpectMentions(
      ParseError(
          Bytes().Header(1, 1).KvU32("general.alignment", 64).Tensor("w", {4}, 0, 32).PadTo(64).Random(64, 1).str()),
      {"tensor \"w\"", "offset 32 is not a multiple of the alignment 64"});
}

TEST_F(GgufTest, DamageOffsetOrSizePastTheEnd) {
  ExpectMentions(ParseError(OneTensor({4}, 0, 64, uint64_t{1} << 40)),
                 {"tensor \"w\"", "offset 1099511627776", "past the end of the file (size 128)"});
  ExpectMentions(ParseError(OneTensor({4}, 0, 64, ~uint64_t{31})), {"tensor \"w\"", "past the end of the file"});
  // The header (64 bytes) is followed by 64 data bytes: 80 floats need 320.
  ExpectMentions(ParseError(OneTensor({80}, 0, 64)),
                 {"tensor \"w\" data [64, 384) runs past the end of the file (size 128)"});
  ExpectMentions(ParseError(OneTensor({8, 4}, 30, 64, 32)),
                 {"tensor \"w\" data [128, 192) runs past the end of the file (size 160)"});
}

TEST_F(GgufTest, DamageDataSectionPastTheEnd) {
  // The tensor infos end at 57; the data section would start at 64.
  ExpectMentions(ParseError(Bytes().Header(1, 0).Tensor("w", {0}, 0, 0).str()),
                 {"data section starts at 64", "header's end, 57", "size 57"});
  // Without tensors a file may end before the padding.
  std::unique_ptr<Parsed> p = ParseBytes(Bytes().Header(0, 1).KvU32("a", 1).str());
  EXPECT_TRUE(p->model.ok()) << p->model.status().message();
}

TEST_F(GgufTest, DamageOverlappingTensors) {
  ExpectMentions(
      ParseError(
          Bytes().Header(2, 0).Tensor("first", {16}, 0, 0).Tensor("second", {16}, 0, 32).PadTo(32).Random(96, 4).str()),
      {"tensors \"first\" [", "and \"second\" [", "share bytes"});
  ExpectMentions(ParseError(Bytes()
                                .Header(3, 0)
                                .Tensor("a", {8}, 0, 0)
                                .Tensor("b", {8}, 0, 32)
                                .Tensor("c", {8}, 0, 32)
                                .PadTo(32)
                                .Random(64, 4)
                                .str()),
                 {"\"b\"", "\"c\"", "share bytes"});
  // Empty tensors share no bytes, wherever they lie.
  std::unique_ptr<Parsed> p = ParseBytes(Bytes()
                                             .Header(3, 0)
                                             .Tensor("a", {8}, 0, 0)
                                             .Tensor("e1", {0}, 0, 0)
                                             .Tensor("e2", {0, 8}, 0, 32)
                                             .PadTo(32)
                                             .Random(32, 4)
                                             .str());
  EXPECT_TRUE(p->model.ok()) << p->model.status().message();
}

TEST_F(GgufTest, DamageDuplicateTensorName) {
  ExpectMentions(ParseError(Bytes()
                                .Header(2, 0)
                                .Tensor("blk.0.attn_norm.weight", {8}, 0, 0)
                                .Tensor("blk.0.attn_norm.weight", {8}, 0, 32)
                                .PadTo(32)
                                .Random(64, 5)
                                .str()),
                 {"tensor \"blk.0.attn_norm.weight\" appears twice"});
}

// A valid file with metadata of every kind and three tensors, cut at every length short
// of its last tensor's end: every cut is an error (never a crash or an overread), and
// cuts in the trailing padding still read.
TEST_F(GgufTest, DamageTruncatedAtEveryLength) {
  GgufWriter writer;
  writer.SetString("general.architecture", "deepseek2");
  writer.SetUint32("deepseek2.block_count", 3);
  writer.SetFloat32("deepseek2.rope.freq_base", 10000.0f);
  writer.SetBool("tokenizer.ggml.add_bos_token", true);
  writer.SetStringArray("tokenizer.ggml.tokens", {"<s>", "</s>", "hello"});
  writer.SetFloat32Array("tokenizer.ggml.scores", {0.0f, -1.0f, -2.5f});
  writer.SetIntArray("tokenizer.ggml.token_type", GgufValueType::kInt32, {3, 3, 1});
  writer.AddTensor("token_embd.weight", DType::kQ8_0, {3, 32}, RandomBytes(3 * 34, 1));
  writer.AddTensor("blk.0.attn_norm.weight", DType::kF32, {5}, RandomBytes(20, 2));
  writer.AddTensor("output.weight", DType::kQ4_K, {1, 256}, RandomBytes(144, 3));
  ASSERT_TRUE(writer.Write(Path("m.gguf")).ok());
  const std::string file = ReadFile(Path("m.gguf"));
  std::unique_ptr<Parsed> whole = ParseBytes(file);
  ASSERT_TRUE(whole->model.ok()) << whole->model.status().message();
  size_t end = 0;
  for (const GgufTensor& t : whole->model->tensors()) {
    end = std::max(end, static_cast<size_t>(t.data - whole->buffer.data()) + t.nbytes);
  }
  ASSERT_LT(end, file.size());  // the last tensor is padded

  std::set<std::string> kinds;
  for (size_t n = 0; n < end; ++n) {
    SCOPED_TRACE("cut to " + std::to_string(n) + " of " + std::to_string(file.size()));
    const std::string message = ParseError(file.substr(0, n));
    if (message.find("runs past the end") != std::string::npos) kinds.insert("runs past the end");
    if (message.find("bytes left") != std::string::npos) kinds.insert("bytes left");
    if (message.find("data section starts") != std::string::npos) kinds.insert("data section starts");
    if (message.find("header claims") != std::string::npos) kinds.insert("header claims");
    if (message.find("too short") != std::string::npos) kinds.insert("too short");
  }
  EXPECT_EQ(kinds.size(), 5u);  // each kind of truncation error was met
  for (size_t n = end; n <= file.size(); ++n) {
    std::unique_ptr<Parsed> p = ParseBytes(file.substr(0, n));
    EXPECT_TRUE(p->model.ok()) << n << ": " << p->model.status().message();
  }
}

// Hostile bytes give an error or a model whose tensors lie inside the buffer and share
// none of it, never a crash (the sanitizer build catches overreads).
TEST_F(GgufTest, DamageRandomByteChangesNeverCrash) {
  GgufWriter writer;
  writer.SetString("general.name", "m");
  writer.SetIntArray("a", GgufValueType::kUint16, {1, 2, 3});
  writer.SetStringArray("s", {"x", "yz"});
  writer.AddTensor("a.weight", DType::kF16, {2, 3}, RandomBytes(12, 1));
  writer.AddTensor("b.weight", DType::kQ4_0, {1, 32}, RandomBytes(18, 2));
  ASSERT_TRUE(writer.Write(Path("m.gguf")).ok());
  const std::string valid = ReadFile(Path("m.gguf"));
  std::mt19937 rng(42);
  int opened = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    std::string mutated = valid;
    const int changes = 1 + static_cast<int>(rng() % 3);
    for (int i = 0; i < changes; ++i) mutated[rng() % mutated.size()] = static_cast<char>(rng());
    std::unique_ptr<Parsed> p = ParseBytes(mutated);
    if (!p->model.ok()) {
      EXPECT_FALSE(p->model.status().message().empty());
      continue;
    }
    ++opened;
    const uint8_t* begin = p->buffer.data();
    const uint8_t* end = begin + p->buffer.size();
    std::vector<std::pair<const uint8_t*, const uint8_t*>> ranges;
    for (const GgufTensor& t : p->model->tensors()) {
      ASSERT_TRUE(t.data >= begin && t.data <= end && t.nbytes <= static_cast<size_t>(end - t.data)) << t.name;
      if (t.nbytes > 0) ranges.emplace_back(t.data, t.data + t.nbytes);
    }
    std::sort(ranges.begin(), ranges.end());
    for (size_t i = 1; i < ranges.size(); ++i) EXPECT_LE(ranges[i - 1].second, ranges[i].first);
  }
  EXPECT_GT(opened, 0);  // changes in the data section and the padding leave a valid file
}

// ---- Split sets --------------------------------------------------------------------

class GgufSplitTest : public GgufTest {
 protected:
  // Writes PREFIX-0000i-of-0000N.gguf for i = 1..N with two tensors each, the split.*
  // keys as llama.cpp's gguf-split writes them (uint16 split.no, uint16 split.count, int32
  // split.tensors.count), and the model's metadata in the first only. `edit` may change
  // each file's writer before it writes.
  void WriteSplits(int n, const std::function<void(int, GgufWriter*)>& edit = nullptr) {
    for (int i = 1; i <= n; ++i) {
      GgufWriter w;
      if (i == 1) w.SetString("general.architecture", "deepseek2");
      w.SetInt("split.no", GgufValueType::kUint16, i - 1);
      w.SetInt("split.count", GgufValueType::kUint16, n);
      w.SetInt("split.tensors.count", GgufValueType::kInt32, 2 * n);
      for (int j = 0; j < 2; ++j) {
        const std::string name = "blk." + std::to_string(2 * (i - 1) + j) + ".ffn_up.weight";
        data_[name] = RandomBytes(2 * 34, static_cast<uint32_t>(10 * i + j));
        w.AddTensor(name, DType::kQ8_0, {2, 32}, data_[name]);
      }
      if (edit) edit(i, &w);
      ASSERT_TRUE(w.Write(SplitPath(i, n)).ok());
    }
  }
  std::string SplitPath(int i, int n) const {
    char name[64];
    std::snprintf(name, sizeof name, "model-%05d-of-%05d.gguf", i, n);
    return Path(name);
  }
  // Opens the first split expecting an error of `code`; returns its message.
  std::string OpenError(int n, StatusCode code = StatusCode::kDataLoss) {
    Result<GgufModel> m = GgufModel::Open(SplitPath(1, n));
    EXPECT_FALSE(m.ok()) << "Open unexpectedly succeeded";
    EXPECT_EQ(m.status().code(), code) << m.status().message();
    EXPECT_EQ(m.status().message().find('\n'), std::string::npos);
    return m.status().message();
  }

  std::map<std::string, std::vector<uint8_t>> data_;
};

TEST_F(GgufSplitTest, OpensEveryFileFromTheFirst) {
  WriteSplits(3);
  uint64_t last_read = 0;
  Result<GgufModel> m =
      GgufModel::Open(SplitPath(1, 3), FileResidency::kHugePageCopy, [&](uint64_t done) { last_read = done; });
  ASSERT_TRUE(m.ok()) << m.status().message();
  EXPECT_EQ(m->files(), (std::vector<std::string>{SplitPath(1, 3), SplitPath(2, 3), SplitPath(3, 3)}));
  EXPECT_EQ(last_read,
            fs::file_size(SplitPath(1, 3)) + fs::file_size(SplitPath(2, 3)) + fs::file_size(SplitPath(3, 3)));
  EXPECT_EQ(m->GetString("general.architecture").value(), "deepseek2");  // the first file's metadata
  EXPECT_EQ(m->GetInt("split.count").value(), 3);
  ASSERT_EQ(m->tensors().size(), 6u);
  for (int k = 0; k < 6; ++k) {
    const std::string name = "blk." + std::to_string(k) + ".ffn_up.weight";
    const GgufTensor& t = m->tensors()[k];  // file then offset order
    EXPECT_EQ(t.name, name);
    EXPECT_EQ(t.file, SplitPath(k / 2 + 1, 3));
    EXPECT_EQ(m->FindTensor(name), &t);
    ASSERT_EQ(t.nbytes, data_[name].size());
    EXPECT_EQ(std::memcmp(t.data, data_[name].data(), t.nbytes), 0);
  }
  EXPECT_EQ(m->TensorBytes(), 6u * 68);
}

TEST_F(GgufSplitTest, ALaterSplitIsRefusedNamingTheFirst) {
  WriteSplits(3);
  Result<GgufModel> m = GgufModel::Open(SplitPath(2, 3));
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), StatusCode::kInvalidArgument);
  ExpectMentions(m.status().message(), {SplitPath(2, 3), "split 2 of 3", "pass the first, " + SplitPath(1, 3)});
}

TEST_F(GgufSplitTest, MissingFile) {
  WriteSplits(3);
  fs::remove(SplitPath(3, 3));
  ExpectMentions(OpenError(3, StatusCode::kNotFound),
                 {SplitPath(1, 3), "split 3 of 3", SplitPath(3, 3), "does not exist"});
}

TEST_F(GgufSplitTest, WrongSplitCount) {
  WriteSplits(3);
  GgufWriter w;  // file 2 again, with the wrong count
  w.SetInt("split.no", GgufValueType::kUint16, 1);
  w.SetInt("split.count", GgufValueType::kUint16, 4);
  w.SetInt("split.tensors.count", GgufValueType::kInt32, 6);
  w.AddTensor("blk.2.ffn_up.weight", DType::kQ8_0, {2, 32}, RandomBytes(68, 1));
  w.AddTensor("blk.3.ffn_up.weight", DType::kQ8_0, {2, 32}, RandomBytes(68, 2));
  ASSERT_TRUE(w.Write(SplitPath(2, 3)).ok());
  ExpectMentions(OpenError(3), {SplitPath(2, 3), "split.count is 4", "says 3"});
}

TEST_F(GgufSplitTest, FirstFileCountDisagreesWithItsName) {
  WriteSplits(2);
  fs::rename(SplitPath(1, 2), SplitPath(1, 3));
  ExpectMentions(OpenError(3), {SplitPath(1, 3), "named split 1 of 3", "split.count is 2"});
}

TEST_F(GgufSplitTest, WrongSplitNo) {
  WriteSplits(3);
  GgufWriter w;
  w.SetInt("split.no", GgufValueType::kUint16, 1);  // should be 2
  w.SetInt("split.count", GgufValueType::kUint16, 3);
  w.AddTensor("blk.4.ffn_up.weight", DType::kQ8_0, {2, 32}, RandomBytes(68, 1));
  w.AddTensor("blk.5.ffn_up.weight", DType::kQ8_0, {2, 32}, RandomBytes(68, 2));
  ASSERT_TRUE(w.Write(SplitPath(3, 3)).ok());
  ExpectMentions(OpenError(3), {SplitPath(3, 3), "split.no is 1, expected 2"});
}

TEST_F(GgufSplitTest, FirstNamedFileWithALaterSplitNo) {
  WriteSplits(2);
  fs::rename(SplitPath(2, 2), Path("tmp.gguf"));
  fs::rename(SplitPath(1, 2), SplitPath(2, 2));
  fs::rename(Path("tmp.gguf"), SplitPath(1, 2));
  ExpectMentions(OpenError(2, StatusCode::kInvalidArgument), {"split 2 of 2 (split.no 1)", "pass the first"});
}

TEST_F(GgufSplitTest, SplitNoOutOfRange) {
  GgufWriter w;
  w.SetInt("split.no", GgufValueType::kInt64, std::numeric_limits<int64_t>::max());
  w.SetInt("split.count", GgufValueType::kUint16, 2);
  ASSERT_TRUE(w.Write(SplitPath(1, 2)).ok());
  ExpectMentions(OpenError(2), {SplitPath(1, 2), "split.no is 9223372036854775807, not 0 to 1"});
}

TEST_F(GgufSplitTest, TensorCountMismatch) {
  WriteSplits(3, [](int i, GgufWriter* w) {
    if (i == 3) w->AddTensor("extra", DType::kF32, {1}, RandomBytes(4, 1));
  });
  ExpectMentions(OpenError(3), {SplitPath(1, 3), "split.tensors.count is 6", "3 file(s) hold 7 tensors"});
}

TEST_F(GgufSplitTest, DuplicateTensorAcrossFiles) {
  WriteSplits(2, [](int i, GgufWriter* w) {
    if (i == 2) w->AddTensor("blk.0.ffn_up.weight", DType::kF32, {1}, RandomBytes(4, 1));
  });
  ExpectMentions(OpenError(2), {SplitPath(2, 2), "tensor \"blk.0.ffn_up.weight\" is also in " + SplitPath(1, 2)});
}

TEST_F(GgufSplitTest, SplitCountInAFileNotNamedAsASplit) {
  WriteSplits(3);
  fs::rename(SplitPath(1, 3), Path("model.gguf"));
  Result<GgufModel> m = GgufModel::Open(Path("model.gguf"));
  ASSERT_FALSE(m.ok());
  ExpectMentions(m.status().message(), {Path("model.gguf"), "split.count is 3", "-00001-of-00003.gguf"});
}

TEST_F(GgufSplitTest, OneFileSetReadsAsAPlainFile) {
  WriteSplits(1);
  Result<GgufModel> m = GgufModel::Open(SplitPath(1, 1));
  ASSERT_TRUE(m.ok()) << m.status().message();
  EXPECT_EQ(m->tensors().size(), 2u);
  EXPECT_EQ(m->files().size(), 1u);
}

}  // namespace
}  // namespace latte
