// Streaming detokenization: ids arrive one at a time (generation), text leaves as
// soon as it is whole. A token can end in the middle of a UTF-8 character (byte-level
// BPE splits rare characters and emoji across 2-4 byte tokens), so bytes after the
// last complete character wait for the next id (CompleteUtf8Prefix).
//
// Invariant: the concatenation of every Add() result and Flush() equals
// Tokenizer::Decode(all ids, skip_special) byte for byte.
#pragma once

#include <cstdint>
#include <string>

#include "text/tokenizer.h"

namespace latte {

class StreamingDetokenizer {
 public:
  // `tokenizer` must outlive this object.
  explicit StreamingDetokenizer(const Tokenizer& tokenizer, bool skip_special = false)
      : tokenizer_(tokenizer), skip_special_(skip_special) {}

  // The text completed by `id`; empty while a character is still unfinished.
  std::string Add(int32_t id);
  // At the end of the stream: what is still pending (an unfinished character comes
  // out as U+FFFD, as Decode writes it). The detokenizer is then empty again.
  std::string Flush();

 private:
  const Tokenizer& tokenizer_;
  bool skip_special_;
  std::string pending_;  // raw bytes not yet emitted: at most one unfinished character
};

}  // namespace latte
