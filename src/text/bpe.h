// Byte-pair-encoding model of a Hugging Face tokenizer.json ("model": {"type": "BPE"}).
//
// A pre-token (raw bytes) becomes initial symbols, then pairs merge in rank order:
// the pair with the lowest merge rank, leftmost among equals, merges first, until no
// adjacent pair is in the merge table. This is what Hugging Face's BPE::merge_word
// computes with its heap; for short words a linear scan is faster and gives the same
// result. Initial symbols:
//   byte-level input (a ByteLevel pre-tokenizer ran): one symbol per byte, the id of
//     the byte's GPT-2 character (see byte_level.h);
//   otherwise: one symbol per UTF-8 character; a character missing from the vocab
//     becomes <0xNN> byte tokens when byte_fallback is on, else unk_token (fused when
//     fuse_unk), else it is dropped, as in Hugging Face.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/status.h"

namespace latte {

class BpeModel {
 public:
  // `model`: the "model" object of tokenizer.json. `byte_level_input`: pre-tokens
  // arrive as raw bytes to be read through the byte-level alphabet.
  static Result<std::unique_ptr<BpeModel>> FromJson(const nlohmann::json& model, bool byte_level_input);

  // Appends the ids of one pre-token (raw bytes, non-empty) to `out`. Thread-safe.
  void Encode(std::string_view piece, std::vector<int32_t>& out) const;

  std::optional<int32_t> TokenToId(std::string_view token) const;
  // Empty when `id` has no vocab entry.
  const std::string& IdToToken(int32_t id) const;
  // One past the largest vocab id.
  int32_t IdLimit() const { return static_cast<int32_t>(id_to_token_.size()); }

 private:
  struct Merge {
    int32_t rank;    // position in the merges list: lower merges first
    int32_t new_id;  // id of the concatenated token
  };
  static uint64_t PairKey(int32_t left, int32_t right) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
  }

  Status LoadVocab(const nlohmann::json& vocab);
  Status LoadMerges(const nlohmann::json& merges);
  // The symbols a pre-token starts from (see the file comment).
  void InitialSymbols(std::string_view piece, std::vector<int32_t>& symbols) const;
  void AppendCharacterSymbols(std::string_view ch, std::vector<int32_t>& symbols, bool& pending_unk) const;
  // Merges `symbols` in place; two strategies with identical results.
  void MergeByScan(std::vector<int32_t>& symbols) const;
  void MergeByHeap(std::vector<int32_t>& symbols) const;
  const Merge* FindMerge(int32_t left, int32_t right) const;
  void EncodeUncached(std::string_view piece, std::vector<int32_t>& out) const;

  std::unordered_map<std::string, int32_t> vocab_;
  std::vector<std::string> id_to_token_;  // [IdLimit()], "" for unused ids
  std::unordered_map<uint64_t, Merge> merges_;
  std::array<int32_t, 256> byte_ids_;  // byte -> id of its byte-level character, or -1
  bool byte_level_input_ = false;
  bool byte_fallback_ = false;
  bool ignore_merges_ = false;
  bool fuse_unk_ = false;
  std::optional<int32_t> unk_id_;

  // Pre-token -> ids for pieces up to kMaxCachedPieceBytes. Text repeats words
  // heavily (Zipf), so most pieces hit; the map is cleared when it reaches
  // kCacheCapacity entries, which bounds memory (~10 MB) without LRU bookkeeping.
  static constexpr size_t kMaxCachedPieceBytes = 64;
  static constexpr size_t kCacheCapacity = 100000;
  mutable std::mutex cache_mutex_;
  mutable std::unordered_map<std::string, std::vector<int32_t>> cache_;
};

}  // namespace latte
