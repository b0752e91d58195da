// latte tokenize: text <-> token ids as JSON Lines, with the model's tokenizer.json.
//   encode: each stdin line is a JSON string  -> a JSON array of ids (no BOS added)
//   --decode: each line is a JSON array of ids -> a JSON string
//   --bench FILE: encoding speed on FILE's bytes, in MB/s on one thread
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <optional>
#include <sstream>

#include <nlohmann/json.hpp>

#include "cli/arg_checks.h"
#include "cli/commands.h"
#include "engine/model_files.h"
#include "model/config.h"
#include "text/tokenizer.h"
#include "text/utf8.h"

namespace latte::cli {
namespace {

struct TokenizeArgs {
  std::string model;
  std::optional<int64_t> model_vocab;  // config.json's vocab_size, with --model
  std::string tokenizer;
  bool decode = false;
  bool skip_special = false;
  std::string bench;
  int bench_repeats = 5;
};

Result<std::unique_ptr<Tokenizer>> LoadTokenizer(const TokenizeArgs& args) {
  if (args.model.empty() == args.tokenizer.empty())
    return Status::InvalidArgument("give exactly one of --model and --tokenizer");
  if (args.model.empty()) return Tokenizer::FromFile(args.tokenizer);
  LATTE_ASSIGN_OR_RETURN(const ModelFiles files, ModelFiles::Find(args.model));
  return files.LoadTokenizer();
}

// One output line for one input line.
Result<std::string> ProcessLine(const Tokenizer& tok, const TokenizeArgs& args, const std::string& line) {
  if (!IsValidUtf8(line)) return Status::InvalidArgument("invalid UTF-8 (JSON Lines are UTF-8 text)");
  const nlohmann::json in = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (in.is_discarded()) return Status::DataLoss("not valid JSON");
  if (args.decode) {
    if (!in.is_array()) return Status::InvalidArgument("expected a JSON array of token ids");
    // As generate: an id the tokenizer has no token for decodes to nothing. With
    // --model, an id the model cannot produce (>= its vocab_size) is an error.
    const int64_t limit = args.model_vocab.value_or(std::numeric_limits<int32_t>::max());
    std::vector<int32_t> ids;
    for (const auto& v : in) {
      if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() >= limit) {
        return Status::InvalidArgument(
            v.dump() + " is not a token id" +
            (args.model_vocab ? " of this model (vocab_size " + std::to_string(limit) + ")" : ""));
      }
      ids.push_back(v.get<int32_t>());
    }
    return nlohmann::json(tok.Decode(ids, args.skip_special)).dump();
  }
  if (!in.is_string()) return Status::InvalidArgument("expected a JSON string");
  return nlohmann::json(tok.Encode(in.get<std::string>())).dump();
}

// Encodes FILE `repeats` times; the first pass starts with an empty pre-token cache.
Status RunBench(const Tokenizer& tok, const TokenizeArgs& args) {
  std::ifstream in(args.bench, std::ios::binary);
  if (!in) return Status::NotFound(args.bench + ": cannot open");
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str();
  double best = 1e30, first = 0;
  size_t tokens = 0;
  for (int r = 0; r < std::max(1, args.bench_repeats); ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    tokens = tok.Encode(text).size();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (r == 0) first = s;
    best = std::min(best, s);
  }
  const double mb = static_cast<double>(text.size()) / 1e6;
  std::printf("latte: %zu bytes, %zu tokens, first pass %.1f MB/s, best of %d %.1f MB/s\n", text.size(), tokens,
              mb / first, std::max(1, args.bench_repeats), mb / best);
  return Status::Ok();
}

Status RunTokenize(TokenizeArgs args, const CLI::App& cmd) {
  LATTE_RETURN_IF_ERROR(RefuseUnless(cmd, args.decode, {"--skip-special"}, "without --decode"));
  LATTE_RETURN_IF_ERROR(RefuseUnless(cmd, !args.bench.empty(), {"--bench-repeats"}, "without --bench"));
  LATTE_RETURN_IF_ERROR(RefuseUnless(cmd, args.bench.empty(), {"--decode"}, "with --bench (it times encoding)"));
  LATTE_ASSIGN_OR_RETURN(auto tok, LoadTokenizer(args));
  if (!args.model.empty()) {
    LATTE_ASSIGN_OR_RETURN(const ModelFiles files, ModelFiles::Find(args.model));
    if (Result<ModelConfig> config = files.Config(); config.ok()) {
      args.model_vocab = config->vocab_size;
    } else if (files.is_gguf() || std::filesystem::exists(args.model + "/config.json")) {
      return config.status();
    }
  }
  if (!args.bench.empty()) return RunBench(*tok, args);
  std::string line;
  for (int64_t line_no = 1; std::getline(std::cin, line); ++line_no) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos) continue;  // blank lines carry nothing
    auto out = ProcessLine(*tok, args, line);
    if (!out.ok()) return out.status().WithContext("stdin line " + std::to_string(line_no));
    std::fwrite(out->data(), 1, out->size(), stdout);
    std::fputc('\n', stdout);
    if (std::ferror(stdout)) break;  // reported at exit
  }
  return Status::Ok();
}

}  // namespace

void AddTokenizeCommand(CLI::App& app) {
  auto args = std::make_shared<TokenizeArgs>();
  CLI::App* cmd = app.add_subcommand(
      "tokenize", "JSON Lines on stdin: strings -> id arrays (no BOS added), or with --decode arrays -> strings");
  cmd->add_option("--model", args->model, "Model directory (tokenizer.json, tokenizer_config.json)");
  cmd->add_option("--tokenizer", args->tokenizer, "A tokenizer.json file");
  cmd->add_flag("--decode", args->decode, "Decode id arrays instead of encoding strings");
  cmd->add_flag("--skip-special", args->skip_special, "With --decode: leave out special tokens");
  cmd->add_option("--bench", args->bench, "Time encoding this file (one thread) instead of reading stdin");
  cmd->add_option("--bench-repeats", args->bench_repeats, "Passes over the --bench file")
      ->check(IntIn(1, 1000000))
      ->capture_default_str();
  cmd->callback([args, cmd] { ExitOnError("tokenize", RunTokenize(*args, *cmd)); });
}

}  // namespace latte::cli
