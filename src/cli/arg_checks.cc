#include "cli/arg_checks.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>

namespace latte::cli {
namespace {

// Up to 6 significant digits, no trailing zeros: 0.5, 1e+06, 1024.
std::string Number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

bool ParseInt(const std::string& text, int64_t* out) {
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, *out);
  return ec == std::errc() && ptr == end && !text.empty();
}

bool ParseNumber(const std::string& text, double* out) {
  if (text.empty()) return false;
  char* end = nullptr;
  errno = 0;
  *out = std::strtod(text.c_str(), &end);
  return end == text.c_str() + text.size() && errno != ERANGE;
}

std::string Quoted(const std::string& s) { return "\"" + s + "\""; }

// "ten" for the option's type name: what the option's values must be.
std::string TypeWords(const std::string& type_name) {
  if (type_name.rfind("UINT", 0) == 0) return "a non-negative integer";
  if (type_name.rfind("INT", 0) == 0) return "an integer";
  if (type_name.rfind("FLOAT", 0) == 0) return "a number";
  return "a value";
}

std::string StripPrefix(const std::string& s, const std::string& prefix) {
  return s.rfind(prefix, 0) == 0 ? s.substr(prefix.size()) : s;
}

// The deepest subcommand the parser entered (the root when none).
const CLI::App* DeepestParsed(const CLI::App& root) {
  const CLI::App* app = &root;
  for (;;) {
    const std::vector<CLI::App*> parsed = app->get_subcommands();
    if (parsed.empty()) return app;
    app = parsed.front();
  }
}

std::string SubcommandNames(const CLI::App& app) {
  std::string names;
  for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; })) {
    names += (names.empty() ? "" : ", ") + sub->get_name();
  }
  return names;
}

}  // namespace

CLI::Validator IntIn(int64_t lo, int64_t hi) {
  const std::string range = "[" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
  return CLI::Validator(
      [lo, hi, range](std::string& text) -> std::string {
        int64_t v = 0;
        if (!ParseInt(text, &v) || v < lo || v > hi) return "must be an integer in " + range + ", got " + Quoted(text);
        return "";
      },
      "in " + range);
}

CLI::Validator NumberIn(double lo, double hi, bool lo_open, bool hi_open) {
  const std::string range = std::string(lo_open ? "(" : "[") + Number(lo) + ", " + Number(hi) + (hi_open ? ")" : "]");
  return CLI::Validator(
      [=](std::string& text) -> std::string {
        double v = 0;
        const bool ok =
            ParseNumber(text, &v) && std::isfinite(v) && (lo_open ? v > lo : v >= lo) && (hi_open ? v < hi : v <= hi);
        return ok ? "" : "must be in " + range + ", got " + Quoted(text);
      },
      "in " + range);
}

CLI::Validator OneOf(std::vector<std::string> values) {
  std::string list;
  for (size_t i = 0; i < values.size(); ++i) {
    list += (i == 0 ? "" : i + 1 == values.size() ? " or " : ", ") + values[i];
  }
  return CLI::Validator(
      [values, list](std::string& text) -> std::string {
        for (const std::string& v : values) {
          if (text == v) return "";
        }
        return "must be " + list + ", got " + Quoted(text);
      },
      "");
}

CLI::Option* AddThreadsOption(CLI::App& cmd, int& threads) {
  return cmd.add_option("-t,--threads", threads, "Compute threads (default: every core)")->check(IntIn(1, kMaxThreads));
}

void AddRenamedFlag(CLI::App& cmd, const std::string& old_name, const std::string& now) {
  cmd.add_option_function<std::string>(
         old_name, [old_name, now](const std::string&) { throw CLI::ValidationError(old_name, "is now " + now); }, "")
      ->group("")
      ->allow_extra_args(false);
}

bool Given(const CLI::App& cmd, const std::string& flag) {
  const CLI::Option* opt = cmd.get_option_no_throw(flag);
  return opt != nullptr && opt->count() > 0;
}

Status RefuseUnless(const CLI::App& cmd, bool applies, std::initializer_list<const char*> flags,
                    const std::string& why) {
  if (applies) return Status::Ok();
  for (const char* flag : flags) {
    if (Given(cmd, flag)) return Status::InvalidArgument(std::string(flag) + " has no effect " + why);
  }
  return Status::Ok();
}

Status AsFlagError(const Status& status) {
  if (status.ok() || status.field().empty()) return status;
  const std::string& field = status.field();
  std::string flag = "--" + field;
  std::replace(flag.begin(), flag.end(), '_', '-');
  const std::string& m = status.message();
  // "top_p must be ..." reads "--top-p must be ..."; a message that does not start
  // with its field gets the flag in front.
  std::string message = m.rfind(field + " ", 0) == 0  ? flag + m.substr(field.size())
                        : m.rfind(flag + " ", 0) == 0 ? m
                                                      : flag + ": " + m;
  return Status(status.code(), std::move(message), field);
}

Status CheckWritableFile(const std::string& flag, const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (path.empty()) return Status::InvalidArgument(flag + " needs a file name");
  if (fs::is_directory(path, ec)) return Status::InvalidArgument(flag + " " + path + " is a folder; give a file name");
  fs::path folder = fs::path(path).parent_path();
  if (folder.empty()) folder = ".";
  if (!fs::is_directory(folder, ec)) {
    return Status::NotFound(flag + " " + path + ": the folder " + folder.string() + " does not exist");
  }
  if (::access(folder.c_str(), W_OK) != 0) {
    return Status::Internal(flag + " " + path + ": cannot write in " + folder.string() + " (" + std::strerror(errno) +
                            ")");
  }
  if (fs::exists(path, ec) && ::access(path.c_str(), W_OK) != 0) {
    return Status::InvalidArgument(flag + " " + path + ": cannot overwrite it (" + std::strerror(errno) + ")");
  }
  return Status::Ok();
}

std::string CommandPath(const CLI::App& root) {
  std::string path = root.get_name();
  const CLI::App* app = &root;
  for (;;) {
    const std::vector<CLI::App*> parsed = app->get_subcommands();
    if (parsed.empty()) return path;
    app = parsed.front();
    path += " " + app->get_name();
  }
}

std::string ParseErrorMessage(const CLI::App& root, const CLI::Error& e) {
  const CLI::App* app = DeepestParsed(root);
  const std::string prefix = CommandPath(root) + ": error: ";
  const std::string help = " (see " + CommandPath(root) + " --help)";
  const std::string what = e.what();
  const std::string subcommands = SubcommandNames(*app);

  if (dynamic_cast<const CLI::ExtrasError*>(&e) != nullptr) {
    std::string extra = StripPrefix(StripPrefix(what, "The following arguments were not expected: "),
                                    "The following argument was not expected: ");
    const std::string first = extra.substr(extra.rfind(' ') == std::string::npos ? 0 : extra.rfind(' ') + 1);
    if (!first.empty() && first[0] == '-') return prefix + "unknown flag " + first + help;
    if (!subcommands.empty()) {
      return prefix + "unknown command " + Quoted(first) + " (commands: " + subcommands + ")";
    }
    return prefix + "unexpected argument " + Quoted(first) + help;
  }
  if (dynamic_cast<const CLI::RequiredError*>(&e) != nullptr) {
    if (what.rfind("A subcommand", 0) == 0 || what.rfind("Requires at least", 0) == 0) {
      const std::vector<std::string> rest = app->remaining();
      if (!rest.empty() && !rest.front().empty() && rest.front()[0] != '-') {
        return prefix + "unknown command " + Quoted(rest.front()) + " (commands: " + subcommands + ")";
      }
      return prefix + "give a command: " + subcommands;
    }
    return prefix + what + help;  // "--model is required"
  }
  if (dynamic_cast<const CLI::ConversionError*>(&e) != nullptr) {
    const std::string rest = StripPrefix(what, "Could not convert: ");
    const size_t eq = rest.find(" = ");
    if (eq != std::string::npos) {
      const std::string name = rest.substr(0, eq);
      const CLI::Option* opt = app->get_option_no_throw(name);
      const std::string type = opt != nullptr ? opt->get_type_name() : "";
      return prefix + name + " needs " + TypeWords(type) + ", got " + Quoted(rest.substr(eq + 3));
    }
    return prefix + what;
  }
  if (dynamic_cast<const CLI::ValidationError*>(&e) != nullptr) {
    // "--threads: must be ..." -> "--threads must be ...".
    const size_t colon = what.find(": ");
    if (colon != std::string::npos && what[0] == '-')
      return prefix + what.substr(0, colon) + " " + what.substr(colon + 2);
    return prefix + what;
  }
  if (dynamic_cast<const CLI::ArgumentMismatch*>(&e) != nullptr) {
    // "chat was given a disallowed flag override": a value after a flag (--chat=3).
    if (const size_t at = what.find(" was given a disallowed flag override"); at != std::string::npos) {
      const std::string name = what.substr(0, at);
      return prefix + (name.size() == 1 ? "-" : "--") + name + " takes no value" + help;
    }
    const size_t colon = what.find(':');
    const std::string name = what.substr(0, colon == std::string::npos ? what.find(' ') : colon);
    if (!name.empty() && name[0] == '-') {
      if (what.find("missing") != std::string::npos || what.find("At least") != std::string::npos ||
          what.find("Expected") != std::string::npos) {
        return prefix + name + " needs a value" + help;
      }
      return prefix + name + " takes no value" + help;
    }
    return prefix + what;
  }
  return prefix + what;
}

}  // namespace latte::cli
