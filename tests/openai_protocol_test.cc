// The server's request parsing and validation (server/openai_protocol.h): every field
// read with its type and range, the message naming it, prompts in all four shapes
// tokenized as the tokenizer itself does, and chat messages rendered by the template.
#include "server/openai_protocol.h"

#include <gtest/gtest.h>

#include <fstream>

#include "test_models.h"

namespace latte::server {
namespace {

using nlohmann::json;

struct Fixture {
  std::unique_ptr<Tokenizer> tokenizer;
  std::optional<ChatTemplate> chat;
  ServedModel model;
};

const Fixture& Tiny() {
  static const Fixture f = [] {
    Fixture f;
    const std::string dir = testing_models::MakeModel("tiny", {});
    f.tokenizer = std::move(Tokenizer::FromDirectory(dir)).value();
    f.chat = std::move(ChatTemplate::FromTokenizerConfig(dir + "/tokenizer_config.json")).value();
    f.model.name = "tiny";
    f.model.path = dir;
    f.model.limits = {
        .vocab_size = 512, .max_model_len = 4096, .pool_tokens = 1024, .max_num_seqs = 8, .has_tokenizer = true};
    f.model.tokenizer = f.tokenizer.get();
    f.model.chat_template = &*f.chat;
    return f;
  }();
  return f;
}

MaybeError Completion(const json& body, CompletionRequest* out = nullptr) {
  CompletionRequest r;
  auto e = ParseCompletionRequest(body, Tiny().model, r);
  if (out) *out = std::move(r);
  return e;
}

MaybeError Chat(const json& body, ChatRequest* out = nullptr) {
  ChatRequest r;
  auto e = ParseChatRequest(body, Tiny().model, r);
  if (out) *out = std::move(r);
  return e;
}

// A 400 whose param is `param` and whose message names it.
void ExpectBadField(const MaybeError& e, const std::string& param) {
  ASSERT_TRUE(e.has_value()) << "accepted; expected an error about " << param;
  EXPECT_EQ(e->status, 400) << e->message;
  EXPECT_EQ(e->type, "invalid_request_error");
  EXPECT_EQ(e->param, param) << e->message;
  EXPECT_NE(e->message.find(param), std::string::npos) << e->message;
}

TEST(OpenAiProtocol, TextPromptGetsBosThenTheTokenizersIds) {
  CompletionRequest r;
  ASSERT_FALSE(Completion({{"prompt", "hello world"}}, &r));
  ASSERT_EQ(r.prompts.size(), 1u);
  std::vector<int32_t> want = {*Tiny().tokenizer->bos_id()};
  for (int32_t id : Tiny().tokenizer->Encode("hello world")) want.push_back(id);
  EXPECT_EQ(r.prompts[0].prompt, want);
  EXPECT_EQ(r.prompt_texts[0], "hello world");
  EXPECT_EQ(r.prompts[0].max_tokens, 16);  // OpenAI's default
  ASSERT_FALSE(Completion({{"prompt", "hello world"}, {"add_special_tokens", false}}, &r));
  EXPECT_EQ(r.prompts[0].prompt, Tiny().tokenizer->Encode("hello world"));
}

TEST(OpenAiProtocol, PromptShapes) {
  CompletionRequest r;
  ASSERT_FALSE(Completion({{"prompt", json::array({"a b", "c"})}}, &r));
  EXPECT_EQ(r.prompts.size(), 2u);
  ASSERT_FALSE(Completion({{"prompt", json::array({5, 6, 7})}}, &r));
  ASSERT_EQ(r.prompts.size(), 1u);
  EXPECT_EQ(r.prompts[0].prompt, (std::vector<int32_t>{5, 6, 7}));  // ids go in as given: no BOS
  ASSERT_FALSE(Completion({{"prompt", json::array({json::array({1, 2}), json::array({3})})}}, &r));
  ASSERT_EQ(r.prompts.size(), 2u);
  EXPECT_EQ(r.prompts[1].prompt, (std::vector<int32_t>{3}));
  ExpectBadField(Completion({{"prompt", json::array({"a", 3})}}), "prompt");
  ExpectBadField(Completion({{"prompt", ""}}), "prompt");
  ExpectBadField(Completion({{"prompt", json::array()}}), "prompt");
  ExpectBadField(Completion({{"prompt", json::array({json::array()})}}), "prompt");
  ExpectBadField(Completion({{"prompt", json::array({1, 512})}}), "prompt");
  ExpectBadField(Completion({{"prompt", json::array({1, -1})}}), "prompt");
  ExpectBadField(Completion({{"prompt", 5}}), "prompt");
  ExpectBadField(Completion(json::object()), "prompt");
  // Prompts × n is bounded: 600 prompts × n 2 is more than 1024 sequences.
  json many = json::array();
  for (int i = 0; i < 600; ++i) many.push_back(json::array({1}));
  EXPECT_FALSE(Completion({{"prompt", many}}));
  ExpectBadField(Completion({{"prompt", many}, {"n", 2}}), "prompt");
}

TEST(OpenAiProtocol, WrongTypesNameTheField) {
  const json base = {{"prompt", "x"}};
  const std::vector<std::pair<std::string, json>> cases = {
      {"max_tokens", "10"},
      {"max_tokens", 1.5},
      {"temperature", "hot"},
      {"top_p", true},
      {"top_k", 2.5},
      {"n", "2"},
      {"stream", 1},
      {"echo", "yes"},
      {"logprobs", true},
      {"seed", "s"},
      {"stop", 3},
      {"stop", json::array({1})},
      {"ignore_eos", 0},
      {"stop_token_ids", 5},
      {"presence_penalty", "x"},
      {"frequency_penalty", json::array()},
      {"repetition_penalty", json::object()},
      {"min_p", "0"},
      {"skip_special_tokens", 1},
      {"best_of", "1"},
  };
  for (const auto& [field, value] : cases) {
    json body = base;
    body[field] = value;
    SCOPED_TRACE(field + " = " + value.dump());
    ExpectBadField(Completion(body), field);
  }
}

TEST(OpenAiProtocol, RangesNameTheField) {
  const std::vector<std::pair<std::string, json>> cases = {
      {"max_tokens", -1},
      {"temperature", -0.5},
      {"temperature", 2.5},
      {"top_p", 0},
      {"top_p", 1.5},
      {"top_k", -2},
      {"logprobs", 21},
      {"logprobs", -1},
      {"n", 0},
      {"n", -3},
      {"n", 9},
      {"n", int64_t{1} << 40},
      {"best_of", 3},
      {"min_p", 1.5},
      {"presence_penalty", 3},
      {"repetition_penalty", 0},
      {"stop_token_ids", json::array({512})},
      {"stop", json::array({"a", "b", "c", "d", "e"})},
  };
  for (const auto& [field, value] : cases) {
    json body = {{"prompt", "x"}};
    body[field] = value;
    SCOPED_TRACE(field + " = " + value.dump());
    ExpectBadField(Completion(body), field);
  }
  // vLLM fields latte does not implement: refused unless neutral, never silently ignored.
  ExpectBadField(Completion({{"prompt", "x"}, {"min_tokens", 3}}), "min_tokens");
  ExpectBadField(Completion({{"prompt", "x"}, {"include_stop_str_in_output", true}}), "include_stop_str_in_output");
  EXPECT_FALSE(
      Completion({{"prompt", "x"}, {"min_tokens", 0}, {"response_format", {{"type", "text"}}}, {"user", "u"}}));
  // Integral floats are integers (pydantic's lax mode, which vLLM's server uses).
  EXPECT_FALSE(Completion({{"prompt", "x"}, {"max_tokens", 4.0}}));
  // null is "use the default".
  EXPECT_FALSE(Completion({{"prompt", "x"}, {"max_tokens", nullptr}, {"temperature", nullptr}}));
}

TEST(OpenAiProtocol, ResponseFormatBecomesTheEnginesOutputConstraint) {
  const json messages = json::array({{{"role", "user"}, {"content", "x"}}});
  ChatRequest chat;
  ASSERT_FALSE(Chat({{"messages", messages}, {"response_format", {{"type", "json_object"}}}}, &chat));
  EXPECT_EQ(json::parse(chat.request.output_constraint), json({{"type", "json_object"}}));
  const json schema = {{"type", "object"}, {"properties", {{"a", {{"type", "integer"}}}}}, {"required", {"a"}}};
  CompletionRequest completion;
  ASSERT_FALSE(
      Completion({{"prompt", "x"},
                  {"response_format",
                   {{"type", "json_schema"}, {"json_schema", {{"name", "s"}, {"schema", schema}, {"strict", true}}}}}},
                 &completion));
  EXPECT_EQ(json::parse(completion.prompts[0].output_constraint), json({{"type", "json_schema"}, {"schema", schema}}));
  ASSERT_FALSE(Chat({{"messages", messages}, {"response_format", {{"type", "text"}}}}, &chat));
  EXPECT_EQ(chat.request.output_constraint, "");

  ExpectBadField(Chat({{"messages", messages}, {"response_format", {{"type", "regex"}}}}), "response_format.type");
  ExpectBadField(Chat({{"messages", messages}, {"response_format", "json"}}), "response_format");
  ExpectBadField(Chat({{"messages", messages}, {"response_format", {{"type", "json_schema"}}}}),
                 "response_format.json_schema");
  ExpectBadField(
      Chat({{"messages", messages},
            {"response_format", {{"type", "json_schema"}, {"json_schema", {{"name", 3}, {"schema", schema}}}}}}),
      "response_format.json_schema.name");
  const json pattern = {{"type", "object"}, {"properties", {{"a", {{"type", "string"}, {"pattern", "^x"}}}}}};
  MaybeError e =
      Chat({{"messages", messages},
            {"response_format", {{"type", "json_schema"}, {"json_schema", {{"name", "s"}, {"schema", pattern}}}}}});
  ExpectBadField(e, "response_format.json_schema.schema");
  EXPECT_NE(e->message.find("\"pattern\" at properties.a is not supported"), std::string::npos) << e->message;
}

TEST(OpenAiProtocol, ToolsAndToolHistoryReachTheTemplate) {
  std::ifstream in(std::string(LATTE_NPM_DIR) + "/deepseek_r1_chat_template.jinja", std::ios::binary);
  const std::string source((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  Result<ChatTemplate> r1 = ChatTemplate::Parse(source);
  ASSERT_TRUE(r1.ok()) << r1.status().message();
  ServedModel model = Tiny().model;
  model.chat_template = &*r1;
  model.tool_parser = ToolCallFormat::kDeepSeekV3;
  const json tools = json::array(
      {{{"type", "function"},
        {"function",
         {{"name", "get_weather"}, {"parameters", {{"type", "object"}, {"properties", json::object()}}}}}}});
  const json call = {{"id", "call_1"},
                     {"type", "function"},
                     {"function", {{"name", "get_weather"}, {"arguments", "{\"city\": \"Paris\"}"}}}};
  const json messages = json::array({{{"role", "user"}, {"content", "Weather?"}},
                                     {{"role", "assistant"}, {"tool_calls", json::array({call})}},
                                     {{"role", "tool"}, {"tool_call_id", "call_1"}, {"content", "21"}},
                                     {{"role", "user"}, {"content", "Thanks"}}});
  ChatRequest r;
  ASSERT_FALSE(ParseChatRequest({{"messages", messages}, {"tools", tools}}, model, r));
  EXPECT_EQ(r.tool_calls, ToolCallFormat::kDeepSeekV3);
  EXPECT_FALSE(r.request.skip_special_tokens);
  // What the template gets: content null on the call's turn, the tools beside the messages.
  json seen = messages;
  seen[1]["content"] = nullptr;
  const std::string want =
      r1->Render(json{{"messages", seen}, {"add_generation_prompt", true}, {"tools", tools}}).value();
  EXPECT_EQ(r.prompt_text, want);
  EXPECT_NE(want.find("<｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{\"city\": \"Paris\"}"),
            std::string::npos)
      << want;
  EXPECT_NE(want.find("<｜tool▁output▁begin｜>21<｜tool▁output▁end｜>"), std::string::npos) << want;

  // tool_choice none: the tools are rendered, the output is not parsed.
  ChatRequest none;
  ASSERT_FALSE(ParseChatRequest({{"messages", messages}, {"tools", tools}, {"tool_choice", "none"}}, model, none));
  EXPECT_FALSE(none.tool_calls.has_value());
  EXPECT_EQ(none.prompt_text, want);
}

TEST(OpenAiProtocol, ToolErrors) {
  const json user = json::array({{{"role", "user"}, {"content", "Hi"}}});
  const json tools = json::array({{{"type", "function"}, {"function", {{"name", "f"}}}}});
  // Tiny's server has no tool-call parser: auto (the default with tools) is vLLM's 400.
  MaybeError e = Chat({{"messages", user}, {"tools", tools}});
  ExpectBadField(e, "tool_choice");
  EXPECT_NE(e->message.find("--enable-auto-tool-choice"), std::string::npos) << e->message;
  ExpectBadField(Chat({{"messages", user},
                       {"tools", tools},
                       {"tool_choice", {{"type", "function"}, {"function", {{"name", "g"}}}}}}),
                 "tool_choice.function.name");
  ExpectBadField(Chat({{"messages", user},
                       {"tools", tools},
                       {"tool_choice", "required"},
                       {"response_format", {{"type", "json_object"}}}}),
                 "response_format");
  const json pattern_tool = json::array(
      {{{"type", "function"}, {"function", {{"name", "f"}, {"parameters", {{"type", "string"}, {"pattern", "a+"}}}}}}});
  e = Chat({{"messages", user}, {"tools", pattern_tool}, {"tool_choice", "required"}});
  ExpectBadField(e, "tools");
  EXPECT_NE(e->message.find("\"pattern\""), std::string::npos) << e->message;
  ExpectBadField(Chat({{"messages", user}, {"tool_choice", "auto"}}), "tool_choice");
  ExpectBadField(Chat({{"messages", user}, {"tools", tools}, {"tool_choice", "sometimes"}}), "tool_choice");
  ExpectBadField(
      Chat({{"messages", user}, {"tools", json::array({{{"type", "function"}, {"function", {{"name", "a b"}}}}})}}),
      "tools[0].function.name");
  ExpectBadField(Chat({{"messages", user}, {"tools", json::array({{{"type", "retrieval"}}})}}), "tools[0].type");
  ExpectBadField(
      Chat({{"messages",
             json::array({{{"role", "assistant"}, {"tool_calls", json::array({{{"function", {{"name", "f"}}}}})}}})}}),
      "messages[0].tool_calls[0]");
  // No tools, or an empty list, with tool_choice none: a plain chat.
  EXPECT_FALSE(Chat({{"messages", user}, {"tools", json::array()}, {"tool_choice", "none"}}));
}

TEST(OpenAiProtocol, RequiredAndNamedToolChoiceConstrainTheOutput) {
  const json user = json::array({{{"role", "user"}, {"content", "Hi"}}});
  const json weather = {{"type", "object"},
                        {"properties", {{"city", {{"type", "string"}}}}},
                        {"required", {"city"}},
                        {"additionalProperties", false}};
  const json tools =
      json::array({{{"type", "function"}, {"function", {{"name", "get_weather"}, {"parameters", weather}}}},
                   {{"type", "function"}, {"function", {{"name", "now"}}}}});
  // No --tool-call-parser needed: the output is JSON.
  ChatRequest r;
  ASSERT_FALSE(Chat({{"messages", user}, {"tools", tools}, {"tool_choice", "required"}}, &r));
  EXPECT_EQ(r.forced_tools, ChatRequest::ForcedTools::kRequired);
  const json spec = json::parse(r.request.output_constraint);
  const json call = {{"type", "object"}, {"required", {"name", "parameters"}}, {"additionalProperties", false}};
  json weather_call = call, now_call = call;
  weather_call["properties"] = {{"name", {{"const", "get_weather"}}}, {"parameters", weather}};
  now_call["properties"] = {{"name", {{"const", "now"}}}, {"parameters", {{"type", "object"}}}};
  EXPECT_EQ(spec,
            json({{"type", "json_schema"},
                  {"schema", {{"type", "array"}, {"minItems", 1}, {"items", {{"anyOf", {weather_call, now_call}}}}}}}));
  ChatRequest named;
  ASSERT_FALSE(Chat({{"messages", user},
                     {"tools", tools},
                     {"tool_choice", {{"type", "function"}, {"function", {{"name", "get_weather"}}}}}},
                    &named));
  EXPECT_EQ(named.forced_tools, ChatRequest::ForcedTools::kNamed);
  EXPECT_EQ(named.forced_name, "get_weather");
  EXPECT_EQ(json::parse(named.request.output_constraint), json({{"type", "json_schema"}, {"schema", weather}}));
}

TEST(OpenAiProtocol, LengthAgainstContextAndPool) {
  // 1024-token pool, 4096 context: 10 prompt ids + 1015 is over the pool.
  json ids = json::array();
  for (int i = 0; i < 10; ++i) ids.push_back(i + 2);
  EXPECT_FALSE(Completion({{"prompt", ids}, {"max_tokens", 1014}}));
  ExpectBadField(Completion({{"prompt", ids}, {"max_tokens", 1015}}), "max_tokens");
  ExpectBadField(Completion({{"prompt", ids}, {"max_tokens", 5000}}), "max_tokens");
}

TEST(OpenAiProtocol, EchoScoringAndStreamOptions) {
  CompletionRequest r;
  ASSERT_FALSE(
      Completion({{"prompt", json::array({3, 4, 5})}, {"max_tokens", 0}, {"echo", true}, {"logprobs", 1}}, &r));
  EXPECT_TRUE(r.prompts[0].prompt_logprobs);
  EXPECT_EQ(r.prompts[0].sampling.logprobs, 1);
  EXPECT_EQ(r.prompts[0].max_tokens, 0);
  ExpectBadField(Completion({{"prompt", "x"}, {"max_tokens", 0}}), "max_tokens");
  ExpectBadField(Completion({{"prompt", "x"}, {"stream_options", {{"include_usage", true}}}}), "stream_options");
  ASSERT_FALSE(Completion({{"prompt", "x"}, {"stream", true}, {"stream_options", {{"include_usage", true}}}}, &r));
  EXPECT_TRUE(r.stream);
  EXPECT_TRUE(r.include_usage);
}

TEST(OpenAiProtocol, ModelName) {
  EXPECT_FALSE(Completion({{"prompt", "x"}, {"model", "tiny"}}));
  EXPECT_FALSE(Completion({{"prompt", "x"}, {"model", Tiny().model.path}}));
  const MaybeError e = Completion({{"prompt", "x"}, {"model", "gpt-4"}});
  ASSERT_TRUE(e);
  EXPECT_EQ(e->status, 404);
  EXPECT_EQ(e->code, "model_not_found");
  EXPECT_NE(e->message.find("gpt-4"), std::string::npos);
}

TEST(OpenAiProtocol, ChatRendersTheTemplate) {
  const json messages = json::array(
      {{{"role", "system"}, {"content", "Be brief."}},
       {{"role", "user"}, {"content", "Hi"}},
       {{"role", "assistant"}, {"content", "Hello."}},
       {{"role", "user"},
        {"content", json::array({{{"type", "text"}, {"text", "More"}}, {{"type", "text"}, {"text", "please"}}})}}});
  ChatRequest r;
  ASSERT_FALSE(Chat({{"messages", messages}}, &r));
  json plain = messages;
  plain[3]["content"] = "More\nplease";  // parts joined by "\n", as vLLM joins them
  const std::string want = Tiny().chat->Render(json{{"messages", plain}, {"add_generation_prompt", true}}).value();
  EXPECT_EQ(r.prompt_text, want);
  EXPECT_EQ(r.request.prompt, Tiny().tokenizer->Encode(want));
  // No max_tokens: what the pool (1024, smaller than the context) leaves.
  EXPECT_EQ(r.request.max_tokens, 1024 - static_cast<int64_t>(r.request.prompt.size()));
}

TEST(OpenAiProtocol, ChatBadInput) {
  const json user = json::array({{{"role", "user"}, {"content", "Hi"}}});
  ExpectBadField(Chat({{"messages", json::array()}}), "messages");
  ExpectBadField(Chat(json::object()), "messages");
  ExpectBadField(Chat({{"messages", "Hi"}}), "messages");
  ExpectBadField(Chat({{"messages", json::array({{{"role", "robot"}, {"content", "x"}}})}}), "messages[0].role");
  ExpectBadField(Chat({{"messages", json::array({{{"role", "user"}, {"content", 5}}})}}), "messages[0].content");
  ExpectBadField(Chat({{"messages", user}, {"top_logprobs", 2}}), "top_logprobs");
  ExpectBadField(Chat({{"messages", user}, {"logprobs", true}, {"top_logprobs", 21}}), "top_logprobs");
  ExpectBadField(Chat({{"messages", user}, {"max_tokens", 0}}), "max_tokens");
  ExpectBadField(Chat({{"messages", user}, {"max_completion_tokens", 2000}}), "max_completion_tokens");
  ExpectBadField(Chat({{"messages", user}, {"logprobs", 1}}), "logprobs");
  ChatRequest r;
  ASSERT_FALSE(Chat({{"messages", user}, {"logprobs", true}, {"top_logprobs", 3}, {"max_tokens", 5}}, &r));
  EXPECT_EQ(r.request.sampling.logprobs, 3);
  EXPECT_EQ(r.request.max_tokens, 5);
}

TEST(OpenAiProtocol, ErrorObjectShape) {
  const json j = BadRequest("temperature must be in [0, 2]", "temperature").ToJson();
  EXPECT_EQ(j["error"]["message"], "temperature must be in [0, 2]");
  EXPECT_EQ(j["error"]["type"], "invalid_request_error");
  EXPECT_EQ(j["error"]["param"], "temperature");
  EXPECT_TRUE(j["error"]["code"].is_null());
  const json u = Unavailable("full", 1).ToJson();
  EXPECT_TRUE(u["error"]["param"].is_null());
}

// The HTTP status and `param` come from the Status's kind and field, whatever its text.
TEST(OpenAiProtocol, ErrorFromStatusByKind) {
  const ApiError bad = FromStatus(Status::InvalidArgument("no", "top_p"));
  EXPECT_EQ(bad.status, 400);
  EXPECT_EQ(bad.param, "top_p");
  EXPECT_EQ(FromStatus(Status::OutOfRange("long", "prompt")).status, 400);
  EXPECT_EQ(FromStatus(Status::FailedPrecondition("x", "stop")).param, "stop");
  const ApiError busy = FromStatus(Status::Unavailable("the server's queue is full"));
  EXPECT_EQ(busy.status, 503);
  EXPECT_EQ(busy.retry_after_s, 1);
  // A message that merely mentions shutting down is not a 503: only the kind decides.
  EXPECT_EQ(FromStatus(Status::InvalidArgument("the engine is shutting down")).status, 400);
  EXPECT_EQ(FromStatus(Status::NotFound("gone")).status, 404);
  EXPECT_EQ(FromStatus(Status::Internal("bug")).status, 500);
}

// The parser runs the engine's CheckRequest: its errors name the field the client set.
TEST(OpenAiProtocol, EngineChecksNameTheClientsField) {
  const json user = json::array({{{"role", "user"}, {"content", "Hi"}}});
  const MaybeError e = Chat({{"messages", user}, {"max_completion_tokens", 5000}});
  ASSERT_TRUE(e);
  EXPECT_EQ(e->param, "max_completion_tokens");
  EXPECT_NE(e->message.find("in max_completion_tokens"), std::string::npos) << e->message;
  ExpectBadField(Completion({{"prompt", "x"}, {"stop", json::array({""})}}), "stop");
}

}  // namespace
}  // namespace latte::server
