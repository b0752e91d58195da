#include "engine/step_control.h"

#include <cstring>
#include <string>
#include <type_traits>

namespace latte {
namespace {

class Writer {
 public:
  template <typename T> void Put(const T& v) {
    static_assert(std::is_trivially_copyable_v<T>);
    const auto* p = reinterpret_cast<const uint8_t*>(&v);
    out_.insert(out_.end(), p, p + sizeof(T));
  }
  void PutString(const std::string& s) {
    Put<uint64_t>(s.size());
    out_.insert(out_.end(), s.begin(), s.end());
  }
  template <typename T> void PutVector(const std::vector<T>& v) {
    Put<uint64_t>(v.size());
    for (const T& x : v) Put(x);
  }
  std::vector<uint8_t> Take() { return std::move(out_); }

 private:
  std::vector<uint8_t> out_;
};

class Reader {
 public:
  explicit Reader(const std::vector<uint8_t>& in) : in_(in) {}
  template <typename T> bool Get(T& v) {
    if (in_.size() - pos_ < sizeof(T)) return false;
    std::memcpy(&v, in_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return true;
  }
  bool GetString(std::string& s) {
    uint64_t n = 0;
    if (!Get(n) || in_.size() - pos_ < n) return false;
    s.assign(reinterpret_cast<const char*>(in_.data() + pos_), n);
    pos_ += n;
    return true;
  }
  template <typename T> bool GetVector(std::vector<T>& v) {
    uint64_t n = 0;
    if (!Get(n) || (in_.size() - pos_) / sizeof(T) < n) return false;
    v.resize(n);
    for (T& x : v) Get(x);
    return true;
  }
  bool done() const { return pos_ == in_.size(); }

 private:
  const std::vector<uint8_t>& in_;
  size_t pos_ = 0;
};

void PutSampling(Writer& w, const SamplingParams& p) {
  w.Put(p.temperature);
  w.Put(p.top_k);
  w.Put(p.top_p);
  w.Put(p.min_p);
  w.Put(p.presence_penalty);
  w.Put(p.frequency_penalty);
  w.Put(p.repetition_penalty);
  w.Put<uint8_t>(p.seed.has_value());
  w.Put<uint64_t>(p.seed.value_or(0));
  w.Put(p.logprobs);
  w.Put(p.logprobs_mode);
}

bool GetSampling(Reader& r, SamplingParams& p) {
  uint8_t has_seed = 0;
  uint64_t seed = 0;
  const bool ok = r.Get(p.temperature) && r.Get(p.top_k) && r.Get(p.top_p) && r.Get(p.min_p) &&
                  r.Get(p.presence_penalty) && r.Get(p.frequency_penalty) && r.Get(p.repetition_penalty) &&
                  r.Get(has_seed) && r.Get(seed) && r.Get(p.logprobs) && r.Get(p.logprobs_mode);
  if (has_seed) p.seed = seed;
  return ok;
}

void PutToken(Writer& w, const SampledToken& t) {
  w.Put(t.id);
  w.Put(t.logprob);
  w.Put(t.num_top);
  for (int i = 0; i < t.num_top; ++i) w.Put(t.top[i]);
}

bool GetToken(Reader& r, SampledToken& t) {
  if (!r.Get(t.id) || !r.Get(t.logprob) || !r.Get(t.num_top)) return false;
  if (t.num_top < 0 || t.num_top > kMaxTopLogprobs) return false;
  for (int i = 0; i < t.num_top; ++i) {
    if (!r.Get(t.top[i])) return false;
  }
  return true;
}

void PutTokens(Writer& w, const std::vector<SampledToken>& tokens) {
  w.Put<uint64_t>(tokens.size());
  for (const SampledToken& t : tokens) PutToken(w, t);
}

bool GetTokens(Reader& r, std::vector<SampledToken>& tokens, size_t limit) {
  uint64_t n = 0;
  if (!r.Get(n) || n > limit) return false;
  tokens.resize(n);
  for (SampledToken& t : tokens) {
    if (!GetToken(r, t)) return false;
  }
  return true;
}

}  // namespace

std::vector<uint8_t> EncodeOutputs(const std::vector<std::pair<int64_t, GenerationOutput>>& outputs) {
  Writer w;
  w.Put<uint64_t>(outputs.size());
  for (const auto& [id, o] : outputs) {
    w.Put(id);
    w.Put(o.index);
    PutTokens(w, o.tokens);
    w.PutString(o.text);
    w.Put<int32_t>(o.finish ? static_cast<int32_t>(*o.finish) : -1);
    w.PutString(o.stop_reason);
    w.PutString(o.error);
    PutTokens(w, o.prompt_logprobs);
    w.PutVector(o.logits);
    w.Put(o.prompt_tokens);
    w.Put(o.cached_tokens);
  }
  return w.Take();
}

Result<std::vector<std::pair<int64_t, GenerationOutput>>> DecodeOutputs(const std::vector<uint8_t>& bytes) {
  Reader r(bytes);
  std::vector<std::pair<int64_t, GenerationOutput>> outputs;
  uint64_t n = 0;
  bool ok = r.Get(n) && n <= bytes.size();
  for (uint64_t i = 0; ok && i < n; ++i) {
    int64_t id = 0;
    GenerationOutput o;
    int32_t finish = -1;
    ok = r.Get(id) && r.Get(o.index) && GetTokens(r, o.tokens, bytes.size()) && r.GetString(o.text) && r.Get(finish) &&
         r.GetString(o.stop_reason) && r.GetString(o.error) && GetTokens(r, o.prompt_logprobs, bytes.size()) &&
         r.GetVector(o.logits) && r.Get(o.prompt_tokens) && r.Get(o.cached_tokens) && finish >= -1 &&
         finish <= static_cast<int32_t>(FinishReason::kAbort);
    if (finish >= 0) o.finish = static_cast<FinishReason>(finish);
    outputs.emplace_back(id, std::move(o));
  }
  if (!ok || !r.done()) {
    return Status::DataLoss("a rank's step outputs of " + std::to_string(bytes.size()) + " bytes are cut short");
  }
  return outputs;
}

std::vector<uint8_t> EncodeStepControl(const StepControl& control) {
  Writer w;
  w.Put<uint8_t>(control.shutdown);
  w.Put<uint64_t>(control.requests.size());
  for (const auto& [id, req] : control.requests) {
    w.Put(id);
    w.PutVector(req.prompt);
    PutSampling(w, req.sampling);
    w.Put(req.max_tokens);
    w.Put<uint64_t>(req.stop.size());
    for (const std::string& s : req.stop) w.PutString(s);
    w.PutVector(req.stop_token_ids);
    w.Put<uint8_t>(req.ignore_eos);
    w.Put<uint8_t>(req.skip_special_tokens);
    w.Put(req.n);
    w.Put<uint8_t>(req.prompt_logprobs);
    w.Put<uint8_t>(req.return_logits);
    w.PutString(req.output_constraint);
  }
  w.PutVector(control.ranks);
  w.PutVector(control.aborts);
  return w.Take();
}

Result<StepControl> DecodeStepControl(const std::vector<uint8_t>& bytes) {
  Reader r(bytes);
  StepControl control;
  uint8_t shutdown = 0;
  uint64_t requests = 0;
  bool ok = r.Get(shutdown) && r.Get(requests) && requests <= bytes.size();
  control.shutdown = shutdown != 0;
  for (uint64_t i = 0; ok && i < requests; ++i) {
    int64_t id = 0;
    GenerationRequest req;
    uint64_t stops = 0;
    uint8_t ignore_eos = 0, skip_special = 0, prompt_logprobs = 0, return_logits = 0;
    ok = r.Get(id) && r.GetVector(req.prompt) && GetSampling(r, req.sampling) && r.Get(req.max_tokens) &&
         r.Get(stops) && stops <= bytes.size();
    for (uint64_t s = 0; ok && s < stops; ++s) {
      std::string stop;
      ok = r.GetString(stop);
      req.stop.push_back(std::move(stop));
    }
    ok = ok && r.GetVector(req.stop_token_ids) && r.Get(ignore_eos) && r.Get(skip_special) && r.Get(req.n) &&
         r.Get(prompt_logprobs) && r.Get(return_logits) && r.GetString(req.output_constraint);
    req.ignore_eos = ignore_eos != 0;
    req.skip_special_tokens = skip_special != 0;
    req.prompt_logprobs = prompt_logprobs != 0;
    req.return_logits = return_logits != 0;
    control.requests.emplace_back(id, std::move(req));
  }
  ok = ok && r.GetVector(control.ranks) && r.GetVector(control.aborts) && r.done();
  if (!ok) return Status::DataLoss("a step control message of " + std::to_string(bytes.size()) + " bytes is cut short");
  return control;
}

}  // namespace latte
