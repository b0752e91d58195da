// The one place the command line is checked: what every flag accepts (CLI11
// validators, run while parsing, before a command does anything), the rules that tie
// flags together (run first in a command's callback, before any file is read), and
// the sentence a parse error becomes. Messages name the flag: "--top-p must be in
// (0, 1], got 2". What a flag may ask of a model (its context, its vocabulary) is
// checked against the model's config.json before its weights load (model/config.h:
// CheckContextLength).
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "base/status.h"
#include "engine/engine_config.h"

namespace latte::cli {

// --threads accepts [1, kMaxThreads] (engine/engine_config.h); without the flag,
// every core (one for a small model: SetThreadsForModel).

// Validators: each checks the flag's text and, when it is wrong, says what the flag
// accepts and what it got ("must be an integer in [1, 1024], got 0"); the parse error
// then reads "--threads must be ...".
CLI::Validator IntIn(int64_t lo, int64_t hi);
// A number in the interval; open ends are excluded ("(0, 1]": lo_open).
CLI::Validator NumberIn(double lo, double hi, bool lo_open = false, bool hi_open = false);
CLI::Validator OneOf(std::vector<std::string> values);

// -t/--threads, the same on every command that computes.
CLI::Option* AddThreadsOption(CLI::App& cmd, int& threads);

// A hidden flag that only says it was renamed: `old_name` is an error naming `now`.
void AddRenamedFlag(CLI::App& cmd, const std::string& old_name, const std::string& now);

// Whether the user gave `flag` on this command line.
bool Given(const CLI::App& cmd, const std::string& flag);

// An error naming the first of `flags` that was given, when `applies` is false:
// "--seed has no effect <why>" (a flag the mode ignores is refused, not dropped).
Status RefuseUnless(const CLI::App& cmd, bool applies, std::initializer_list<const char*> flags,
                    const std::string& why);

// An error whose field() is a snake_case name ("top_p") reworded with the flag of
// that name ("--top-p must be ..."); errors without a field pass unchanged.
Status AsFlagError(const Status& status);

// `path` can be created or overwritten as a file: its folder exists and is writable,
// and it is not a folder itself.
Status CheckWritableFile(const std::string& flag, const std::string& path);

// The sentence for a parse error (one line, no trailing newline): "latte generate:
// error: --max-tokens needs an integer, got \"ten\"". `root` is the top-level app.
std::string ParseErrorMessage(const CLI::App& root, const CLI::Error& e);

// The command path of the deepest subcommand the parser reached: "bench model".
std::string CommandPath(const CLI::App& root);

}  // namespace latte::cli
