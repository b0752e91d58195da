// GPT-2's byte-level alphabet, used by byte-level BPE (DeepSeek-V3, GPT-2, Llama 3):
// every byte 0..255 is written as one visible Unicode character, so a vocabulary of
// strings can hold arbitrary bytes. Printable Latin-1 bytes stand for themselves;
// the other 68 bytes take U+0100, U+0101, ... in byte order (so ' ' is 'Ġ' U+0120).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace latte {

// UTF-8 of the character that stands for byte `b`.
const std::string& ByteLevelChar(uint8_t b);

// The byte a code point stands for, or -1 when it is not in the alphabet.
int ByteLevelByte(uint32_t code_point);

// Maps raw bytes to their byte-level characters ("a b" -> "aĠb").
std::string ToByteLevel(std::string_view raw);

// Inverse of ToByteLevel for one token. Returns false (and leaves `out` as is) when
// some character is outside the alphabet: such tokens (added tokens like
// "<｜User｜>") decode to their own UTF-8, as Hugging Face's ByteLevel decoder does.
bool AppendFromByteLevel(std::string_view token, std::string& out);

// Replaces every ill-formed sequence with U+FFFD, one per maximal invalid subpart
// (Unicode's "best practice", which Rust's String::from_utf8_lossy follows).
std::string Utf8Lossy(std::string_view bytes);

}  // namespace latte
