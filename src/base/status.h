// Errors as values at boundaries (files, configs, requests). No exceptions cross
// a layer; kernels and the forward pass never fail once inputs are validated.
//
// A failed Status has a kind (StatusCode) and, when one value is to blame, the name
// of that field in snake_case ("top_p", "max_tokens", "max_num_seqs"). Callers decide
// by the kind and the field (an HTTP status and OpenAI's `param`, a flag's name),
// never by the message's text; the message is for people.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace latte {

enum class StatusCode {
  kOk,
  kInvalidArgument,     // a value the caller gave is wrong: a flag, a request field, a file name
  kNotFound,            // a file, tensor, model or path that is not there
  kOutOfRange,          // a size past a limit: the context length, the KV pool, a buffer
  kFailedPrecondition,  // asked of something that cannot do it: stop strings without a tokenizer
  kUnimplemented,       // well-formed, but latte does not do it: a config value, a dtype, a field
  kDataLoss,            // a file whose bytes are not what its format says: truncated, corrupt
  kUnavailable,         // not now: shutting down, a full queue, a server that does not answer
  kInternal,            // a broken invariant or a failed system call: not the caller's fault
};

// "invalid argument", "not found", ...
std::string_view StatusCodeName(StatusCode code);

class Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message, std::string field = {})
      : code_(code), message_(std::move(message)), field_(std::move(field)) {}

  static Status Ok() { return Status(); }
  static Status InvalidArgument(std::string message, std::string field = {}) {
    return Status(StatusCode::kInvalidArgument, std::move(message), std::move(field));
  }
  static Status NotFound(std::string message, std::string field = {}) {
    return Status(StatusCode::kNotFound, std::move(message), std::move(field));
  }
  static Status OutOfRange(std::string message, std::string field = {}) {
    return Status(StatusCode::kOutOfRange, std::move(message), std::move(field));
  }
  static Status FailedPrecondition(std::string message, std::string field = {}) {
    return Status(StatusCode::kFailedPrecondition, std::move(message), std::move(field));
  }
  static Status Unimplemented(std::string message, std::string field = {}) {
    return Status(StatusCode::kUnimplemented, std::move(message), std::move(field));
  }
  static Status DataLoss(std::string message) { return Status(StatusCode::kDataLoss, std::move(message)); }
  static Status Unavailable(std::string message) { return Status(StatusCode::kUnavailable, std::move(message)); }
  static Status Internal(std::string message) { return Status(StatusCode::kInternal, std::move(message)); }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // The offending field in snake_case, or empty when no one value is to blame.
  const std::string& field() const { return field_; }

  // Prefixes context ("model.safetensors: ") to an error, keeping its kind and
  // field; no-op when ok.
  Status WithContext(const std::string& context) const {
    if (ok()) return *this;
    return Status(code_, context + ": " + message_, field_);
  }

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
  std::string field_;
};

template <typename T> class Result {
 public:
  Result(T value) : value_(std::move(value)) {}         // NOLINT: implicit by design
  Result(Status status) : value_(std::move(status)) {}  // NOLINT: must be an error

  bool ok() const { return std::holds_alternative<T>(value_); }
  const Status& status() const {
    static const Status kOk;
    return ok() ? kOk : std::get<Status>(value_);
  }
  T& value() & { return std::get<T>(value_); }
  const T& value() const& { return std::get<T>(value_); }
  T&& value() && { return std::get<T>(std::move(value_)); }
  T& operator*() & { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

 private:
  std::variant<T, Status> value_;
};

}  // namespace latte

// Returns early from the enclosing function when `expr` (a Status) failed.
#define LATTE_RETURN_IF_ERROR(expr)                \
  do {                                             \
    ::latte::Status latte_status_ = (expr);        \
    if (!latte_status_.ok()) return latte_status_; \
  } while (0)

#define LATTE_CONCAT_INNER(a, b) a##b
#define LATTE_CONCAT(a, b) LATTE_CONCAT_INNER(a, b)
// Declares `lhs` from a Result<T>, returning the error from the enclosing function.
#define LATTE_ASSIGN_OR_RETURN(lhs, expr)                                                                 \
  auto LATTE_CONCAT(latte_result_, __LINE__) = (expr);                                                    \
  if (!LATTE_CONCAT(latte_result_, __LINE__).ok()) return LATTE_CONCAT(latte_result_, __LINE__).status(); \
  lhs = std::move(LATTE_CONCAT(latte_result_, __LINE__)).value()
