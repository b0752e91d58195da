// The response bodies and chunks of /v1/completions, /v1/chat/completions and
// /v1/responses, built from hand-made engine outputs and checked field by field against
// OpenAI's shapes.
#include <gtest/gtest.h>

#include "server/chat_response.h"
#include "server/completion_response.h"
#include "server/responses.h"

namespace latte::server {
namespace {

using nlohmann::json;

SampledToken Token(int32_t id, float logprob, std::vector<TokenLogprob> top = {}) {
  SampledToken t;
  t.id = id;
  t.logprob = logprob;
  t.num_top = static_cast<int>(top.size());
  for (size_t i = 0; i < top.size(); ++i) t.top[i] = top[i];
  return t;
}

GenerationOutput Output(int index, std::vector<SampledToken> tokens, std::string text,
                        std::optional<FinishReason> finish = std::nullopt) {
  GenerationOutput out;
  out.index = index;
  out.tokens = std::move(tokens);
  out.text = std::move(text);
  out.finish = finish;
  return out;
}

// The data payloads of an SSE text.
std::vector<json> Events(const std::string& sse) {
  std::vector<json> events;
  size_t at = 0;
  while ((at = sse.find("data: ", at)) != std::string::npos) {
    const size_t end = sse.find("\n\n", at);
    events.push_back(json::parse(sse.substr(at + 6, end - at - 6)));
    at = end;
  }
  return events;
}

CompletionRequest EchoRequest(bool stream) {
  CompletionRequest r;
  r.model = "m";
  r.n = 1;
  r.echo = true;
  r.logprobs = 1;
  r.stream = stream;
  r.include_usage = stream;
  r.tokens_as_ids = true;
  GenerationRequest g;
  g.prompt = {7, 8, 9};
  g.stop_token_ids = {42};
  r.prompts.push_back(g);
  r.prompt_texts.push_back("abc");
  return r;
}

TEST(CompletionFormatter, EchoLogprobsAndStopTokenInTheWholeBody) {
  CompletionFormatter f(EchoRequest(false), nullptr, "cmpl-1", 100);
  GenerationOutput first = Output(0, {Token(5, -0.5f, {{5, -0.5f}})}, "xy");
  first.prompt_logprobs = {Token(8, -1.0f, {{3, -0.2f}}), Token(9, -2.0f, {{9, -2.0f}})};
  EXPECT_EQ(f.OnOutput(0, first), "");
  EXPECT_EQ(f.OnOutput(0, Output(0, {Token(42, -0.25f, {{42, -0.25f}})}, "", FinishReason::kStop)), "");
  const json body = json::parse(f.Finish());
  EXPECT_EQ(body["id"], "cmpl-1");
  EXPECT_EQ(body["object"], "text_completion");
  EXPECT_EQ(body["created"], 100);
  EXPECT_EQ(body["model"], "m");
  const json& c = body["choices"][0];
  EXPECT_EQ(c["index"], 0);
  EXPECT_EQ(c["text"], "abcxy");
  EXPECT_EQ(c["finish_reason"], "stop");
  EXPECT_EQ(c["stop_reason"], 42);  // a stop_token_ids id is reported
  const json& lp = c["logprobs"];
  EXPECT_EQ(lp["tokens"], json({"token_id:7", "token_id:8", "token_id:9", "token_id:5", "token_id:42"}));
  EXPECT_TRUE(lp["token_logprobs"][0].is_null());
  EXPECT_TRUE(lp["top_logprobs"][0].is_null());
  EXPECT_EQ(lp["token_logprobs"][1], -1.0f);
  // The chosen token is added to the alternatives.
  EXPECT_EQ(lp["top_logprobs"][1], json({{"token_id:3", -0.2f}, {"token_id:8", -1.0f}}));
  // Prompt offsets count the token strings; generated ones start after the echoed text.
  EXPECT_EQ(lp["text_offset"], json({0, 10, 20, 3, 13}));
  EXPECT_EQ(body["usage"], json({{"prompt_tokens", 3}, {"completion_tokens", 2}, {"total_tokens", 5}}));
}

TEST(CompletionFormatter, StreamChunksThenUsage) {
  CompletionFormatter f(EchoRequest(true), nullptr, "cmpl-2", 100);
  GenerationOutput first = Output(0, {Token(5, -0.5f)}, "xy");
  first.prompt_logprobs = {Token(8, -1.0f), Token(9, -2.0f)};
  const std::vector<json> a = Events(f.OnOutput(0, first));
  ASSERT_EQ(a.size(), 1u);
  EXPECT_EQ(a[0]["choices"][0]["text"], "abcxy");  // the echo rides on the first chunk
  EXPECT_EQ(a[0]["choices"][0]["logprobs"]["tokens"].size(), 4u);
  EXPECT_TRUE(a[0]["choices"][0]["finish_reason"].is_null());
  EXPECT_TRUE(a[0]["usage"].is_null());
  const std::vector<json> b = Events(f.OnOutput(0, Output(0, {Token(6, -0.1f)}, "z", FinishReason::kLength)));
  ASSERT_EQ(b.size(), 1u);
  EXPECT_EQ(b[0]["choices"][0]["text"], "z");
  EXPECT_EQ(b[0]["choices"][0]["finish_reason"], "length");
  // Offsets advance by each token's string ("token_id:5" is 10 bytes), from the echo's end.
  EXPECT_EQ(b[0]["choices"][0]["logprobs"]["text_offset"], json({13}));
  const std::vector<json> tail = Events(f.Finish());
  ASSERT_EQ(tail.size(), 1u);
  EXPECT_EQ(tail[0]["choices"], json::array());
  EXPECT_EQ(tail[0]["usage"]["completion_tokens"], 2);
}

ChatRequest Chat(bool stream) {
  ChatRequest r;
  r.model = "m";
  r.stream = stream;
  r.logprobs = true;
  r.top_logprobs = 1;
  r.tokens_as_ids = true;
  r.request.prompt = {1, 2, 3, 4};
  return r;
}

TEST(ChatFormatter, WholeBodyWithReasoning) {
  ChatFormatter f(Chat(false), /*reasoning_parser=*/true, nullptr, "chatcmpl-1", 5);
  f.OnOutput(0, Output(0, {Token(10, -1.0f, {{10, -1.0f}})}, "hmm</th"));
  f.OnOutput(0, Output(0, {Token(11, -2.0f, {{12, -0.5f}})}, "ink>yes", FinishReason::kLength));
  const json body = json::parse(f.Finish());
  EXPECT_EQ(body["object"], "chat.completion");
  const json& c = body["choices"][0];
  EXPECT_EQ(c["message"]["role"], "assistant");
  EXPECT_EQ(c["message"]["reasoning_content"], "hmm");
  EXPECT_EQ(c["message"]["content"], "yes");
  EXPECT_EQ(c["finish_reason"], "length");
  const json& lp = c["logprobs"]["content"];
  ASSERT_EQ(lp.size(), 2u);
  EXPECT_EQ(lp[1]["token"], "token_id:11");
  EXPECT_EQ(lp[1]["logprob"], -2.0f);
  EXPECT_EQ(lp[1]["top_logprobs"],
            json::array({{{"token", "token_id:12"},
                          {"logprob", -0.5f},
                          {"bytes", json({116, 111, 107, 101, 110, 95, 105, 100, 58, 49, 50})}}}));
  EXPECT_EQ(body["usage"], json({{"prompt_tokens", 4}, {"completion_tokens", 2}, {"total_tokens", 6}}));
}

TEST(ChatFormatter, StreamRoleFirstThenDeltas) {
  ChatRequest r = Chat(true);
  r.include_usage = true;
  ChatFormatter f(r, /*reasoning_parser=*/false, nullptr, "chatcmpl-2", 5);
  const std::vector<json> a = Events(f.OnOutput(0, Output(0, {Token(10, -1.0f)}, "Hel")));
  ASSERT_EQ(a.size(), 2u);
  EXPECT_EQ(a[0]["object"], "chat.completion.chunk");
  EXPECT_EQ(a[0]["choices"][0]["delta"], json({{"role", "assistant"}, {"content", ""}}));
  EXPECT_EQ(a[1]["choices"][0]["delta"], json({{"content", "Hel"}}));
  EXPECT_EQ(a[1]["choices"][0]["logprobs"]["content"].size(), 1u);
  const std::vector<json> b = Events(f.OnOutput(0, Output(0, {Token(11, -1.0f)}, "lo", FinishReason::kStop)));
  ASSERT_EQ(b.size(), 1u);
  EXPECT_EQ(b[0]["choices"][0]["delta"]["content"], "lo");
  EXPECT_EQ(b[0]["choices"][0]["finish_reason"], "stop");
  const std::vector<json> tail = Events(f.Finish());
  ASSERT_EQ(tail.size(), 1u);
  EXPECT_EQ(tail[0]["usage"]["completion_tokens"], 2);
}

const std::string kV3Calls =
    "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{\"city\": \"Paris\"}\n```"
    "<｜tool▁call▁end｜>\n<｜tool▁call▁begin｜>function<｜tool▁sep｜>now\n```json\n{}\n```<｜tool▁call▁end｜>"
    "<｜tool▁calls▁end｜>";

TEST(ChatFormatter, ToolCallsInTheWholeBody) {
  ChatRequest r = Chat(false);
  r.tool_calls = ToolCallFormat::kDeepSeekV3;
  ChatFormatter f(r, /*reasoning_parser=*/false, nullptr, "chatcmpl-3", 5);
  // The text arrives in pieces that split the markers.
  const std::string text = "Checking." + kV3Calls;
  for (size_t at = 0; at < text.size(); at += 7) {
    const bool last = at + 7 >= text.size();
    f.OnOutput(
        0, Output(0, {Token(10, -1.0f)}, text.substr(at, 7), last ? std::optional(FinishReason::kStop) : std::nullopt));
  }
  const json c = json::parse(f.Finish())["choices"][0];
  EXPECT_EQ(c["finish_reason"], "tool_calls");
  EXPECT_EQ(c["message"]["content"], "Checking.");
  const json& calls = c["message"]["tool_calls"];
  ASSERT_EQ(calls.size(), 2u);
  EXPECT_EQ(calls[0]["type"], "function");
  EXPECT_EQ(calls[0]["function"], json({{"name", "get_weather"}, {"arguments", "{\"city\": \"Paris\"}"}}));
  EXPECT_EQ(calls[1]["function"], json({{"name", "now"}, {"arguments", "{}"}}));
  EXPECT_TRUE(calls[0]["id"].get<std::string>().starts_with("chatcmpl-tool-"));
  EXPECT_NE(calls[0]["id"], calls[1]["id"]);
}

TEST(ChatFormatter, AMalformedToolCallIsContent) {
  ChatRequest r = Chat(false);
  r.tool_calls = ToolCallFormat::kDeepSeekV3;
  ChatFormatter f(r, /*reasoning_parser=*/false, nullptr, "chatcmpl-4", 5);
  const std::string text =
      "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>f\n```json\n{oops\n```"
      "<｜tool▁call▁end｜><｜tool▁calls▁end｜>";
  f.OnOutput(0, Output(0, {Token(10, -1.0f)}, text, FinishReason::kStop));
  const json c = json::parse(f.Finish())["choices"][0];
  EXPECT_EQ(c["finish_reason"], "stop");
  EXPECT_EQ(c["message"]["content"], text);
  EXPECT_FALSE(c["message"].contains("tool_calls"));
}

TEST(ChatFormatter, StreamedToolCallsAddUpToTheCalls) {
  ChatRequest r = Chat(true);
  r.logprobs = false;
  r.top_logprobs = 0;
  r.tool_calls = ToolCallFormat::kDeepSeekV3;
  ChatFormatter f(r, /*reasoning_parser=*/false, nullptr, "chatcmpl-5", 5);
  const std::string text = "Checking." + kV3Calls;
  std::vector<json> chunks;
  for (size_t at = 0; at < text.size(); at += 5) {
    const bool last = at + 5 >= text.size();
    for (json& e : Events(f.OnOutput(0, Output(0, {Token(10, -1.0f)}, text.substr(at, 5),
                                               last ? std::optional(FinishReason::kStop) : std::nullopt)))) {
      chunks.push_back(std::move(e));
    }
  }
  std::string content;
  json calls = json::array();
  for (const json& chunk : chunks) {
    const json& d = chunk["choices"][0]["delta"];
    if (d.contains("content")) content += d["content"].get<std::string>();
    for (const json& piece : d.value("tool_calls", json::array())) {
      const size_t i = piece["index"].get<size_t>();
      if (piece.contains("id")) {
        ASSERT_EQ(i, calls.size());
        EXPECT_EQ(piece["type"], "function");
        calls.push_back({{"id", piece["id"]}, {"name", piece["function"]["name"]}, {"arguments", ""}});
      }
      calls[i]["arguments"] =
          calls[i]["arguments"].get<std::string>() + piece["function"]["arguments"].get<std::string>();
    }
  }
  EXPECT_EQ(content, "Checking.");
  ASSERT_EQ(calls.size(), 2u);
  EXPECT_EQ(calls[0]["name"], "get_weather");
  EXPECT_EQ(calls[0]["arguments"], "{\"city\": \"Paris\"}");
  EXPECT_EQ(calls[1]["name"], "now");
  EXPECT_EQ(calls[1]["arguments"], "{}");
  EXPECT_EQ(chunks.back()["choices"][0]["finish_reason"], "tool_calls");
}

TEST(ChatFormatter, RequiredToolChoiceReadsTheConstrainedList) {
  const std::string text = R"([{"name": "get_weather", "parameters": {"city": "Paris", "a": [1, "]}"]}},)"
                           R"({"name":"now","parameters":{}}])";
  for (const bool stream : {false, true}) {
    ChatRequest r = Chat(stream);
    r.logprobs = false;
    r.top_logprobs = 0;
    r.forced_tools = ChatRequest::ForcedTools::kRequired;
    ChatFormatter f(r, /*reasoning_parser=*/false, nullptr, "chatcmpl-6", 5);
    json calls = json::array();
    std::string finish;
    for (size_t at = 0; at < text.size(); at += 6) {
      const bool last = at + 6 >= text.size();
      for (const json& e : Events(f.OnOutput(0, Output(0, {Token(10, -1.0f)}, text.substr(at, 6),
                                                       last ? std::optional(FinishReason::kStop) : std::nullopt)))) {
        const json& ch = e["choices"][0];
        EXPECT_FALSE(ch["delta"].contains("content") && !ch["delta"]["content"].get<std::string>().empty());
        for (const json& piece : ch["delta"].value("tool_calls", json::array())) calls.push_back(piece);
        if (!ch["finish_reason"].is_null()) finish = ch["finish_reason"];
      }
    }
    if (!stream) {
      const json c = json::parse(f.Finish())["choices"][0];
      EXPECT_TRUE(c["message"]["content"].is_null());
      calls = c["message"]["tool_calls"];
      finish = c["finish_reason"];
    }
    EXPECT_EQ(finish, "tool_calls") << stream;
    ASSERT_EQ(calls.size(), 2u) << stream;
    EXPECT_EQ(calls[0]["function"]["name"], "get_weather");
    // The arguments keep the model's member order (written compactly).
    EXPECT_EQ(calls[0]["function"]["arguments"], R"({"city":"Paris","a":[1,"]}"]})");
    EXPECT_EQ(calls[1]["function"], json({{"name", "now"}, {"arguments", "{}"}}));
    EXPECT_NE(calls[0]["id"], calls[1]["id"]);
  }
}

TEST(ChatFormatter, NamedToolChoiceIsTheArgumentsAndACutOneIsContent) {
  ChatRequest r = Chat(false);
  r.forced_tools = ChatRequest::ForcedTools::kNamed;
  r.forced_name = "get_weather";
  ChatFormatter f(r, /*reasoning_parser=*/false, nullptr, "chatcmpl-7", 5);
  f.OnOutput(0, Output(0, {Token(10, -1.0f)}, R"({"city": "Par)"));
  f.OnOutput(0, Output(0, {Token(11, -1.0f)}, R"(is"})", FinishReason::kStop));
  json c = json::parse(f.Finish())["choices"][0];
  EXPECT_EQ(c["finish_reason"], "stop");
  EXPECT_EQ(c["message"]["tool_calls"][0]["function"],
            json({{"name", "get_weather"}, {"arguments", R"({"city": "Paris"})"}}));

  ChatFormatter cut(r, /*reasoning_parser=*/false, nullptr, "chatcmpl-8", 5);
  cut.OnOutput(0, Output(0, {Token(10, -1.0f)}, R"({"city": "Par)", FinishReason::kLength));
  c = json::parse(cut.Finish())["choices"][0];
  EXPECT_EQ(c["finish_reason"], "length");
  EXPECT_EQ(c["message"]["content"], R"({"city": "Par)");
  EXPECT_FALSE(c["message"].contains("tool_calls"));
}

// Responses: the output of `text` (sent in pieces of `piece` bytes, ending with
// `finish`) as the whole Response object, and as its stream's events.
struct ResponsesRun {
  json response;
  std::vector<json> events;
};

ResponsesRun RunResponses(ResponsesRequest r, bool reasoning_parser, const std::string& text, size_t piece,
                          FinishReason finish) {
  ResponsesRun run;
  ResponsesFormatter f(r, reasoning_parser, "resp_1", 5);
  std::string sse;
  for (size_t at = 0; at < text.size(); at += piece) {
    const bool last = at + piece >= text.size();
    sse += f.OnOutput(
        0, Output(0, {Token(10, -1.0f)}, text.substr(at, piece), last ? std::optional(finish) : std::nullopt));
  }
  sse += f.Finish();
  if (r.chat.stream) {
    run.events = Events(sse);
    run.response = run.events.back()["response"];
  } else {
    run.response = json::parse(sse);
  }
  return run;
}

// The output items as a client rebuilds them from the events, OpenAI's rules checked
// on the way: sequence numbers count up from 0, an item is added at the next index
// before its deltas, each delta goes to the open item, each .done repeats what the
// deltas added up to, and output_item.done is the item as rebuilt.
json OutputOfEvents(const std::vector<json>& events) {
  json output = json::array();
  for (size_t i = 0; i < events.size(); ++i) {
    const json& e = events[i];
    EXPECT_EQ(e["sequence_number"], i);
    const std::string type = e["type"];
    if (type == "response.output_item.added") {
      EXPECT_EQ(e["output_index"], output.size());
      output.push_back(e["item"]);
      continue;
    }
    if (!e.contains("output_index")) continue;
    EXPECT_EQ(e["output_index"], output.size() - 1) << type;
    json& item = output.back();
    if (e.contains("item_id")) {
      EXPECT_EQ(e["item_id"], item["id"]) << type;
    }
    if (type == "response.content_part.added") {
      item["content"].push_back(e["part"]);
    } else if (type == "response.output_text.delta") {
      item["content"][0]["text"] = item["content"][0]["text"].get<std::string>() + e["delta"].get<std::string>();
    } else if (type == "response.output_text.done") {
      EXPECT_EQ(e["text"], item["content"][0]["text"]);
    } else if (type == "response.function_call_arguments.delta") {
      item["arguments"] = item["arguments"].get<std::string>() + e["delta"].get<std::string>();
    } else if (type == "response.function_call_arguments.done") {
      EXPECT_EQ(e["arguments"], item["arguments"]);
      EXPECT_EQ(e["name"], item["name"]);
    } else if (type == "response.output_item.done") {
      EXPECT_EQ(e["item"]["type"], item["type"]);
      if (item["type"] == "function_call") {
        EXPECT_EQ(e["item"]["arguments"], item["arguments"]);
      } else if (item["type"] == "message") {
        EXPECT_EQ(e["item"]["content"][0]["text"], item["content"][0]["text"]);
      }
      item = e["item"];
    }
  }
  return output;
}

// The items without their random ids.
json WithoutIds(json output) {
  for (json& item : output) {
    EXPECT_TRUE(item["id"].get<std::string>().starts_with(item["type"] == "message"     ? "msg_"
                                                          : item["type"] == "reasoning" ? "rs_"
                                                                                        : "fc_"));
    item.erase("id");
    if (item["type"] == "function_call") {
      EXPECT_TRUE(item["call_id"].get<std::string>().starts_with("call_"));
      item.erase("call_id");
    }
  }
  return output;
}

ResponsesRequest Responses(bool stream) {
  ResponsesRequest r;
  r.chat.stream = stream;
  r.settings.model = "m";
  return r;
}

json Call(const std::string& name, const std::string& arguments) {
  return {{"type", "function_call"}, {"status", "completed"}, {"arguments", arguments}, {"name", name}};
}

json Message(const std::string& text, const std::string& status = "completed") {
  return {
      {"type", "message"},
      {"status", status},
      {"role", "assistant"},
      {"content",
       json::array(
           {{{"type", "output_text"}, {"text", text}, {"annotations", json::array()}, {"logprobs", json::array()}}})}};
}

TEST(ResponsesFormatter, AutoToolCallsAreFunctionCallItemsStreamedOrNot) {
  const std::string text = "Checking." + kV3Calls;
  const json expected =
      json::array({Message("Checking."), Call("get_weather", "{\"city\": \"Paris\"}"), Call("now", "{}")});
  for (const size_t piece : {size_t{1}, size_t{5}, text.size()}) {
    ResponsesRequest r = Responses(false);
    r.chat.tool_calls = ToolCallFormat::kDeepSeekV3;
    const ResponsesRun whole = RunResponses(r, false, text, piece, FinishReason::kStop);
    EXPECT_EQ(whole.response["status"], "completed");
    EXPECT_EQ(WithoutIds(whole.response["output"]), expected) << piece;
    r.chat.stream = true;
    const ResponsesRun streamed = RunResponses(r, false, text, piece, FinishReason::kStop);
    const json rebuilt = OutputOfEvents(streamed.events);
    EXPECT_EQ(WithoutIds(rebuilt), expected) << piece;
    EXPECT_EQ(rebuilt, streamed.response["output"]) << "response.completed holds the items as streamed";
    EXPECT_NE(rebuilt[1]["call_id"], rebuilt[2]["call_id"]);
  }
}

TEST(ResponsesFormatter, ReasoningThenCallsLeavesNoMessage) {
  const std::string text = "Weather first.</think>" + kV3Calls;
  for (const bool stream : {false, true}) {
    ResponsesRequest r = Responses(stream);
    r.chat.tool_calls = ToolCallFormat::kDeepSeekV3;
    const ResponsesRun run = RunResponses(r, /*reasoning_parser=*/true, text, 4, FinishReason::kStop);
    const json output = stream ? OutputOfEvents(run.events) : run.response["output"];
    ASSERT_EQ(output.size(), 3u) << stream;
    EXPECT_EQ(output[0]["type"], "reasoning");
    EXPECT_EQ(output[0]["content"][0]["text"], "Weather first.");
    EXPECT_EQ(WithoutIds(json::array({output[1], output[2]})),
              json::array({Call("get_weather", "{\"city\": \"Paris\"}"), Call("now", "{}")}));
  }
}

TEST(ResponsesFormatter, AMalformedCallIsAMessage) {
  const std::string text = "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>f\n```json\n{oops";
  ResponsesRequest r = Responses(false);
  r.chat.tool_calls = ToolCallFormat::kDeepSeekV3;
  const ResponsesRun run = RunResponses(r, false, text, 3, FinishReason::kStop);
  EXPECT_EQ(WithoutIds(run.response["output"]), json::array({Message(text)}));
}

TEST(ResponsesFormatter, RequiredAndNamedToolChoiceAreTheCalls) {
  const std::string list =
      R"([{"name": "get_weather", "parameters": {"city": "Paris"}},{"name":"now","parameters":{}}])";
  for (const bool stream : {false, true}) {
    ResponsesRequest r = Responses(stream);
    r.chat.forced_tools = ChatRequest::ForcedTools::kRequired;
    ResponsesRun run = RunResponses(r, false, list, 7, FinishReason::kStop);
    json output = stream ? OutputOfEvents(run.events) : run.response["output"];
    EXPECT_EQ(WithoutIds(output), json::array({Call("get_weather", R"({"city":"Paris"})"), Call("now", "{}")}))
        << stream;

    r.chat.forced_tools = ChatRequest::ForcedTools::kNamed;
    r.chat.forced_name = "get_weather";
    run = RunResponses(r, false, R"({"city": "Paris"})", 3, FinishReason::kStop);
    output = stream ? OutputOfEvents(run.events) : run.response["output"];
    EXPECT_EQ(WithoutIds(output), json::array({Call("get_weather", R"({"city": "Paris"})")})) << stream;

    // Cut short by max_output_tokens: not a call, the text is an incomplete message;
    // streamed, the fragments already went out as the call's, now incomplete.
    run = RunResponses(r, false, R"({"city": "Pa)", 3, FinishReason::kLength);
    EXPECT_EQ(run.response["status"], "incomplete");
    json cut_call = Call("get_weather", R"({"city": "Pa)");
    cut_call["status"] = "incomplete";
    const json cut = stream ? OutputOfEvents(run.events) : run.response["output"];
    EXPECT_EQ(WithoutIds(cut),
              stream ? json::array({cut_call}) : json::array({Message(R"({"city": "Pa)", "incomplete")}))
        << stream;
  }
}

}  // namespace
}  // namespace latte::server
