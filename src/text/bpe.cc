#include "text/bpe.h"

#include <algorithm>
#include <cstdio>
#include <queue>

#include "text/byte_level.h"
#include "text/utf8.h"

namespace latte {
namespace {

using nlohmann::json;

// Words up to this many symbols merge by linear scan: O(n^2) but no allocation,
// faster than a heap for the short words that make up almost all text.
constexpr size_t kMaxScanSymbols = 48;

// "<0x0A>": Hugging Face's byte-fallback token for byte 0x0a.
std::string ByteFallbackToken(uint8_t b) {
  char buf[8];
  std::snprintf(buf, sizeof(buf), "<0x%02X>", b);
  return buf;
}

}  // namespace

Result<std::unique_ptr<BpeModel>> BpeModel::FromJson(const json& model, bool byte_level_input) {
  auto bpe = std::unique_ptr<BpeModel>(new BpeModel());
  bpe->byte_level_input_ = byte_level_input;
  const auto flag = [&](const char* key) {
    return model.contains(key) && model[key].is_boolean() && model[key].get<bool>();
  };
  bpe->byte_fallback_ = flag("byte_fallback");
  bpe->ignore_merges_ = flag("ignore_merges");
  bpe->fuse_unk_ = flag("fuse_unk");
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (model.contains(key) && !model[key].is_null() && model[key] != "") {
      return Status::Unimplemented(std::string("model.") + key + " is not supported");
    }
  }
  if (model.contains("dropout") && !model["dropout"].is_null() && model["dropout"] != 0.0) {
    return Status::Unimplemented("model.dropout is not supported (encoding must be deterministic)");
  }
  if (!model.contains("vocab") || !model["vocab"].is_object()) return Status::DataLoss("model.vocab must be an object");
  LATTE_RETURN_IF_ERROR(bpe->LoadVocab(model["vocab"]));
  if (!model.contains("merges") || !model["merges"].is_array())
    return Status::DataLoss("model.merges must be an array");
  LATTE_RETURN_IF_ERROR(bpe->LoadMerges(model["merges"]));
  if (model.contains("unk_token") && model["unk_token"].is_string()) {
    const auto unk = bpe->TokenToId(model["unk_token"].get<std::string>());
    if (!unk)
      return Status::DataLoss("model.unk_token \"" + model["unk_token"].get<std::string>() + "\" is not in the vocab");
    bpe->unk_id_ = *unk;
  }
  for (int b = 0; b < 256; ++b) {
    bpe->byte_ids_[b] = bpe->TokenToId(ByteLevelChar(static_cast<uint8_t>(b))).value_or(-1);
  }
  return bpe;
}

Status BpeModel::LoadVocab(const json& vocab) {
  int64_t limit = 0;
  for (const auto& [token, id] : vocab.items()) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > INT32_MAX - 1) {
      return Status::DataLoss("model.vocab[\"" + token + "\"] is not a token id");
    }
    limit = std::max(limit, id.get<int64_t>() + 1);
  }
  id_to_token_.assign(static_cast<size_t>(limit), std::string());
  vocab_.reserve(vocab.size());
  for (const auto& [token, id] : vocab.items()) {
    vocab_[token] = id.get<int32_t>();
    id_to_token_[id.get<int32_t>()] = token;
  }
  return Status::Ok();
}

Status BpeModel::LoadMerges(const json& merges) {
  merges_.reserve(merges.size());
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const json& m = merges[rank];
    std::string left, right;
    if (m.is_string()) {  // "a b"
      const std::string s = m.get<std::string>();
      const size_t space = s.find(' ');
      if (space == std::string::npos)
        return Status::DataLoss("model.merges[" + std::to_string(rank) + "] \"" + s + "\" has no space");
      left = s.substr(0, space);
      right = s.substr(space + 1);
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {  // ["a", "b"]
      left = m[0].get<std::string>();
      right = m[1].get<std::string>();
    } else {
      return Status::DataLoss("model.merges[" + std::to_string(rank) + "] is neither \"a b\" nor [\"a\", \"b\"]");
    }
    const auto l = TokenToId(left), r = TokenToId(right), merged = TokenToId(left + right);
    if (!l || !r || !merged) {
      return Status::DataLoss("model.merges[" + std::to_string(rank) + "] (\"" + left + "\", \"" + right +
                              "\") uses a token missing from the vocab");
    }
    // A repeated pair keeps its last rank, as Hugging Face's map insertion does.
    merges_[PairKey(*l, *r)] = Merge{static_cast<int32_t>(rank), *merged};
  }
  return Status::Ok();
}

std::optional<int32_t> BpeModel::TokenToId(std::string_view token) const {
  const auto it = vocab_.find(std::string(token));
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

const std::string& BpeModel::IdToToken(int32_t id) const {
  static const std::string kNone;
  if (id < 0 || id >= IdLimit()) return kNone;
  return id_to_token_[id];
}

const BpeModel::Merge* BpeModel::FindMerge(int32_t left, int32_t right) const {
  const auto it = merges_.find(PairKey(left, right));
  return it == merges_.end() ? nullptr : &it->second;
}

void BpeModel::AppendCharacterSymbols(std::string_view ch, std::vector<int32_t>& symbols, bool& pending_unk) const {
  const auto flush_unk = [&] {
    if (pending_unk) symbols.push_back(*unk_id_);
    pending_unk = false;
  };
  if (const auto id = TokenToId(ch)) {
    flush_unk();
    symbols.push_back(*id);
    return;
  }
  if (byte_fallback_) {
    std::vector<int32_t> bytes;
    for (unsigned char b : ch) {
      const auto id = TokenToId(ByteFallbackToken(b));
      if (!id) break;
      bytes.push_back(*id);
    }
    if (bytes.size() == ch.size()) {
      flush_unk();
      symbols.insert(symbols.end(), bytes.begin(), bytes.end());
      return;
    }
  }
  if (!unk_id_) return;  // no unk token: the character is dropped
  if (!fuse_unk_) flush_unk();
  pending_unk = true;
}

void BpeModel::InitialSymbols(std::string_view piece, std::vector<int32_t>& symbols) const {
  symbols.clear();
  bool pending_unk = false;
  if (byte_level_input_) {
    for (unsigned char b : piece) {
      if (byte_ids_[b] >= 0 && !pending_unk) {
        symbols.push_back(byte_ids_[b]);
      } else {
        AppendCharacterSymbols(ByteLevelChar(b), symbols, pending_unk);
      }
    }
  } else {
    for (size_t i = 0; i < piece.size();) {
      size_t n = Utf8SequenceLength(static_cast<unsigned char>(piece[i]));
      if (n == 0 || i + n > piece.size() || !IsValidUtf8(piece.substr(i, n))) n = 1;
      AppendCharacterSymbols(piece.substr(i, n), symbols, pending_unk);
      i += n;
    }
  }
  if (pending_unk) symbols.push_back(*unk_id_);
}

void BpeModel::MergeByScan(std::vector<int32_t>& symbols) const {
  while (symbols.size() > 1) {
    const Merge* best = nullptr;
    size_t best_pos = 0;
    for (size_t i = 0; i + 1 < symbols.size(); ++i) {
      const Merge* m = FindMerge(symbols[i], symbols[i + 1]);
      if (m && (!best || m->rank < best->rank)) {
        best = m;
        best_pos = i;
      }
    }
    if (!best) return;
    symbols[best_pos] = best->new_id;
    symbols.erase(symbols.begin() + static_cast<ptrdiff_t>(best_pos) + 1);
  }
}

void BpeModel::MergeByHeap(std::vector<int32_t>& symbols) const {
  // Doubly linked list over symbol slots; a merged-away slot gets id -1.
  const int32_t n = static_cast<int32_t>(symbols.size());
  std::vector<int32_t> prev(n), next(n);
  for (int32_t i = 0; i < n; ++i) {
    prev[i] = i - 1;
    next[i] = i + 1 < n ? i + 1 : -1;
  }
  struct Candidate {
    int32_t rank, pos, new_id;
    bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> heap;
  const auto push = [&](int32_t pos) {
    if (pos < 0 || next[pos] < 0) return;
    if (const Merge* m = FindMerge(symbols[pos], symbols[next[pos]])) heap.push({m->rank, pos, m->new_id});
  };
  for (int32_t i = 0; i + 1 < n; ++i) push(i);
  while (!heap.empty()) {
    const Candidate top = heap.top();
    heap.pop();
    // Stale when either side changed since the candidate was pushed.
    if (symbols[top.pos] < 0 || next[top.pos] < 0) continue;
    const Merge* m = FindMerge(symbols[top.pos], symbols[next[top.pos]]);
    if (!m || m->new_id != top.new_id) continue;
    const int32_t right = next[top.pos];
    symbols[top.pos] = top.new_id;
    symbols[right] = -1;
    next[top.pos] = next[right];
    if (next[right] >= 0) prev[next[right]] = top.pos;
    push(prev[top.pos]);
    push(top.pos);
  }
  symbols.erase(std::remove(symbols.begin(), symbols.end(), -1), symbols.end());
}

void BpeModel::EncodeUncached(std::string_view piece, std::vector<int32_t>& out) const {
  if (ignore_merges_) {
    const auto whole = TokenToId(byte_level_input_ ? ToByteLevel(piece) : std::string(piece));
    if (whole) {
      out.push_back(*whole);
      return;
    }
  }
  std::vector<int32_t> symbols;
  symbols.reserve(piece.size());
  InitialSymbols(piece, symbols);
  if (symbols.size() <= kMaxScanSymbols) {
    MergeByScan(symbols);
  } else {
    MergeByHeap(symbols);
  }
  out.insert(out.end(), symbols.begin(), symbols.end());
}

void BpeModel::Encode(std::string_view piece, std::vector<int32_t>& out) const {
  if (piece.size() > kMaxCachedPieceBytes) {
    EncodeUncached(piece, out);
    return;
  }
  // Mapping a small key to its std::string costs less than the merge work it saves.
  thread_local std::string key;
  key.assign(piece);
  {
    std::lock_guard<std::mutex> lock(cache_mutex_);
    const auto it = cache_.find(key);
    if (it != cache_.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  const size_t start = out.size();
  EncodeUncached(piece, out);
  std::vector<int32_t> ids(out.begin() + static_cast<ptrdiff_t>(start), out.end());
  std::lock_guard<std::mutex> lock(cache_mutex_);
  if (cache_.size() >= kCacheCapacity) cache_.clear();
  cache_.emplace(key, std::move(ids));
}

}  // namespace latte
