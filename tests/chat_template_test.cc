// Chat templates: the interpreter construct by construct, its errors and limits,
// and DeepSeek-V3 / R1 prompts compared byte for byte with Hugging Face's own
// JavaScript Jinja (@huggingface/jinja, run through node from tests/npm).
#include "text/chat_template.h"
#include "text/tokenizer.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace latte {
namespace {

namespace fs = std::filesystem;

// Renders `source` with `context` (JSON text); fails the test on an error.
std::string RenderOk(const std::string& source, const std::string& context = "{}") {
  Result<ChatTemplate> t = ChatTemplate::Parse(source);
  EXPECT_TRUE(t.ok()) << t.status().message();
  if (!t.ok()) return "<parse error>";
  Result<std::string> out = t->Render(nlohmann::ordered_json::parse(context));
  EXPECT_TRUE(out.ok()) << out.status().message();
  return out.ok() ? out.value() : "<render error>";
}

// The error message of parsing or rendering `source` (empty when both succeed).
std::string ErrorOf(const std::string& source, const std::string& context = "{}") {
  Result<ChatTemplate> t = ChatTemplate::Parse(source);
  if (!t.ok()) return t.status().message();
  Result<std::string> out = t->Render(nlohmann::json::parse(context));
  return out.ok() ? "" : out.status().message();
}

TEST(ChatTemplateInterpreter, TextAndOutput) {
  EXPECT_EQ(RenderOk("plain text"), "plain text");
  EXPECT_EQ(RenderOk("a{{ x }}b", R"({"x": "X"})"), "aXb");
  EXPECT_EQ(RenderOk("{{ 1 }} {{ 2.5 }} {{ 2.0 }} {{ true }} {{ none }}|"), "1 2.5 2.0 true |");
  EXPECT_EQ(RenderOk("{{ undefined_name }}|{{ x.y.z }}|"), "||");
  EXPECT_EQ(RenderOk("{# a comment #}x{#- trimmed -#}   y"), "xy");
  EXPECT_EQ(RenderOk("{{ [1, 'a', none] }} {{ {'k': [true]} }}"), R"([1, "a", null] {"k": [true]})");
}

TEST(ChatTemplateInterpreter, WhitespaceControl) {
  EXPECT_EQ(RenderOk("a  {{- 'b' -}}  \n c"), "abc");
  EXPECT_EQ(RenderOk("a \n {%- if true -%} \n b \n {%- endif -%} \n c"), "abc");
  // trim_blocks and lstrip_blocks, as transformers and @huggingface/jinja render.
  EXPECT_EQ(RenderOk("{% if true %}\n  x\n  {% endif %}\ny"), "  x\ny");
  EXPECT_EQ(RenderOk("line\n"), "line");  // one trailing newline is dropped
}

TEST(ChatTemplateInterpreter, StringLiterals) {
  EXPECT_EQ(RenderOk(R"({{ 'a\nb\t\'c\'' }})"), "a\nb\t'c'");
  EXPECT_EQ(RenderOk(R"({{ "dq \"x\" \\ \u00e9" }})"), "dq \"x\" \\ \xc3\xa9");
  EXPECT_EQ(RenderOk("{{ 'ab' 'cd' }}"), "abcd");
}

TEST(ChatTemplateInterpreter, Operators) {
  EXPECT_EQ(RenderOk("{{ 'a' + 'b' ~ 1 ~ 2.5 }}"), "ab12.5");
  EXPECT_EQ(RenderOk("{{ 1 + 2 * 3 }} {{ 7 // 2 }} {{ 7 % 3 }} {{ 7 / 2 }} {{ 2 ** 10 }} {{ -3 }}"),
            "7 3 1 3.5 1024 -3");
  EXPECT_EQ(RenderOk("{{ 1 < 2 }} {{ 2 <= 1 }} {{ 'a' == 'a' }} {{ 1 != 1 }}"), "true false true false");
  EXPECT_EQ(RenderOk("{{ true and 'x' }} {{ false or 'y' }} {{ not 0 }}"), "x y true");
  EXPECT_EQ(RenderOk("{{ 'b' in 'abc' }} {{ 2 in [1, 2] }} {{ 'k' in {'k': 1} }} {{ 3 not in [1] }}"),
            "true true true true");
  EXPECT_EQ(RenderOk("{{ 'x' if false else 'y' }}{{ 'z' if false }}"), "y");
  EXPECT_EQ(RenderOk("{{ [1] + [2] }}"), "[1, 2]");
  EXPECT_EQ(RenderOk("{{ 'x' in undefined_thing }}"), "false");
}

TEST(ChatTemplateInterpreter, Tests) {
  EXPECT_EQ(RenderOk("{{ x is defined }} {{ y is defined }} {{ y is undefined }}", R"({"x": 0})"), "true false true");
  EXPECT_EQ(RenderOk("{{ x is none }} {{ x is not none }} {{ 's' is string }} {{ 3 is number }}", R"({"x": null})"),
            "true false true true");
  EXPECT_EQ(RenderOk("{{ not y is defined }} {{ [1] is iterable }} {{ {} is mapping }} {{ 3 is odd }}"),
            "true true true true");
}

TEST(ChatTemplateInterpreter, SetAndNamespace) {
  EXPECT_EQ(RenderOk("{% set x = 'a' %}{% set y, z = [1, 2] %}{{ x }}{{ y }}{{ z }}"), "a12");
  EXPECT_EQ(RenderOk("{% set ns = namespace(n=0, s='') %}{% for i in [1, 2, 3] %}"
                     "{% set ns.n = ns.n + i %}{% set ns.s = ns.s ~ i %}{% endfor %}{{ ns.n }} {{ ns.s }}"),
            "6 123");
  // A plain set inside a loop stays in the loop's scope.
  EXPECT_EQ(RenderOk("{% set x = 1 %}{% for i in [5] %}{% set x = i %}{{ x }}{% endfor %}{{ x }}"), "51");
}

TEST(ChatTemplateInterpreter, IfElifElse) {
  const std::string t = "{% if n == 1 %}one{% elif n == 2 %}two{% else %}many{% endif %}";
  EXPECT_EQ(RenderOk(t, R"({"n": 1})"), "one");
  EXPECT_EQ(RenderOk(t, R"({"n": 2})"), "two");
  EXPECT_EQ(RenderOk(t, R"({"n": 9})"), "many");
}

TEST(ChatTemplateInterpreter, ForLoops) {
  EXPECT_EQ(RenderOk("{% for x in xs %}{{ loop.index }}{{ loop.index0 }}{{ x }}"
                     "{% if loop.first %}F{% endif %}{% if loop.last %}L{% endif %},{% endfor %}",
                     R"({"xs": ["a", "b", "c"]})"),
            "10aF,21b,32cL,");
  EXPECT_EQ(RenderOk("{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}", R"({"d": {"b": 1, "a": 2}})"),
            "b=1;a=2;");
  EXPECT_EQ(RenderOk("{% for k in d %}{{ k }}{% endfor %}", R"({"d": {"x": 1, "y": 2}})"), "xy");
  EXPECT_EQ(RenderOk("{% for x in [] %}x{% else %}empty{% endfor %}"), "empty");
  EXPECT_EQ(RenderOk("{% for x in [1, 2, 3, 4] if x is even %}{{ x }}{{ loop.length }}{% endfor %}"), "2242");
  EXPECT_EQ(RenderOk("{% for x in range(5) %}{% if x == 1 %}{% continue %}{% endif %}"
                     "{% if x == 3 %}{% break %}{% endif %}{{ x }}{% endfor %}"),
            "02");
}

TEST(ChatTemplateInterpreter, SubscriptsAndSlices) {
  const std::string ctx = R"({"m": {"role": "user", "content": "hello"}, "xs": [1, 2, 3]})";
  EXPECT_EQ(RenderOk("{{ m.role }} {{ m['content'] }} {{ xs[0] }} {{ xs[-1] }} {{ xs[9] }}|", ctx), "user hello 1 3 |");
  EXPECT_EQ(RenderOk("{{ xs[1:] }} {{ xs[:-1] }} {{ xs[::-1] }} {{ m.content[1:3] }} {{ m.content[-1] }}", ctx),
            "[2, 3] [1, 2] [3, 2, 1] el o");
  EXPECT_EQ(RenderOk("{{ 'héllo😀'[1:] }} {{ xs.length }}", ctx), "éllo😀 3");
}

TEST(ChatTemplateInterpreter, Filters) {
  EXPECT_EQ(
      RenderOk("{{ xs | length }} {{ xs | first }} {{ xs | last }} {{ xs | join(', ') }}", R"({"xs": ["a", "b"]})"),
      "2 a b a, b");
  EXPECT_EQ(RenderOk("{{ '  x  ' | trim }}|{{ 3 | string }}|{{ u | default('d') }}|{{ '' | default('e', true) }}"),
            "x|3|d|e");
  EXPECT_EQ(RenderOk("{{ m | tojson }}", R"({"m": {"a": "x\"y\n", "b": [1, 2.5, null, true]}})"),
            R"({"a": "x\"y\n", "b": [1, 2.5, null, true]})");
  EXPECT_EQ(RenderOk("{{ m | tojson(indent=2) }}", R"({"m": {"a": [1]}})"), "{\n  \"a\": [\n    1\n  ]\n}");
  EXPECT_EQ(RenderOk("{{ 'é' | tojson }} {{ 'é' | tojson(ensure_ascii=true) }}"), "\"é\" \"\\u00e9\"");
  EXPECT_EQ(RenderOk("{% for k, v in m | items %}{{ k }}{{ v }}{% endfor %}", R"({"m": {"a": 1}})"), "a1");
  EXPECT_EQ(RenderOk("{{ 'abc' | upper }} {{ 'ABC' | lower }} {{ '😀x' | length }}"), "ABC abc 3");
}

TEST(ChatTemplateInterpreter, StringMethods) {
  EXPECT_EQ(RenderOk("{{ 'a</think>b</think>c'.split('</think>')[-1] }}"), "c");
  EXPECT_EQ(RenderOk("{{ ' a b  c '.split() }}"), R"(["a", "b", "c"])");
  EXPECT_EQ(RenderOk("{{ 'a,b,c'.split(',', 1) }}"), R"(["a", "b,c"])");
  EXPECT_EQ(RenderOk("{{ '  x \n'.strip() }}|{{ '\nx\n\n'.strip('\n') }}|{{ ' x '.lstrip() }}|{{ ' x '.rstrip() }}|"),
            "x|x|x | x|");
  EXPECT_EQ(
      RenderOk("{{ 'hello'.startswith('he') }} {{ 'hello'.endswith('lo') }} {{ 'hello'.startswith(('x', 'h')) }}"),
      "true true true");
  EXPECT_EQ(RenderOk("{{ 'aXbX'.replace('X', '-') }} {{ 'ab'.upper() }} {{ m.get('k', 'dflt') }}", R"({"m": {}})"),
            "a-b- AB dflt");
}

TEST(ChatTemplateInterpreter, ContextKeyOrderKept) {
  Result<ChatTemplate> t = ChatTemplate::Parse("{{ m | tojson }}");
  ASSERT_TRUE(t.ok());
  Result<std::string> out = t->Render(nlohmann::ordered_json::parse(R"({"m": {"z": 1, "a": 2}})"));
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(out.value(), R"({"z": 1, "a": 2})");
}

TEST(ChatTemplateErrors, SyntaxErrorsNameLineAndColumn) {
  EXPECT_EQ(ErrorOf("ab\n{% if x %}yes"),
            "chat template: line 2, column 1: unterminated 'if': expected '{% endif %}' before the end of the "
            "template");
  EXPECT_EQ(ErrorOf("{{ x "), "chat template: line 1, column 6: expected '}}', got end of template");
  EXPECT_EQ(ErrorOf("{{ 'abc }}"), "chat template: line 1, column 4: unterminated string literal");
  EXPECT_EQ(ErrorOf("{% frobnicate %}"),
            "chat template: line 1, column 4: unknown statement 'frobnicate' (supported: set, if, elif, else, "
            "for, break, continue)");
  EXPECT_EQ(ErrorOf("x {# never closed"), "chat template: line 1, column 3: unterminated comment: expected '#}'");
  EXPECT_EQ(ErrorOf("{{ (1 + }}"), "chat template: line 1, column 9: expected an expression, got '}}'");
  EXPECT_EQ(ErrorOf("{{ 1 $ 2 }}"), "chat template: line 1, column 6: unexpected character '$'");
}

TEST(ChatTemplateErrors, RuntimeErrors) {
  EXPECT_EQ(ErrorOf("\n  {{ x | frobnicate }}", R"({"x": 1})"), "line 2, column 8: unknown filter 'frobnicate'");
  EXPECT_EQ(ErrorOf("{{ raise_exception('Conversation roles must alternate user/assistant') }}"),
            "Conversation roles must alternate user/assistant");
  EXPECT_EQ(ErrorOf("{{ 'a' + m.content }}", R"({"m": {"content": null}})"),
            "line 1, column 8: cannot apply '+' to none");
  EXPECT_EQ(ErrorOf("{{ 1 - x }}"), "line 1, column 6: cannot apply '-' to an undefined value");
  EXPECT_EQ(ErrorOf("{{ nofunc() }}"), "line 1, column 4: unknown function 'nofunc'");
  EXPECT_EQ(ErrorOf("{% set x = 1 %}{% set x.a = 2 %}"),
            "line 1, column 23: cannot set an attribute on int (only on namespace() objects)");
  EXPECT_EQ(ErrorOf("{}", "[1]"), "chat template context must be a JSON object");
}

TEST(ChatTemplateLimits, DeeplyNestedTemplatesAreRejected) {
  std::string parens(100000, '(');
  EXPECT_NE(ErrorOf("{{ " + parens + "1 }}").find("nested deeper than"), std::string::npos);
  std::string ifs;
  for (int i = 0; i < 5000; ++i) ifs += "{% if true %}";
  EXPECT_NE(ErrorOf(ifs).find("nested deeper than"), std::string::npos);
  std::string nots;
  for (int i = 0; i < 100000; ++i) nots += "not ";
  EXPECT_NE(ErrorOf("{{ " + nots + "x }}").find("nested deeper than"), std::string::npos);
  std::string lists(100000, '[');
  EXPECT_NE(ErrorOf("{{ " + lists).find("nested deeper than"), std::string::npos);
  std::string chain = "{{ x";
  for (int i = 0; i < 100000; ++i) chain += ".a";
  EXPECT_NE(ErrorOf(chain + " }}").find("longer than"), std::string::npos);
  // Within the limit, nesting works.
  EXPECT_EQ(RenderOk("{{ " + std::string(20, '(') + "1" + std::string(20, ')') + " }}"), "1");
  // Values cannot nest without bound either (nor hold themselves).
  EXPECT_NE(ErrorOf("{% set x = [] %}{% for i in range(1000) %}{% set x = [x] %}{% endfor %}")
                .find("value nested deeper than"),
            std::string::npos);
  EXPECT_NE(ErrorOf("{% set ns = namespace(a=1) %}{% set ns.a = ns %}").find("cannot hold a namespace"),
            std::string::npos);
}

TEST(ChatTemplateLimits, HugeLoopsAndOutputsStop) {
  EXPECT_NE(ErrorOf("{% for i in range(1000000000) %}x{% endfor %}").find("list longer than"), std::string::npos);
  const std::string nested =
      "{% for a in range(1000) %}{% for b in range(1000) %}{% for c in range(1000) %}"
      "{% endfor %}{% endfor %}{% endfor %}";
  EXPECT_NE(ErrorOf(nested).find("loop iterations"), std::string::npos);
  const std::string doubling =
      "{% set ns = namespace(s='x') %}{% for i in range(100) %}{% set ns.s = ns.s + ns.s %}{% endfor %}";
  EXPECT_NE(ErrorOf(doubling).find("longer than the limit"), std::string::npos);
  // Copying a long string over and over is bounded too (each copy counts).
  const std::string copying =
      "{% set ns = namespace(s='x') %}{% for i in range(23) %}{% set ns.s = ns.s + ns.s %}{% endfor %}"
      "{% for i in range(200000) %}{% set n = ns.s | length %}{% endfor %}";
  EXPECT_NE(ErrorOf(copying).find("bytes of string work"), std::string::npos);
  Result<ChatTemplate> t = ChatTemplate::Parse("{% for i in range(100) %}0123456789{% endfor %}");
  ASSERT_TRUE(t.ok());
  t->limits().max_output_bytes = 500;
  Result<std::string> out = t->Render(nlohmann::json::object());
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.status().message().find("500 bytes"), std::string::npos);
}

// ---- Comparison with @huggingface/jinja ------------------------------------------

std::string ReadFile(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// `node` on PATH, or empty.
std::string FindNode() {
  const char* path = std::getenv("PATH");
  if (path == nullptr) return "";
  std::stringstream dirs(path);
  std::string dir;
  while (std::getline(dirs, dir, ':')) {
    const fs::path candidate = fs::path(dir.empty() ? "." : dir) / "node";
    if (::access(candidate.c_str(), X_OK) == 0) return candidate.string();
  }
  return "";
}

struct Reference {
  bool ok;
  std::string text;  // or the error
};

// Renders every context with @huggingface/jinja; fails the test when node or the
// package is missing (scripts/test.sh runs `npm ci` in tests/npm first).
std::vector<Reference> RenderWithHuggingFace(const std::string& source,
                                             const std::vector<nlohmann::ordered_json>& contexts) {
  const fs::path npm_dir = LATTE_NPM_DIR;
  const std::string node = FindNode();
  if (node.empty()) {
    ADD_FAILURE() << "node is not on PATH: install Node.js (scripts/install-deps.sh) to compare chat "
                     "templates with @huggingface/jinja";
    return {};
  }
  if (!fs::exists(npm_dir / "node_modules" / "@huggingface" / "jinja" / "package.json")) {
    ADD_FAILURE() << npm_dir.string() << "/node_modules/@huggingface/jinja is missing: run `cd " << npm_dir.string()
                  << " && npm ci` (scripts/test.sh does)";
    return {};
  }
  const fs::path input = fs::path(testing::TempDir()) / ("chat_template_input_" + std::to_string(::getpid()) + ".json");
  nlohmann::ordered_json request = {{"template", source}, {"contexts", contexts}};
  std::ofstream(input, std::ios::binary) << request.dump();
  const std::string command =
      "'" + node + "' '" + (npm_dir / "render_template.js").string() + "' '" + input.string() + "'";
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) {
    ADD_FAILURE() << "cannot run " << command;
    return {};
  }
  std::string output;
  char buf[65536];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), pipe)) > 0) output.append(buf, n);
  const int status = ::pclose(pipe);
  fs::remove(input);
  if (status != 0) {
    ADD_FAILURE() << command << " failed (status " << status << "): " << output;
    return {};
  }
  const nlohmann::json results = nlohmann::json::parse(output, nullptr, false);
  if (!results.is_array() || results.size() != contexts.size()) {
    ADD_FAILURE() << "unexpected output from render_template.js: " << output.substr(0, 500);
    return {};
  }
  std::vector<Reference> refs;
  for (const auto& r : results) {
    refs.push_back(
        {r["ok"].get<bool>(), r["ok"].get<bool>() ? r["text"].get<std::string>() : r["error"].get<std::string>()});
  }
  return refs;
}

std::string Escaped(std::string_view s) {
  std::string out;
  for (char c : s) {
    if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else {
      out += c;
    }
  }
  return out;
}

// The first difference with 60 bytes of context either side.
std::string FirstDifference(const std::string& expected, const std::string& actual) {
  size_t i = 0;
  while (i < expected.size() && i < actual.size() && expected[i] == actual[i]) ++i;
  const size_t from = i > 60 ? i - 60 : 0;
  std::ostringstream s;
  s << "first difference at byte " << i << " (lengths " << expected.size() << " vs " << actual.size()
    << ")\n  @huggingface/jinja: ..." << Escaped(expected.substr(from, i - from + 60))
    << "...\n  latte:              ..." << Escaped(actual.substr(from, i - from + 60)) << "...";
  return s.str();
}

// The conversations both templates are rendered with (each with and without a
// generation prompt).
const char* const kConversations = R"json([
  [{"role": "system", "content": "You are a helpful assistant."}, {"role": "user", "content": "Hello!"}],
  [{"role": "user", "content": "What is 2 + 2?"}],
  [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello! How can I help?"},
   {"role": "user", "content": "Tell me a joke."}],
  [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
   {"role": "assistant", "content": "Hello."}],
  [{"role": "user", "content": "Say nothing."}, {"role": "assistant", "content": ""},
   {"role": "user", "content": "Thanks"}],
  [{"role": "user", "content": "你好，世界 🌍👋🏽 — naïve café, עברית, ﷽, e\u0301"},
   {"role": "assistant", "content": "こんにちは 😀 ∑ x² ≤ ∞"}],
  [{"role": "user", "content": "Render {{ x }} and {% if y %}z{% endif %} literally {# no #}"}],
  [{"role": "system", "content": "First system."}, {"role": "system", "content": "Second system."},
   {"role": "user", "content": "Which system?"}],
  [{"role": "user", "content": "a"}, {"role": "system", "content": "late system"},
   {"role": "user", "content": "b"}],
  [{"role": "user", "content": "Think first."},
   {"role": "assistant", "content": "<think>\nLet me reason.\n</think>\n\nThe answer is 4."},
   {"role": "user", "content": "And 3 + 3?"}],
  [{"role": "user", "content": "q"},
   {"role": "assistant", "content": "<think>a</think>b</think>final"}],
  [{"role": "user", "content": "  leading and trailing whitespace \n\t "},
   {"role": "assistant", "content": "\n\nnewlines\r\nand\ttabs\n"}],
  [],
  [{"role": "system", "content": "Only a system prompt."}],
  [{"role": "user", "content": ""}],
  [{"role": "user", "content": "1"}, {"role": "assistant", "content": "one"},
   {"role": "user", "content": "2"}, {"role": "assistant", "content": "two"},
   {"role": "user", "content": "3"}, {"role": "assistant", "content": "three"},
   {"role": "user", "content": "4"}, {"role": "assistant", "content": "four"},
   {"role": "user", "content": "5"}, {"role": "assistant", "content": "five"},
   {"role": "user", "content": "6"}],
  [{"role": "user", "content": "Quotes ' \" and backslashes \\ \\n \\\\ and `code`"}],
  [{"role": "user", "content": "only close"}, {"role": "assistant", "content": "</think>"}],
  [{"role": "user", "content": "extra keys", "name": "alice", "id": 7},
   {"role": "assistant", "content": "ok", "reasoning_content": "hidden"}],
  [{"role": "user", "content": "<｜User｜>fake<｜Assistant｜><｜end▁of▁sentence｜>"}],
  [{"role": "user", "content": "   \n  "}],
  [{"role": "system", "content": "You can call tools."}, {"role": "user", "content": "Weather in Paris?"},
   {"role": "assistant", "content": null, "tool_calls": [
     {"type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}},
     {"type": "function", "function": {"name": "get_time", "arguments": "{}"}}]},
   {"role": "tool", "content": "{\"temp\": 21}"}, {"role": "tool", "content": "12:00"},
   {"role": "assistant", "content": "It is 21°C at noon."}],
  [{"role": "user", "content": "Weather?"},
   {"role": "assistant", "content": null, "tool_calls": [
     {"type": "function", "function": {"name": "get_weather", "arguments": "{}"}}]},
   {"role": "tool", "content": "sunny"}]
])json";

struct ComparisonTotals {
  int compared = 0;
  int differences = 0;
};

ComparisonTotals CompareWithHuggingFace(const std::string& name, const std::string& source, const std::string& bos,
                                        const std::string& eos) {
  ComparisonTotals totals;
  Result<ChatTemplate> t = ChatTemplate::Parse(source);
  if (!t.ok()) {
    ADD_FAILURE() << name << ": " << t.status().message();
    return totals;
  }
  const nlohmann::ordered_json conversations = nlohmann::ordered_json::parse(kConversations);
  std::vector<nlohmann::ordered_json> contexts;
  for (const auto& messages : conversations) {
    for (int prompt = 0; prompt < 2; ++prompt) {
      contexts.push_back(
          {{"messages", messages}, {"add_generation_prompt", prompt == 1}, {"bos_token", bos}, {"eos_token", eos}});
    }
  }
  // add_generation_prompt absent: the templates default it to false.
  contexts.push_back({{"messages", conversations[0]}, {"bos_token", bos}, {"eos_token", eos}});
  const std::vector<Reference> refs = RenderWithHuggingFace(source, contexts);
  if (refs.size() != contexts.size()) return totals;
  for (size_t i = 0; i < contexts.size(); ++i) {
    const Result<std::string> ours = t->Render(contexts[i]);
    ++totals.compared;
    SCOPED_TRACE(name + " context " + std::to_string(i) + ": " + contexts[i].dump());
    if (refs[i].ok != ours.ok()) {
      ++totals.differences;
      ADD_FAILURE() << "@huggingface/jinja " << (refs[i].ok ? "rendered" : "failed: " + refs[i].text) << "; latte "
                    << (ours.ok() ? "rendered" : "failed: " + ours.status().message());
      continue;
    }
    if (!ours.ok()) continue;  // both refuse (none of the fixed conversations should)
    if (ours.value() != refs[i].text) {
      ++totals.differences;
      ADD_FAILURE() << FirstDifference(refs[i].text, ours.value());
    }
  }
  return totals;
}

const fs::path kV3Config =
    fs::path(LATTE_NPM_DIR) / "node_modules" / "@lenml" / "tokenizer-deepseek_v3" / "models" / "tokenizer_config.json";

TEST(ChatTemplateReference, DeepSeekV3MatchesHuggingFaceJinja) {
  if (!fs::exists(kV3Config)) {
    FAIL() << kV3Config.string() << " is missing: run `cd " << LATTE_NPM_DIR << " && npm ci`";
  }
  Result<ChatTemplate> t = ChatTemplate::FromTokenizerConfig(kV3Config.string());
  ASSERT_TRUE(t.ok()) << t.status().message();
  EXPECT_EQ(t->bos_token(), "<｜begin▁of▁sentence｜>");
  EXPECT_EQ(t->eos_token(), "<｜end▁of▁sentence｜>");
  const ComparisonTotals totals = CompareWithHuggingFace("DeepSeek-V3", t->source(), t->bos_token(), t->eos_token());
  std::printf("DeepSeek-V3 chat template: %d renders compared with @huggingface/jinja, %d differences\n",
              totals.compared, totals.differences);
  EXPECT_GE(totals.compared, 40);
  EXPECT_EQ(totals.differences, 0);

  // The config's bos token fills in when the context leaves it out.
  Result<std::string> out = t->Render(
      nlohmann::json::parse(R"({"messages": [{"role": "user", "content": "Hi"}], "add_generation_prompt": true})"));
  ASSERT_TRUE(out.ok()) << out.status().message();
  EXPECT_EQ(out.value(), "<｜begin▁of▁sentence｜><｜User｜>Hi<｜Assistant｜>");
}

TEST(ChatTemplateReference, DeepSeekR1MatchesHuggingFaceJinja) {
  const fs::path fixture = fs::path(LATTE_NPM_DIR) / "deepseek_r1_chat_template.jinja";
  const std::string source = ReadFile(fixture);
  ASSERT_FALSE(source.empty()) << fixture.string();
  const ComparisonTotals totals =
      CompareWithHuggingFace("DeepSeek-R1", source, "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>");
  std::printf("DeepSeek-R1 chat template: %d renders compared with @huggingface/jinja, %d differences\n",
              totals.compared, totals.differences);
  EXPECT_GE(totals.compared, 40);
  EXPECT_EQ(totals.differences, 0);

  Result<ChatTemplate> t = ChatTemplate::Parse(source);
  ASSERT_TRUE(t.ok());
  Result<std::string> out = t->Render(nlohmann::json::parse(R"({
      "bos_token": "<s>",
      "messages": [{"role": "user", "content": "2+2?"},
                   {"role": "assistant", "content": "<think>add</think>4"},
                   {"role": "user", "content": "3+3?"}],
      "add_generation_prompt": true})"));
  ASSERT_TRUE(out.ok()) << out.status().message();
  EXPECT_EQ(out.value(),
            "<s><｜User｜>2+2?<｜Assistant｜>4<｜end▁of▁sentence｜><｜User｜>3+3?<｜Assistant｜><think>\n");
}

// Small templates exercising constructs the DeepSeek templates do not use, also
// checked against the reference.
TEST(ChatTemplateReference, ConstructsMatchHuggingFaceJinja) {
  const std::vector<std::string> sources = {
      "{% for m in messages %}{{ loop.index }}/{{ loop.length }} {{ m.role | upper }}: {{ m.content | trim }}\n"
      "{% endfor %}",
      "{{ messages | length }} {{ (messages | last).content }} {{ (messages | first)['role'] }}",
      "{% for m in messages if m.role != 'system' %}{{ m.content[1:] }}|{{ m.content[-1] }}|{% endfor %}",
      "{{ messages | tojson }}",
      "{{ messages[0] | tojson(indent=2) }}",
      "{%- for m in messages -%}\n  {{- m.content.split(' ') | join('_') -}}\n  {% if not loop.last %},{% endif %}\n"
      "{%- endfor %}",
      "{% set x = {'a': [1, 2.5, true, none], 'b': 'q'} %}{{ x }} {{ x.a }} {{ 2.0 }} {{ 1 / 4 }} {{ 10 // 3 }}",
      "{{ bos_token ~ 3 ~ true }} {{ 'x' if messages else 'y' }} {{ messages[0].missing is defined }}",
      "{% if messages[0].content.startswith('You') %}S{% elif messages | length > 1 %}M{% else %}O{% endif %}",
      "  {% for m in messages %}\n    {{ m.role }}\n  {% endfor %}\n",
  };
  const std::vector<nlohmann::ordered_json> contexts = {
      {{"bos_token", "<s>"},
       {"messages",
        {{{"role", "system"}, {"content", "You are  kind. "}}, {{"role", "user"}, {"content", " héllo wörld 😀 "}}}}},
      {{"bos_token", "<s>"}, {"messages", {{{"role", "user"}, {"content", "a b c"}}}}},
  };
  int compared = 0;
  for (const std::string& source : sources) {
    Result<ChatTemplate> t = ChatTemplate::Parse(source);
    ASSERT_TRUE(t.ok()) << source << ": " << t.status().message();
    const std::vector<Reference> refs = RenderWithHuggingFace(source, contexts);
    ASSERT_EQ(refs.size(), contexts.size());
    for (size_t i = 0; i < contexts.size(); ++i) {
      const Result<std::string> ours = t->Render(contexts[i]);
      ASSERT_TRUE(refs[i].ok) << source << ": " << refs[i].text;
      ASSERT_TRUE(ours.ok()) << source << ": " << ours.status().message();
      EXPECT_EQ(ours.value(), refs[i].text) << source << "\n" << FirstDifference(refs[i].text, ours.value());
      ++compared;
    }
  }
  EXPECT_EQ(compared, 20);
}

}  // namespace
}  // namespace latte

namespace latte {
namespace {

// The rendered prompt's ids, the thing the model sees: latte's template + latte's
// tokenizer against @huggingface/jinja + Hugging Face's tokenizers, for every
// conversation above with and without the generation prompt.
TEST(ChatTemplateReference, DeepSeekV3RenderedIdsMatchHuggingFace) {
  const fs::path tokenizer_json = kV3Config.parent_path() / "tokenizer.json";
  ASSERT_TRUE(fs::exists(tokenizer_json)) << tokenizer_json.string() << ": run npm ci in " << LATTE_NPM_DIR;
  Result<ChatTemplate> t = ChatTemplate::FromTokenizerConfig(kV3Config.string());
  ASSERT_TRUE(t.ok()) << t.status().message();
  auto tokenizer = Tokenizer::FromFile(tokenizer_json.string());
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status().message();
  const std::string node = FindNode();
  ASSERT_FALSE(node.empty()) << "node is not on PATH (scripts/install-deps.sh installs it)";

  std::vector<nlohmann::ordered_json> contexts;
  for (const auto& messages : nlohmann::ordered_json::parse(kConversations)) {
    for (bool prompt : {false, true}) {
      contexts.push_back({{"messages", messages},
                          {"add_generation_prompt", prompt},
                          {"bos_token", t->bos_token()},
                          {"eos_token", t->eos_token()}});
    }
  }
  const fs::path input = fs::path(testing::TempDir()) / ("chat_ids_" + std::to_string(::getpid()) + ".json");
  std::ofstream(input, std::ios::binary)
      << nlohmann::ordered_json({{"template", t->source()}, {"contexts", contexts}}).dump();
  const std::string command = "'" + node + "' '" + (fs::path(LATTE_NPM_DIR) / "render_and_tokenize.js").string() +
                              "' '" + input.string() + "' '" + tokenizer_json.string() + "'";
  FILE* pipe = ::popen(command.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  std::string output;
  char buf[65536];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), pipe)) > 0) output.append(buf, n);
  ASSERT_EQ(::pclose(pipe), 0) << command;
  fs::remove(input);
  const nlohmann::json refs = nlohmann::json::parse(output, nullptr, false);
  ASSERT_TRUE(refs.is_array() && refs.size() == contexts.size()) << output.substr(0, 300);

  int differences = 0;
  for (size_t i = 0; i < contexts.size(); ++i) {
    const Result<std::string> text = t->Render(contexts[i]);
    ASSERT_TRUE(text.ok()) << text.status().message();
    const std::vector<int32_t> ids = (*tokenizer)->Encode(text.value());
    const std::vector<int32_t> expected = refs[i]["ids"].get<std::vector<int32_t>>();
    if (ids != expected) {
      ++differences;
      ADD_FAILURE() << "context " << i << ": ids differ for " << Escaped(text.value());
    }
    // BOS comes from the template, once: the first id is BOS exactly when the template wrote it.
    if (!ids.empty() && text.value().rfind(t->bos_token(), 0) == 0) {
      EXPECT_EQ(ids[0], (*tokenizer)->TokenToId(t->bos_token()).value_or(-1));
    }
  }
  std::printf("DeepSeek-V3 rendered prompts: %zu compared by id with @huggingface/jinja + tokenizers, %d differences\n",
              contexts.size(), differences);
  EXPECT_GE(contexts.size(), 40u);
  EXPECT_EQ(differences, 0);
}

}  // namespace
}  // namespace latte
