// latte's decoding of every block format against llama.cpp's own reference decoding:
// gguf-py (llama.cpp's Python package, gguf.quants.dequantize) reads a GGUF file of
// random blocks and must give latte's values bit for bit. gguf-py ships in llama.cpp's
// source tree, not in Debian: the test runs where LATTE_GGUF_PY names its directory
// (llama.cpp/gguf-py) and /usr/bin/python3 has NumPy (python3-numpy), and says why it
// skips elsewhere.
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "base/gguf_file.h"
#include "base/npy.h"
#include "kernels/block_quant.h"
#include "run_command.h"
#include "test_models.h"

namespace latte {
namespace {

namespace fs = std::filesystem;
using testing_process::RunCommand;

struct BlockType {
  const char* name;
  uint32_t ggml_id;  // ggml.h's enum ggml_type
  DType dtype;
};
constexpr BlockType kTypes[] = {
    {"Q4_0", 2, DType::kQ4_0},        {"Q5_0", 6, DType::kQ5_0},      {"Q5_1", 7, DType::kQ5_1},
    {"Q8_0", 8, DType::kQ8_0},        {"Q4_K", 12, DType::kQ4_K},     {"Q5_K", 13, DType::kQ5_K},
    {"Q6_K", 14, DType::kQ6_K},       {"Q3_K", 11, DType::kQ3_K},     {"Q2_K", 10, DType::kQ2_K},
    {"IQ4_NL", 20, DType::kIQ4_NL},   {"IQ4_XS", 23, DType::kIQ4_XS}, {"IQ2_XXS", 16, DType::kIQ2_XXS},
    {"IQ3_XXS", 18, DType::kIQ3_XXS}, {"IQ1_S", 19, DType::kIQ1_S},   {"F16", 1, DType::kF16}};

// Random bytes with every f16 field (the scales, and every value of an F16 tensor) a
// random finite f16 below 2^8 in magnitude, so that products stay finite.
std::vector<uint8_t> RandomBlocks(DType dtype, int64_t values, std::mt19937& rng) {
  std::vector<uint8_t> bytes(DTypeRowBytes(dtype, values));
  for (uint8_t& b : bytes) b = static_cast<uint8_t>(rng());
  const auto f16 = [&](size_t at) {
    const uint16_t h = static_cast<uint16_t>(((rng() & 1u) << 15) | ((rng() % 23) << 10) | (rng() & 0x3ffu));
    std::memcpy(bytes.data() + at, &h, 2);
  };
  if (dtype == DType::kF16) {
    for (size_t at = 0; at < bytes.size(); at += 2) f16(at);
    return bytes;
  }
  const size_t block = DTypeBlockBytes(dtype);
  for (size_t at = 0; at < bytes.size(); at += block) {
    if (dtype == DType::kQ6_K) {
      f16(at + block_layout::kQ6KD);
    } else if (dtype == DType::kQ3_K) {
      f16(at + block_layout::kQ3KD);
    } else if (dtype == DType::kQ2_K) {
      f16(at + block_layout::kQ2KD);
      f16(at + block_layout::kQ2KDmin);
    } else {
      f16(at);                                                                                   // d
      if (dtype == DType::kQ4_K || dtype == DType::kQ5_K || dtype == DType::kQ5_1) f16(at + 2);  // dmin / m
    }
  }
  return bytes;
}

TEST(GgufDequantReference, EveryTypeEqualsLlamaCppsDecoding) {
  const char* gguf_py = std::getenv("LATTE_GGUF_PY");
  if (gguf_py == nullptr || !fs::exists(std::string(gguf_py) + "/gguf/quants.py")) {
    GTEST_SKIP() << "set LATTE_GGUF_PY to llama.cpp's gguf-py directory (llama.cpp's source tree) to run";
  }
  int code = 0;
  RunCommand("/usr/bin/python3 -c 'import numpy' 2>/dev/null", &code);
  if (code != 0) GTEST_SKIP() << "/usr/bin/python3 has no NumPy (Debian: python3-numpy)";

  const std::string dir = testing_models::TempRoot() + "/dequant-reference";
  fs::create_directories(dir);
  std::mt19937 rng(29);
  GgufWriter writer;
  writer.SetString("general.architecture", "latte-test");
  for (const BlockType& t : kTypes) {
    const int64_t rows = 3, cols = 4 * 256;  // whole blocks of every format
    std::vector<uint8_t> bytes = RandomBlocks(t.dtype, rows * cols, rng);
    std::vector<float> values(rows * cols);
    DequantizeToF32(t.dtype, bytes.data(), rows * cols, values.data());
    const Status npy = WriteNpyF32(dir + "/" + t.name + ".npy", {rows, cols}, values.data());
    ASSERT_TRUE(npy.ok()) << npy.message();
    writer.AddRawTensor(t.name, t.ggml_id, {rows, cols}, std::move(bytes));
  }
  const std::string path = dir + "/blocks.gguf";
  const Status written = writer.Write(path);
  ASSERT_TRUE(written.ok()) << written.message();

  const std::string out = RunCommand("/usr/bin/python3 " + std::string(LATTE_LLAMACPP_DIR) + "/gguf_py_dequantize.py " +
                                         gguf_py + " " + path + " " + dir + " 2>&1",
                                     &code);
  ASSERT_EQ(code, 0) << out;
  const nlohmann::json report = nlohmann::json::parse(out.substr(out.find('{')));
  for (const BlockType& t : kTypes) {
    SCOPED_TRACE(t.name);
    ASSERT_TRUE(report.contains(t.name)) << out;
    EXPECT_EQ(report[t.name]["type"], t.name);
    EXPECT_EQ(report[t.name]["values"], 3 * 4 * 256);
    EXPECT_EQ(report[t.name]["differ"], 0) << "values whose bits differ from gguf-py's";
  }
}

}  // namespace
}  // namespace latte
