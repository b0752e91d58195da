// `mpirun -np N latte generate --tp N` (or --dp N, or --dp D --tp T) against one process on the same model: the
// logits of every prompt row and every generated token (f32: within 1e-5 of the
// largest), and the greedy tokens (every dtype: identical), in each MLA mode, for
// heads/widths split (tp) and experts split whole (ep), over shared memory and TCP.
#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "base/npy.h"
#include "gguf_test_models.h"
#include "run_command.h"
#include "test_models.h"

namespace latte {
namespace {

using testing_process::RunCommand;

struct GenerateRun {
  std::string ids;            // the greedy tokens printed
  std::vector<float> logits;  // [rows, vocab]
  std::string log;            // stderr
  int exit_code = -1;
};

// Open MPI leaves its unloaded plugins' allocations at exit, which LSan cannot name to
// suppress: under the sanitizers the ranks run without LSan (ASan and UBSan still on).
#ifdef LATTE_SANITIZE
constexpr const char* kRankSanitizerEnv = "ASAN_OPTIONS=detect_leaks=0 ";
#else
constexpr const char* kRankSanitizerEnv = "";
#endif

// Oversubscribed on a 2-core machine, as root (CI runs as root), one thread per rank,
// each mpirun bounded.
std::string Mpirun(int ranks, const std::string& transport) {
  const std::string btl = transport == "tcp"
                              ? "--mca btl self,tcp --mca btl_tcp_if_include lo --mca oob_tcp_if_include lo"
                              : "--mca btl self,vader";
  return std::string(kRankSanitizerEnv) +
         "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 timeout 120 " +
         std::string(LATTE_MPIRUN) + " -np " + std::to_string(ranks) + " --oversubscribe --bind-to none " + btl + " ";
}

GenerateRun Generate(const std::string& launcher, const std::string& model, const std::string& flags,
                     const std::string& name) {
  const std::string dir = testing_models::TempRoot();
  const std::string npy = dir + "/" + name + ".npy", err = dir + "/" + name + ".err";
  GenerateRun r;
  r.ids = RunCommand(
      launcher + LATTE_BINARY + " generate --model " + model +
          " --prompt-ids 3,141,59,26,5,35,89 --max-tokens 16 --memory-gb 4 --max-num-batched-tokens 64 --threads 1 " +
          flags + " --logits-out " + npy + " 2>" + err,
      &r.exit_code);
  int cat_exit = 0;
  r.log = RunCommand("cat " + err, &cat_exit);
  std::vector<int64_t> shape;
  if (auto logits = ReadNpyF32(npy, &shape); logits.ok()) r.logits = std::move(logits).value();
  return r;
}

double MaxRelativeDifference(const std::vector<float>& ref, const std::vector<float>& got) {
  double diff = 0, scale = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    diff = std::max(diff, static_cast<double>(std::fabs(ref[i] - got[i])));
    scale = std::max(scale, static_cast<double>(std::fabs(ref[i])));
  }
  return diff / scale;
}

struct Case {
  const char* model;  // "tiny", "tiny-bf16", "r1-2"
  const char* mode;
  int ranks;
  const char* layout;
  const char* transport;
};

std::string ModelDir(const std::string& which) {
  if (which == "tiny") {
    MakeModelOverrides f32;
    f32.dtype = CheckpointDType::kF32;
    return testing_models::MakeModel("tiny", f32);
  }
  if (which == "tiny-bf16") return testing_models::MakeModel("tiny", MakeModelOverrides{});
  if (which == "r1-2" || which == "r1-2-fp8") {
    MakeModelOverrides r1;
    if (which == "r1-2-fp8") r1.dtype = CheckpointDType::kFp8;
    r1.num_hidden_layers = 2;
    r1.vocab_size = 1024;
    return testing_models::MakeModel("r1", r1);
  }
  if (which == "gguf-q4km" || which == "gguf-q8") {
    // Every token takes every expert: a near tie of the router cannot part the layouts.
    // Experts 512 wide: the shared expert, split by width, keeps whole 256-value blocks.
    ModelConfig config = testing_models::GgufTestConfig(testing_models::GgufShape::kV3, /*experts_per_token=*/8);
    config.moe_intermediate_size = 512;
    const std::string dir = testing_models::GgufTestModel("dist-gguf-src", config, CheckpointDType::kBf16, /*seed=*/7);
    return testing_models::ExportTestGguf(dir, which == "gguf-q8" ? "Q8_0" : "Q4_K_M", GgufExportLayout::kSplitKvB);
  }
  return std::string(LATTE_MODELS_DIR) + "/" + which;  // default, default-fp8: the trained model
}

class DistGenerate : public ::testing::TestWithParam<Case> {};

TEST_P(DistGenerate, EqualsOneProcess) {
  const Case& c = GetParam();
  if (std::string(c.model).starts_with("r1") && testing_models::SkipLargeModels()) {
    GTEST_SKIP() << "LATTE_SMALL_TESTS=1";
  }
  const std::string model = ModelDir(c.model);
  const std::string mode = std::string("--mla-mode ") + c.mode;
  const std::string name = std::string(c.model) + "-" + c.mode + "-" + std::to_string(c.ranks) + "-" + c.transport;
  const std::string layout = c.layout;
  const std::string quantize = layout.find("--quantize fp8") != std::string::npos ? " --quantize fp8" : "";
  const GenerateRun one = Generate("", model, mode + quantize, name + "-one");
  ASSERT_EQ(one.exit_code, 0) << one.log;
  const GenerateRun many = Generate(Mpirun(c.ranks, c.transport), model, mode + " " + c.layout, name + "-many");
  ASSERT_EQ(many.exit_code, 0) << many.log;
  EXPECT_EQ(many.ids, one.ids) << "greedy tokens differ";
  ASSERT_EQ(many.logits.size(), one.logits.size());
  ASSERT_FALSE(one.logits.empty());
  const double rel = MaxRelativeDifference(one.logits, many.logits);
  // f32: partial sums in another order; bf16: the same, the weights' rounding shared.
  const bool f32 = std::string(c.model) == "tiny";
  EXPECT_LE(rel, f32 ? 1e-5 : 2e-2) << c.layout << " " << c.mode;
  EXPECT_GT(one.ids.size(), 16u);
}

std::string CaseName(const ::testing::TestParamInfo<Case>& info) {
  std::string layout = info.param.layout;
  std::string s = std::string(info.param.model) + "_" + info.param.mode + "_" + layout + "_" + info.param.transport;
  for (char& ch : s) {
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  }
  return s;
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, DistGenerate,
    ::testing::Values(
        Case{"tiny", "absorbed", 2, "--tp 2", "shm"}, Case{"tiny", "materialized", 2, "--tp 2", "shm"},
        Case{"tiny", "naive", 2, "--tp 2", "shm"}, Case{"tiny", "absorbed", 4, "--tp 4", "shm"},
        Case{"tiny", "materialized", 4, "--tp 4", "shm"}, Case{"tiny", "naive", 4, "--tp 4", "shm"},
        Case{"tiny", "absorbed", 2, "--tp 2 --ep 2", "shm"}, Case{"tiny", "absorbed", 4, "--tp 4 --ep 4", "shm"},
        Case{"tiny", "materialized", 4, "--tp 4 --ep 4", "shm"}, Case{"tiny", "absorbed", 2, "--tp 2", "tcp"},
        Case{"tiny", "absorbed", 4, "--tp 4 --ep 4", "tcp"}, Case{"tiny-bf16", "absorbed", 2, "--tp 2", "shm"},
        Case{"default", "absorbed", 2, "--tp 2", "shm"}, Case{"default", "materialized", 2, "--tp 2 --ep 2", "shm"},
        Case{"r1-2", "absorbed", 2, "--tp 2", "shm"}, Case{"r1-2-fp8", "absorbed", 2, "--tp 2", "shm"},
        Case{"r1-2", "absorbed", 2, "--tp 2 --quantize fp8", "shm"},
        // GGUF files, computed on as stored: slices of whole blocks.
        Case{"gguf-q4km", "absorbed", 2, "--tp 2 --ep 2", "shm"}, Case{"gguf-q8", "naive", 2, "--tp 2", "shm"},
        Case{"gguf-q4km", "materialized", 2, "--dp 2 --ep 2", "shm"},
        // Data-parallel attention: the request runs on rank 0, the others join every MoE
        // layer with no rows of their own.
        Case{"tiny", "absorbed", 2, "--dp 2 --ep 2", "shm"}, Case{"tiny", "materialized", 2, "--dp 2", "shm"},
        Case{"tiny", "naive", 4, "--dp 4 --ep 4", "shm"}, Case{"tiny", "absorbed", 4, "--dp 4", "tcp"},
        Case{"default", "absorbed", 2, "--dp 2 --ep 2", "shm"}, Case{"r1-2", "absorbed", 2, "--dp 2 --ep 2", "shm"},
        // The all-to-all exchange: each row only to the ranks holding its experts.
        Case{"tiny", "absorbed", 2, "--dp 2 --ep 2 --moe-exchange alltoall", "shm"},
        Case{"tiny", "materialized", 4, "--dp 4 --ep 4 --moe-exchange alltoall", "tcp"},
        Case{"r1-2", "absorbed", 2, "--dp 2 --ep 2 --moe-exchange alltoall", "shm"},
        // Two replicas of two tensor-parallel ranks: the request runs on ranks 0 and 1,
        // each sending half its rows to the experts; ranks 2 and 3 join with none.
        Case{"tiny", "absorbed", 4, "--dp 2 --tp 2 --dist-check", "shm"},
        Case{"tiny", "materialized", 4, "--dp 2 --tp 2 --ep 4", "tcp"},
        Case{"tiny", "naive", 4, "--dp 2 --tp 2 --ep 4 --moe-exchange alltoall", "shm"},
        Case{"default", "absorbed", 4, "--dp 2 --tp 2 --ep 4", "shm"},
        Case{"r1-2", "absorbed", 4, "--dp 2 --tp 2", "shm"}),
    CaseName);

// A layout the model or the job cannot take is one sentence, before any weight loads.
TEST(DistLayout, RefusedWithOneSentence) {
  const std::string model = ModelDir("tiny");
  struct Refusal {
    std::string launcher, flags, message;
  };
  const std::vector<Refusal> refusals = {
      {"", "--tp 2", "--tp 2 × --dp 1 needs 2 processes: run it under mpirun -np 2"},
      {Mpirun(3, "shm"), "--tp 3", "--tp 3 does not divide the model's 4 attention heads"},
      {Mpirun(2, "shm"), "--tp 4", "--tp 4 × --dp 1 = 4 ranks, but the job has 2 processes"},
      {"", "--ep 3", "--ep 3 must be 1 (routed experts split by width) or the number of ranks, 1"},
      {"", "--tp 0", "--tp must be at least 1, not 0"},
      {Mpirun(4, "shm"), "--dp 2 --tp 2 --ep 2",
       "--ep 2 must be 1 (routed experts split by width) or the number of ranks, 4"},
      {Mpirun(4, "shm"), "--dp 2 --tp 2 --moe-exchange alltoall",
       "--moe-exchange alltoall needs data-parallel attention with whole experts (--dp 2 --tp 2 --ep 4)"},
      {Mpirun(3, "shm"), "--dp 3 --ep 3", "--ep 3 does not divide the model's 8 routed experts"},
      {Mpirun(2, "shm"), "--dp 2 --moe-exchange alltoall",
       "--moe-exchange alltoall needs data-parallel attention with whole experts (--dp 2 --ep 2)"},
  };
  // fp8 blocks are 128 rows: the trained default's 2 heads of 64 query rows per rank
  // would cut one (vLLM refuses the same).
  const GenerateRun fp8 = Generate(Mpirun(2, "shm"), ModelDir("default-fp8"), "--tp 2", "refused-fp8");
  EXPECT_NE(fp8.exit_code, 0);
  EXPECT_NE(fp8.log.find("--tp 2 gives each rank 64 rows of q_b_proj (its heads' query rows), not a multiple of "
                         "the fp8 weights' 128-wide blocks"),
            std::string::npos)
      << fp8.log;
  // A GGUF's K formats are 256-value blocks: splitting the 512-wide experts by width
  // over 4 ranks (2 replicas of 2) would cut them.
  const GenerateRun q4 = Generate(Mpirun(4, "shm"), ModelDir("gguf-q4km"), "--dp 2 --tp 2", "refused-q4km");
  EXPECT_NE(q4.exit_code, 0);
  EXPECT_NE(q4.log.find("a rank's share of model.layers.1.mlp.experts.0.down_proj.weight is 128 columns, not whole "
                        "Q6_K blocks of 256 values"),
            std::string::npos)
      << q4.log;
  for (const Refusal& r : refusals) {
    const GenerateRun run = Generate(r.launcher, model, r.flags, "refused");
    EXPECT_NE(run.exit_code, 0) << r.flags;
    EXPECT_NE(run.log.find(r.message), std::string::npos) << r.flags << ":\n" << run.log;
    EXPECT_EQ(run.log.find("loading:"), std::string::npos) << r.flags << " loaded weights:\n" << run.log;
  }
}

}  // namespace
}  // namespace latte

namespace latte {
namespace {

// What `latte calc` predicts a decode step's collectives send is what rank 0's Comm
// counted in `bench model`'s timed steps: calls and bytes, per kind, exactly (TP on
// both all-reduce paths, DP with each replica's share of the batch).
TEST(DistCollectives, BenchModelSendsWhatCalcPredicts) {
  const std::string model = ModelDir("tiny");
  struct Layout {
    int ranks;
    std::string flags, calc_flags;
    int64_t batch;
  };
  const std::vector<Layout> layouts = {
      {2, "--tp 2", "--tp 2", 1},
      {4, "--tp 4 --ep 4", "--tp 4 --ep 4", 16},
      {4, "--tp 4", "--tp 4", 1024},  // [1024, 64] floats: the exchange path of the all-reduce
      {2, "--dp 2 --ep 2", "--dp 2 --ep 2", 2},
      {4, "--dp 4", "--dp 4", 8},
      {4, "--dp 2 --tp 2 --ep 4", "--dp 2 --tp 2 --ep 4", 4},
      {4, "--dp 2 --tp 2", "--dp 2 --tp 2", 2},  // one row per replica: rank 0 sends the experts none
  };
  for (const Layout& l : layouts) {
    int exit_code = -1;
    const std::string bench =
        RunCommand(Mpirun(l.ranks, "shm") + LATTE_BINARY + " bench model --model " + model + " " + l.flags +
                       " -p 0 -n 3 -r 2 --threads 1 --json --batch " + std::to_string(l.batch) + " 2>/dev/null",
                   &exit_code);
    ASSERT_EQ(exit_code, 0) << l.flags << "\n" << bench;
    const std::string calc = RunCommand(std::string(LATTE_BINARY) + " calc --config " + model + "/config.json " +
                                            l.calc_flags + " --json --batch " + std::to_string(l.batch),
                                        &exit_code);
    ASSERT_EQ(exit_code, 0) << calc;
    const nlohmann::json measured = nlohmann::json::parse(bench)["collectives_per_forward"];
    const nlohmann::json predicted = nlohmann::json::parse(calc)["collectives_per_decode_step"];
    for (const char* kind : {"all_reduce", "all_gather", "reduce_scatter", "all_to_all"}) {
      const int64_t calls = predicted[kind]["calls"];
      if (calls == 0) {
        EXPECT_FALSE(measured.contains(kind)) << l.flags << " " << kind;
        continue;
      }
      ASSERT_TRUE(measured.contains(kind)) << l.flags << " " << kind << "\n" << measured.dump();
      EXPECT_EQ(measured[kind]["calls"].get<double>(), static_cast<double>(calls)) << l.flags << " " << kind;
      EXPECT_EQ(measured[kind]["bytes_sent"].get<double>(), predicted[kind]["bytes_sent"].get<double>())
          << l.flags << " " << kind;
    }
    EXPECT_GT(nlohmann::json::parse(bench)["collective_share"].get<double>(), 0.0) << l.flags;
  }
}

}  // namespace
}  // namespace latte
