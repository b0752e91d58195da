#include "text/detokenizer.h"

#include "text/byte_level.h"
#include "text/utf8.h"

namespace latte {

std::string StreamingDetokenizer::Add(int32_t id) {
  pending_ += tokenizer_.TokenBytes(id, skip_special_);
  const size_t complete = CompleteUtf8Prefix(pending_);
  // Ill-formed bytes inside the complete prefix can never become valid, so repairing
  // them now gives the same U+FFFDs as repairing the whole text at the end.
  std::string text = Utf8Lossy(std::string_view(pending_).substr(0, complete));
  pending_.erase(0, complete);
  return text;
}

std::string StreamingDetokenizer::Flush() {
  std::string text = Utf8Lossy(pending_);
  pending_.clear();
  return text;
}

}  // namespace latte
