// latte serve: the OpenAI-compatible HTTP server (src/server/) over the serving engine.
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <memory>

#include "cli/arg_checks.h"
#include "cli/commands.h"
#include "cli/engine_flags.h"
#include "engine/model_files.h"
#include "engine/serving_stack.h"
#include "server/api_server.h"
#include "server/http_server.h"
#include "text/chat_template.h"

namespace latte::cli {
namespace {

struct ServeArgs {
  EngineConfig engine;
  std::string host = "127.0.0.1";
  int port = 8000;
  std::string api_key;
  std::string served_model_name;
  int64_t max_queue = server::ApiOptions{}.max_queue;
  double queue_timeout_s = 0;
  std::string reasoning_parser;
  bool enable_auto_tool_choice = false;
  std::string tool_call_parser;
  int io_threads = 2;
  int handler_threads = server::HttpServerOptions{}.handler_threads;
};

Status RunServe(const ServeArgs& args) {
  if (args.port < 0 || args.port > 65535) return Status::InvalidArgument("--port must be in [0, 65535]");
  if (args.max_queue < 1) return Status::InvalidArgument("--max-queue must be at least 1");
  if (args.queue_timeout_s < 0) return Status::InvalidArgument("--queue-timeout must be >= 0");
  if (args.io_threads < 1) return Status::InvalidArgument("--io-threads must be at least 1");
  if (args.handler_threads < 1) return Status::InvalidArgument("--handler-threads must be at least 1");
  if (!args.reasoning_parser.empty() && args.reasoning_parser != "deepseek_r1") {
    return Status::InvalidArgument("--reasoning-parser must be deepseek_r1, got \"" + args.reasoning_parser + "\"");
  }
  server::ToolCallFormat tool_format{};
  if (!args.tool_call_parser.empty() && !server::ToolCallFormatFromName(args.tool_call_parser, tool_format)) {
    return Status::InvalidArgument("--tool-call-parser must be deepseek_v3 or deepseek_v31, got \"" +
                                   args.tool_call_parser + "\"");
  }
  if (!args.tool_call_parser.empty() && !args.enable_auto_tool_choice) {
    return Status::InvalidArgument("--tool-call-parser needs --enable-auto-tool-choice");
  }
  server::ApiOptions api;
  api.api_key = args.api_key;
  if (api.api_key.empty()) {
    if (const char* key = std::getenv("LATTE_API_KEY")) api.api_key = key;
  }
  api.max_queue = args.max_queue;
  api.queue_timeout = std::chrono::milliseconds(static_cast<int64_t>(args.queue_timeout_s * 1000));

  // A server's pool is taken at start: under traffic there is no good moment to learn
  // that the machine cannot back it.
  EngineConfig engine_config = args.engine;
  engine_config.memory.commit_kv_pool = true;
  auto built = BuildServingStack(engine_config, /*log=*/true);
  if (!built.ok()) return AsFlagError(built.status());
  std::unique_ptr<ServingStack> stack = std::move(built).value();
  if (!stack->engine->leads()) {
    // Rank 0 serves HTTP; the others run its steps. mpirun turns SIGINT into SIGTERM for
    // every rank: rank 0 shuts the group down, and the others end when it tells them.
    std::signal(SIGINT, SIG_IGN);
    std::signal(SIGTERM, SIG_IGN);
    stack->engine->WaitForLeaderToStop();
    return Status::Ok();
  }
  std::optional<ChatTemplate> chat_template;
  if (stack->tokenizer) {
    Result<ChatTemplate> parsed = Status::NotFound("");
    if (auto files = ModelFiles::Find(args.engine.model); files.ok()) parsed = files->LoadChatTemplate();
    if (parsed.ok()) {
      chat_template = std::move(parsed).value();
    } else if (parsed.status().code() != StatusCode::kNotFound) {
      std::fprintf(stderr, "latte serve: no chat endpoint: %s\n", parsed.status().message().c_str());
    }
  }
  server::ServedModel model;
  model.name = args.served_model_name.empty() ? args.engine.model : args.served_model_name;
  model.path = args.engine.model;
  model.limits = stack->engine->limits();
  model.tokenizer = stack->tokenizer.get();
  model.chat_template = chat_template ? &*chat_template : nullptr;
  model.reasoning_parser = !args.reasoning_parser.empty();
  if (args.enable_auto_tool_choice) {
    if (!args.tool_call_parser.empty()) {
      model.tool_parser = tool_format;
    } else if (chat_template) {
      model.tool_parser = server::ToolCallFormatOfTemplate(chat_template->source());
    }
    if (!model.tool_parser) {
      return Status::InvalidArgument(
          "--enable-auto-tool-choice: the model's chat template writes no DeepSeek tool calls, so the format "
          "cannot be told from it; give --tool-call-parser deepseek_v3 or deepseek_v31");
    }
    std::fprintf(stderr, "latte serve: tool calls read as %s (%s)\n",
                 *model.tool_parser == server::ToolCallFormat::kDeepSeekV3 ? "deepseek_v3" : "deepseek_v31",
                 args.tool_call_parser.empty() ? "the format the chat template writes" : "--tool-call-parser");
  }
  model.created = static_cast<int64_t>(std::time(nullptr));

  server::ApiServer api_server(*stack->engine, model, std::string(MlaModeName(args.engine.load.mode)), api);
  server::HttpServerOptions http;
  http.host = args.host;
  http.port = static_cast<uint16_t>(args.port);
  http.threads = args.io_threads;
  http.handler_threads = args.handler_threads;
  server::HttpServer http_server(http, [&api_server](server::HttpRequest& r) { return api_server.Handle(r); });
  LATTE_RETURN_IF_ERROR(http_server.Listen());
  // SIGINT/SIGTERM: the engine ends every running request (streams get an error event,
  // then [DONE]), the replies are written, and the process exits 0.
  Engine& engine = *stack->engine;
  http_server.ShutdownOnSignals(
      [&api_server, &engine] {
        std::fprintf(stderr, "latte serve: shutting down\n");
        api_server.SetShuttingDown();
        engine.Stop("the server is shutting down");
      },
      std::chrono::seconds(5));
  std::fprintf(stderr, "latte serve: listening on http://%s:%u (model \"%s\"%s)\n", args.host.c_str(),
               http_server.port(), model.name.c_str(), api.api_key.empty() ? "" : ", API key required");
  http_server.Run();
  std::fprintf(stderr, "latte serve: stopped\n");
  return Status::Ok();
}

}  // namespace

void AddServeCommand(CLI::App& app) {
  auto args = std::make_shared<ServeArgs>();
  CLI::App* cmd = app.add_subcommand("serve", "OpenAI-compatible HTTP server (completions, chat, metrics)");
  AddEngineFlags(*cmd, args->engine);
  cmd->add_option("--host", args->host, "Address to listen on")->capture_default_str();
  cmd->add_option("--port", args->port, "Port to listen on (0: any free port, logged)")->capture_default_str();
  cmd->add_option("--api-key", args->api_key, "Require Authorization: Bearer KEY on /v1/ (default: $LATTE_API_KEY)");
  cmd->add_option("--served-model-name", args->served_model_name, "The model's name in the API (default: --model)");
  cmd->add_option("--max-queue", args->max_queue, "Requests waiting to start; more get 503 with Retry-After")
      ->capture_default_str();
  cmd->add_option("--queue-timeout", args->queue_timeout_s,
                  "Seconds a request may wait to start before a 503 (0: no limit)")
      ->capture_default_str();
  cmd->add_option("--reasoning-parser", args->reasoning_parser,
                  "deepseek_r1: return <think>...</think> as reasoning_content");
  cmd->add_flag("--enable-auto-tool-choice", args->enable_auto_tool_choice,
                "Read tool calls from the output when a request's tool_choice is auto");
  cmd->add_option("--tool-call-parser", args->tool_call_parser,
                  "deepseek_v3 or deepseek_v31 (default: the one the chat template writes)");
  cmd->add_option("--io-threads", args->io_threads, "Threads reading and writing sockets (and answering GETs)")
      ->capture_default_str();
  cmd->add_option("--handler-threads", args->handler_threads,
                  "Threads parsing, templating and tokenizing request bodies (bodies of " +
                      std::to_string(server::HttpServerOptions{}.large_body >> 10) +
                      " KiB and more: one more thread, one at a time)")
      ->capture_default_str();
  cmd->callback([args] { ExitOnError("serve", RunServe(*args)); });
}

}  // namespace latte::cli
