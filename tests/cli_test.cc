// The command line, through the real binary: each bad input fails before any work
// with one line that names the flag (exit code 1 and the first words of the message
// are checked), lengths past the model's context are refused with both numbers, and
// the README's table of flags matches `--help`.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "run_command.h"
#include "test_models.h"

namespace latte {
namespace {

namespace fs = std::filesystem;

struct CliRun {
  int code = -1;
  std::string out;  // stdout
  std::string err;  // stderr
};

// `latte <args>` with stdin from `input` (a file path, or /dev/null).
CliRun Latte(const std::string& args, const std::string& input = "/dev/null") {
  static int serial = 0;
  const std::string err_file = testing_models::TempRoot() + "/cli-" + std::to_string(serial++) + ".err";
  CliRun r;
  r.out =
      testing_process::RunCommand(std::string(LATTE_BINARY) + " " + args + " <" + input + " 2>" + err_file, &r.code);
  std::ifstream in(err_file);
  std::stringstream ss;
  ss << in.rdbuf();
  r.err = ss.str();
  return r;
}

std::string Tiny() { return testing_models::MakeModel("tiny", {}); }

std::string WriteFile(const std::string& name, const std::string& text) {
  const std::string path = testing_models::TempRoot() + "/" + name;
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

// Exit 1, nothing on stdout, and exactly one line on stderr that starts with `start`
// (one line: the check ran before any load or probe, which would print progress).
void ExpectOneLineError(const std::string& args, const std::string& start, const std::string& input = "/dev/null") {
  SCOPED_TRACE("latte " + args);
  const CliRun r = Latte(args, input);
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_EQ(r.err.rfind(start, 0), 0u) << "expected \"" << start << "\", got: " << r.err;
}

// ---- Limits the model states: refused before any work, with both numbers ----

TEST(CliContext, GeneratePromptIdsPlusMaxTokens) {
  ExpectOneLineError("generate --model " + Tiny() + " --prompt-ids 1,2 --max-tokens 5000",
                     "latte generate: error: the prompt (2 tokens) plus --max-tokens (5000) is 5002 tokens, more "
                     "than the model's context length of 4096");
}

TEST(CliContext, GenerateHugeMaxTokens) {
  ExpectOneLineError("generate --model " + Tiny() + " --prompt-ids 1 --max-tokens 2147483648",
                     "latte generate: error: the prompt (1 tokens) plus --max-tokens (2147483648) is 2147483649 "
                     "tokens, more than the model's context length of 4096");
}

TEST(CliContext, GenerateTextPrompt) {
  ExpectOneLineError("generate --model " + Tiny() + " --prompt 'the cat' --max-tokens 4096",
                     "latte generate: error: the prompt (");
}

TEST(CliContext, BenchModelPromptLength) {
  ExpectOneLineError("bench model --model " + Tiny() + " -p 100000000 -n 0",
                     "latte bench model: error: the pp test -p 100000000 is 100000000 tokens, more than the "
                     "model's context length of 4096");
}

TEST(CliContext, BenchModelGenLength) {
  ExpectOneLineError("bench model --model " + Tiny() + " -p 0 -n 5000",
                     "latte bench model: error: the 16-token prompt plus -n 5000 is 5016 tokens");
}

TEST(CliContext, BenchModelDepth) {
  ExpectOneLineError("bench model --model " + Tiny() + " -p 0 -n 10 -d 4090",
                     "latte bench model: error: -d 4090 plus -n 10 is 4100 tokens");
}

TEST(CliContext, BenchEngineInputPlusOutput) {
  ExpectOneLineError("bench engine --model " + Tiny() + " --input-len 4000 --output-len 200",
                     "latte bench engine: error: --input-len (4000) plus --output-len (200) is 4200 tokens");
}

TEST(CliContext, BenchAttnContext) {
  ExpectOneLineError("bench attn --preset tiny --context 5000",
                     "latte bench attn: error: --context 5000 plus the decoded token is 5001 tokens");
}

// ---- Every flag checked before weights load or the probe runs ----

TEST(CliFlags, ThreadsOutOfRange) {
  for (const char* t : {"65536", "-1", "0"}) {
    ExpectOneLineError("generate --model " + Tiny() + " --prompt-ids 1 -t " + t,
                       std::string("latte generate: error: --threads must be an integer in [1, 1024], got \"") + t);
    ExpectOneLineError(std::string("bench machine -t ") + t, "latte bench machine: error: --threads must be");
  }
}

TEST(CliFlags, MaxTokensAtLeastOne) {
  ExpectOneLineError("generate --model " + Tiny() + " --prompt-ids 1 --max-tokens 0",
                     "latte generate: error: --max-tokens must be an integer in [1, ");
}

TEST(CliFlags, SamplingRangesNameTheFlag) {
  ExpectOneLineError("generate --model " + Tiny() + " --prompt hi --top-p 2",
                     "latte generate: error: --top-p must be in (0, 1], got 2");
  ExpectOneLineError("generate --model " + Tiny() + " --prompt hi --temperature -1",
                     "latte generate: error: --temperature must be in [0, 2]");
  ExpectOneLineError("generate --model " + Tiny() + " --prompt hi --top-k -5",
                     "latte generate: error: --top-k must be");
}

TEST(CliFlags, StopStrings) {
  ExpectOneLineError("generate --model " + Tiny() + " --prompt hi --stop ''",
                     "latte generate: error: --stop: stop string 0 is empty");
  ExpectOneLineError("generate --model " + Tiny() + " --prompt hi --stop a --stop b --stop c --stop d --stop e",
                     "latte generate: error: --stop: at most 4 stop strings");
}

TEST(CliFlags, LogitsOutFolderCheckedFirst) {
  ExpectOneLineError("generate --model " + Tiny() + " --prompt-ids 1 --logits-out /nonexistent-dir/x.npy",
                     "latte generate: error: --logits-out /nonexistent-dir/x.npy: the folder /nonexistent-dir does "
                     "not exist");
  ExpectOneLineError("generate --model " + Tiny() + " --prompt-ids 1 --logits-out " + testing_models::TempRoot(),
                     "latte generate: error: --logits-out " + testing_models::TempRoot() + " is a folder");
}

TEST(CliFlags, FlagsWithNoEffectAreErrors) {
  for (const char* flag : {"--temperature 0.5", "--seed 3", "--stop x", "--top-p 0.5", "--ignore-eos"}) {
    ExpectOneLineError("generate --model " + Tiny() + " --prompt-ids 1 " + flag,
                       "latte generate: error: " + std::string(flag).substr(0, std::string(flag).find(' ')) +
                           " has no effect with --prompt-ids");
  }
  ExpectOneLineError("generate --model " + Tiny() + " --prompt hi --system 'be brief'",
                     "latte generate: error: --system has no effect without --chat");
  ExpectOneLineError("generate --model " + Tiny() + " --prompt hi --logits-out x.npy",
                     "latte generate: error: --logits-out has no effect with --prompt");
  ExpectOneLineError("calc --preset r1 --block-size 32",
                     "latte calc: error: --block-size has no effect without --memory-gb");
  ExpectOneLineError("bench model --model " + Tiny() + " -n 0 --batch 2",
                     "latte bench model: error: --batch has no effect without a tg test");
  ExpectOneLineError("tokenize --model " + Tiny() + " --skip-special",
                     "latte tokenize: error: --skip-special has no effect without --decode");
  ExpectOneLineError("generate --model " + Tiny() + " --prompt-ids 1 --fp8 bf16",
                     "latte generate: error: --fp8 has no effect on a checkpoint without fp8 weights");
  ExpectOneLineError("bench model --model " + Tiny() + " --fp8 keep",
                     "latte bench model: error: --fp8 has no effect on a checkpoint without fp8 weights");
}

// --quantize fp8 holds weights in fp8, --fp8 bf16 dequantizes them: refused together
// before the load (and before bench model's probe), on every command that takes both.
TEST(CliFlags, QuantizeFp8WithFp8Bf16IsRefused) {
  MakeModelOverrides fp8;
  fp8.dtype = CheckpointDType::kFp8;
  const std::string dir = testing_models::MakeModel("tiny", fp8);
  const std::string why = " error: --quantize fp8 and --fp8 bf16 contradict each other";
  ExpectOneLineError("generate --model " + dir + " --prompt-ids 1 --quantize fp8 --fp8 bf16", "latte generate:" + why);
  ExpectOneLineError("bench model --model " + dir + " --quantize fp8 --fp8 bf16", "latte bench model:" + why);
  ExpectOneLineError("bench engine --model " + dir + " --num-prompts 1 --quantize fp8 --fp8 bf16",
                     "latte bench engine:" + why);
  ExpectOneLineError("generate --model " + Tiny() + " --prompt-ids 1 --quantize int8",
                     "latte generate: error: --quantize must be none or fp8, got \"int8\"");
}

TEST(CliFlags, ChoicesListWhatIsAccepted) {
  ExpectOneLineError("generate --model " + Tiny() + " --prompt-ids 1 --mla-mode fast",
                     "latte generate: error: --mla-mode must be absorbed, materialized or naive, got \"fast\"");
  ExpectOneLineError("bench attn --preset huge",
                     "latte bench attn: error: --preset must be tiny, v2, v2-lite, v3 or r1");
  ExpectOneLineError("calc --preset huge", "latte calc: error: --preset must be tiny, v2, v2-lite, v3 or r1");
  ExpectOneLineError("make-model --preset huge --out x",
                     "latte make-model: error: --preset must be tiny, v2, v2-lite, v3 or r1");
}

// ---- Writes ----

TEST(CliWrites, StdoutWriteErrorExitsNonZero) {
  const std::string in = WriteFile("lines.jsonl", "\"hello\"\n");
  const CliRun r = Latte("tokenize --model " + Tiny() + " >/dev/full", in);
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_EQ(r.err.rfind("latte tokenize: error: writing to stdout failed", 0), 0u) << r.err;
  const CliRun g = Latte("generate --model " + Tiny() + " --prompt-ids 1,2 --max-tokens 2 -t 2 >/dev/full");
  EXPECT_EQ(g.code, 1) << g.err;
  EXPECT_NE(g.err.find("writing to stdout failed"), std::string::npos) << g.err;
}

TEST(CliWrites, MakeModelRefusesAFolderWithAModelUnlessForced) {
  const std::string out = testing_models::TempRoot() + "/make-model-force";
  fs::create_directories(out);
  WriteFile("make-model-force/other.safetensors", "x");
  ExpectOneLineError("make-model --preset tiny --layers 1 --out " + out,
                     "latte make-model: error: " + out + " already holds a model (other.safetensors); give --force");
  EXPECT_TRUE(fs::exists(out + "/other.safetensors"));
  const CliRun r = Latte("make-model --preset tiny --layers 1 --force --out " + out);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_FALSE(fs::exists(out + "/other.safetensors"));
  EXPECT_TRUE(fs::exists(out + "/model.safetensors"));
  EXPECT_TRUE(fs::exists(out + "/config.json"));
  // Nothing is left beside it: the temporary folder was moved in.
  for (const auto& e : fs::directory_iterator(testing_models::TempRoot())) {
    EXPECT_EQ(e.path().filename().string().find(".latte-make-model"), std::string::npos) << e.path();
  }
}

TEST(CliWrites, MakeModelLayersBounded) {
  ExpectOneLineError("make-model --preset tiny --layers 100000 --out x",
                     "latte make-model: error: --layers must be an integer in [1, 1024]");
}

// ---- --huge-pages says what it is doing while it reads ----

TEST(CliHugePages, ReadingPrintsTheLoadingLine) {
  const CliRun r = Latte("generate --model " + Tiny() + " --prompt-ids 1,2 --max-tokens 2 -t 2 --huge-pages");
  ASSERT_EQ(r.code, 0) << r.err;
  // Not a terminal: one line when the read ends, then the tensors' line.
  const size_t read = r.err.find("loading: read into 2 MiB pages ");
  ASSERT_NE(read, std::string::npos) << r.err;
  EXPECT_NE(r.err.find("loading: ", read + 1), std::string::npos) << r.err;
}

// ---- OpenMP waits without spinning unless the environment says otherwise ----

TEST(CliThreads, WaitPolicyIsPassiveUnlessSet) {
  int code = 0;
  const std::string passive =
      testing_process::RunCommand("OMP_DISPLAY_ENV=true " + std::string(LATTE_BINARY) + " --version 2>&1", &code);
  EXPECT_EQ(code, 0);
  EXPECT_NE(passive.find("OMP_WAIT_POLICY = 'PASSIVE'"), std::string::npos) << passive;
  const std::string active = testing_process::RunCommand(
      "OMP_WAIT_POLICY=active OMP_DISPLAY_ENV=true " + std::string(LATTE_BINARY) + " --version 2>&1", &code);
  EXPECT_NE(active.find("OMP_WAIT_POLICY = 'ACTIVE'"), std::string::npos) << active;
}

// ---- One vocabulary ----

TEST(CliVocabulary, VersionPrintsVersionAndCommit) {
  const CliRun r = Latte("--version");
  EXPECT_EQ(r.code, 0);
  EXPECT_TRUE(std::regex_search(r.out, std::regex("^latte [0-9]+\\.[0-9]+\\.[0-9]+ \\(commit [0-9a-f]{7,}"))) << r.out;
}

TEST(CliVocabulary, UnknownCommandSaysSo) {
  ExpectOneLineError("frobnicate", "latte: error: unknown command \"frobnicate\" (commands: generate, make-model, ");
  ExpectOneLineError("bench frobnicate", "latte bench: error: unknown command \"frobnicate\" (commands: attn, ");
  ExpectOneLineError("", "latte: error: give a command: generate, make-model, ");
}

TEST(CliVocabulary, ParserErrorsAreSentencesNamingTheFlag) {
  ExpectOneLineError("generate --model " + Tiny() + " --prompt-ids 1 --seedd 3",
                     "latte generate: error: unknown flag --seedd");
  ExpectOneLineError("generate --prompt-ids 1", "latte generate: error: --model is required");
  ExpectOneLineError("generate --model " + Tiny() + " --prompt-ids 1 --top-p abc",
                     "latte generate: error: --top-p needs a number, got \"abc\"");
  ExpectOneLineError("generate --model " + Tiny() + " --prompt-ids",
                     "latte generate: error: --prompt-ids needs a value");
  ExpectOneLineError("generate --model " + Tiny() + " --prompt hi --chat=3",
                     "latte generate: error: --chat takes no value");
}

TEST(CliVocabulary, RenamedFlagsSayTheirNewName) {
  ExpectOneLineError("bench attn --mode absorbed", "latte bench attn: error: --mode is now --mla-mode");
  ExpectOneLineError("bench model --model " + Tiny() + " --prompt 512",
                     "latte bench model: error: --prompt is now -p/--n-prompt");
}

TEST(CliVocabulary, EveryComputingCommandTakesThreads) {
  for (const char* cmd :
       {"generate", "make-model", "calc", "bench attn", "bench machine", "bench model", "bench engine"}) {
    const CliRun r = Latte(std::string(cmd) + " --help");
    EXPECT_EQ(r.code, 0) << cmd;
    EXPECT_NE(r.out.find("-t,--threads"), std::string::npos) << cmd << ":\n" << r.out;
  }
}

TEST(CliVocabulary, OnePresetListForEveryCommand) {
  for (const char* preset : {"tiny", "v2", "v2-lite", "v3", "r1"}) {
    SCOPED_TRACE(preset);
    EXPECT_EQ(Latte(std::string("calc --json --preset ") + preset).code, 0);
  }
  const CliRun r = Latte("calc --json --preset tiny");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out)["shape"]["hidden_size"], 64);
}

TEST(CliVocabulary, BenchModelTakesLists) {
  const CliRun r = Latte("bench model --model " + Tiny() + " -p 4,8 -n 2 -r 1 -t 2 --json");
  ASSERT_EQ(r.code, 0) << r.err;
  std::vector<std::string> tests;
  std::istringstream lines(r.out);
  for (std::string line; std::getline(lines, line);) tests.push_back(nlohmann::json::parse(line)["test"]);
  EXPECT_EQ(tests, (std::vector<std::string>{"pp4", "pp8", "tg2"}));
}

// ---- Tables read clearly ----

// Characters on screen ("±" is one).
size_t DisplayWidth(const std::string& s) {
  return std::count_if(s.begin(), s.end(), [](char c) { return (static_cast<unsigned char>(c) & 0xC0) != 0x80; });
}

TEST(CliTables, BenchModelTableStaysAligned) {
  const CliRun r = Latte("bench model --model " + Tiny() + " -p 8,64 -n 4 -d 0,100 -r 2 -t 2");
  ASSERT_EQ(r.code, 0) << r.err;
  std::vector<std::string> rows;
  std::istringstream lines(r.out);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("|", 0) == 0) rows.push_back(line);
  }
  ASSERT_EQ(rows.size(), 2u + 4u) << r.out;  // header, rule, pp8, pp64, tg4, tg4@d100
  for (const std::string& row : rows) {
    EXPECT_EQ(DisplayWidth(row), DisplayWidth(rows[0])) << r.out;
    // Every '|' at the header's columns.
    size_t col = 0;
    std::vector<size_t> bars, header_bars;
    for (size_t i = 0; i < row.size(); ++i) {
      if ((static_cast<unsigned char>(row[i]) & 0xC0) == 0x80) continue;
      if (row[i] == '|') bars.push_back(col);
      ++col;
    }
    col = 0;
    for (char c : rows[0]) {
      if (c == '|') header_bars.push_back(col);
      ++col;
    }
    EXPECT_EQ(bars, header_bars) << row;
  }
}

TEST(CliTables, BenchMachineLabelsEachRowOnce) {
  const CliRun r = Latte("bench machine -t 2");
  ASSERT_EQ(r.code, 0) << r.err;
  std::istringstream lines(r.out);
  std::string header;
  std::getline(lines, header);
  EXPECT_TRUE(std::regex_match(header, std::regex("probe +threads +pages +peak"))) << header;
  std::set<std::string> labels;
  int rows = 0;
  for (std::string line; std::getline(lines, line); ++rows) {
    std::smatch m;
    ASSERT_TRUE(std::regex_match(line, m, std::regex("(.+?) +([0-9]+) +(2 MiB|4 KiB|-) +([0-9.]+ (GB/s|GFLOP/s)|n/a)")))
        << line;
    EXPECT_TRUE(labels.insert(m[1].str() + "/" + m[2].str() + "/" + m[3].str()).second) << "row twice: " << line;
  }
  EXPECT_EQ(rows, 5);
}

// ---- make-model's tokenizer covers the vocabulary; decoding agrees with generate ----

TEST(CliTokenizer, EveryModelIdDecodes) {
  const std::string in = WriteFile("ids.jsonl", "[511]\n");
  const CliRun r = Latte("tokenize --model " + Tiny() + " --decode", in);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out, "\"\"\n");  // the last id of the model has text
  // An id the model cannot produce is an error with --model; with only a tokenizer
  // file, an id it has no token for decodes to nothing, as generate's text does.
  const std::string past = WriteFile("ids-past.jsonl", "[512]\n");
  ExpectOneLineError("tokenize --model " + Tiny() + " --decode",
                     "latte tokenize: error: stdin line 1: 512 is not a token id of this model (vocab_size 512)", past);
  const CliRun t = Latte("tokenize --tokenizer " + Tiny() + "/tokenizer.json --decode", past);
  EXPECT_EQ(t.code, 0) << t.err;
  EXPECT_EQ(t.out, "\"\"\n");
}

// ---- tokenize's input ----

TEST(CliTokenizer, BlankLinesAreSkippedAndBadUtf8IsNamed) {
  const std::string in = WriteFile("blank.jsonl", "\"a\"\n\n   \n\"b\"\n");
  const CliRun r = Latte("tokenize --model " + Tiny(), in);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 2) << r.out;
  const std::string bad = WriteFile("bad-utf8.jsonl", "\"a\xff\"\n");
  const CliRun b = Latte("tokenize --model " + Tiny(), bad);
  EXPECT_EQ(b.code, 1);
  EXPECT_EQ(b.err, "latte tokenize: error: stdin line 1: invalid UTF-8 (JSON Lines are UTF-8 text)\n");
}

// ---- README's table of flags is --help's ----

// The flags `latte <command> --help` lists, in order, as written there ("-t,--threads";
// CLI11's "{false}" marks dropped), without -h,--help.
std::vector<std::string> HelpFlags(const std::string& command) {
  const CliRun r = Latte(command + " --help");
  EXPECT_EQ(r.code, 0) << command;
  std::vector<std::string> flags;
  std::istringstream lines(r.out);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("  -", 0) != 0) continue;
    std::string flag = line.substr(2, line.find(' ', 2) - 2);
    flag = std::regex_replace(flag, std::regex("\\{[^}]*\\}"), "");
    if (flag != "-h,--help") flags.push_back(flag);
  }
  return flags;
}

TEST(CliReadme, FlagTableMatchesHelp) {
  std::ifstream in(std::string(LATTE_SOURCE_DIR) + "/README.md");
  ASSERT_TRUE(in) << "README.md";
  std::map<std::string, std::vector<std::string>> table;  // "bench model" -> flags
  const std::regex row("^\\| `latte([a-z -]*)` \\|(.*)\\|$"), code("`([^`]+)`");
  for (std::string line; std::getline(in, line);) {
    std::smatch m;
    if (!std::regex_match(line, m, row)) continue;
    std::string command = m[1].str();
    if (!command.empty()) command = command.substr(1);
    const std::string cells = m[2].str();
    std::vector<std::string>& flags = table[command];
    for (auto it = std::sregex_iterator(cells.begin(), cells.end(), code); it != std::sregex_iterator(); ++it) {
      flags.push_back((*it)[1].str());
    }
  }
  // The root and every command without subcommands, as --help lists them: a new
  // command without a row fails here.
  std::vector<std::string> commands = {""};
  std::vector<std::string> pending = {""};
  while (!pending.empty()) {
    const std::string parent = pending.back();
    pending.pop_back();
    const CliRun help = Latte(parent + " --help");
    const size_t at = help.out.find("Subcommands:\n");
    if (at == std::string::npos) continue;
    std::istringstream lines(help.out.substr(at + 13));
    for (std::string line; std::getline(lines, line) && line.rfind("  ", 0) == 0;) {
      const std::string name = (parent.empty() ? "" : parent + " ") + line.substr(2, line.find(' ', 2) - 2);
      if (Latte(name + " --help").out.find("Subcommands:\n") != std::string::npos) {
        pending.push_back(name);
      } else {
        commands.push_back(name);
      }
    }
  }
  EXPECT_GE(commands.size(), 9u);
  for (const std::string& command : commands) {
    const std::vector<std::string> help = HelpFlags(command);
    std::string expected = "| `latte" + std::string(command.empty() ? "" : " ") + command + "` |";
    for (const std::string& f : help) expected += " `" + f + "`";
    expected += " |";
    ASSERT_TRUE(table.count(command)) << "README.md has no row for latte " << command << "; add:\n" << expected;
    EXPECT_EQ(table[command], help) << "README.md's row for latte " << command << " should read:\n" << expected;
  }
  EXPECT_EQ(table.size(), commands.size());
}

}  // namespace
}  // namespace latte
