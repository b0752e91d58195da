// Checked boundaries. LATTE_CHECK is always on: for conditions that come from outside
// the function (a caller's shapes, strides, pointers), where going on would read or
// write out of bounds. LATTE_DCHECK is for the function's own invariants and for checks
// inside hot loops: on in debug builds (NDEBUG not defined) and sanitizer builds
// (LATTE_SANITIZE defined), compiled out otherwise (the condition is still parsed, so
// it cannot rot).
//
//   LATTE_CHECK(ldx >= w.cols, "Matmul: ldx ", ldx, " < w.cols ", w.cols);
//
// A failed check prints "file:line: check failed: <condition>: <message>" to stderr
// and aborts. The message pieces are streamed (operator<<) only on failure.
#pragma once

#include <cstdlib>
#include <iostream>
#include <sstream>
#include <string>

namespace latte::check_internal {

template <typename... Pieces> [[noreturn]] [[gnu::cold]] [[gnu::noinline]] void Fail(const char* file, int line,
                                                                                     const char* condition,
                                                                                     const Pieces&... pieces) {
  std::ostringstream message;
  static_cast<void>((message << ... << pieces));
  std::cerr << file << ":" << line << ": check failed: " << condition;
  if (!message.str().empty()) std::cerr << ": " << message.str();
  std::cerr << std::endl;
  std::abort();
}

}  // namespace latte::check_internal

#define LATTE_CHECK(condition, ...)                                                             \
  do {                                                                                          \
    if (!(condition)) [[unlikely]] {                                                            \
      ::latte::check_internal::Fail(__FILE__, __LINE__, #condition __VA_OPT__(, ) __VA_ARGS__); \
    }                                                                                           \
  } while (0)

#if !defined(NDEBUG) || defined(LATTE_SANITIZE)
#define LATTE_DCHECK_IS_ON 1
#define LATTE_DCHECK(condition, ...) LATTE_CHECK(condition __VA_OPT__(, ) __VA_ARGS__)
#else
#define LATTE_DCHECK_IS_ON 0
#define LATTE_DCHECK(condition, ...)                                        \
  do {                                                                      \
    if constexpr (false) LATTE_CHECK(condition __VA_OPT__(, ) __VA_ARGS__); \
  } while (0)
#endif
