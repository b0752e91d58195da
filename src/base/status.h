// Errors as values at boundaries (files, configs, requests). No exceptions cross
// a layer; kernels and the forward pass never fail once inputs are validated.
#pragma once

#include <string>
#include <utility>
#include <variant>

namespace latte {

class Status {
 public:
  Status() = default;
  static Status Ok() { return Status(); }
  static Status Error(std::string message) { return Status(std::move(message)); }

  bool ok() const { return !failed_; }
  const std::string& message() const { return message_; }

  // Prefixes context ("model.safetensors: ") to an error; no-op when ok.
  Status WithContext(const std::string& context) const {
    if (ok()) return *this;
    return Status(context + ": " + message_);
  }

 private:
  explicit Status(std::string message) : failed_(true), message_(std::move(message)) {}
  bool failed_ = false;
  std::string message_;
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
