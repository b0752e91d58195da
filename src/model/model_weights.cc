#include "model/model_weights.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>

#include "kernels/block_quant.h"
#include "kernels/fp8_quantize.h"
#include "model/gguf_checkpoint.h"
#include "model/mla_preparation.h"
#include "model/tensor_specs.h"

namespace latte {
namespace {

std::string FileName(const std::string& path) { return std::filesystem::path(path).filename().string(); }

double SecondsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

float ElementToF32(DType dtype, const uint8_t* p, size_t i) {
  switch (dtype) {
    case DType::kF32: {
      float v;
      std::memcpy(&v, p + 4 * i, 4);
      return v;
    }
    case DType::kBF16: {
      bf16 v;
      std::memcpy(&v, p + 2 * i, 2);
      return Bf16ToF32(v);
    }
    case DType::kF16: {
      uint16_t v;
      std::memcpy(&v, p + 2 * i, 2);
      return F16ToF32(v);
    }
    case DType::kF8E4M3: return Fp8E4M3ToF32(p[i]);
    default: break;  // block formats: read by row, never by element
  }
  return 0;
}

// Which part of a matrix a rank holds: all of it, a range of its rows (output
// features), or a range of its columns (input features).
struct Slice {
  enum Axis { kWhole, kRows, kCols };
  Axis axis = kWhole;
  IndexRange range;
  static Slice Rows(IndexRange r) { return {kRows, r}; }
  static Slice Cols(IndexRange r) { return {kCols, r}; }
};

}  // namespace

// Walks the expected tensor list, checks each against the checkpoint, converts it
// to its compute precision, and prepares the MLA matrices of the chosen mode.
class WeightLoader {
 public:
  // How a matrix may be held in fp8 (stored so, or quantized at load under --quantize fp8).
  enum class Fp8Role {
    kKept,         // projections, MLP and expert matrices, lm_head: e4m3 views + f32 block scales
    kDequantized,  // kv_b_proj: only its bf16 dequantization (the per-head W_UKᵀ / W_UV products run on bf16)
    kNever,        // embed_tokens: never quantized at load (a token gathers one row of it)
  };

  WeightLoader(ModelWeights& m, const LoadOptions& options, std::string source, bool from_gguf)
      : m_(m),
        options_(options),
        source_(std::move(source)),
        from_gguf_(from_gguf),
        start_(std::chrono::steady_clock::now()) {}

  // Every expected tensor against the checkpoint's headers: run before Run, and before
  // a huge-page copy reads any data.
  Status Check() { return CheckTensorSet(); }

  // The huge-page copy's part of the progress line: the same line as the tensors'
  // ("loading: ..."), redrawn on a terminal, once at the end in a log.
  void ReportReading(uint64_t done, uint64_t total) {
    if (!options_.progress) return;
    const bool final = done >= total;
    if (!final && SecondsSince(last_report_) < 0.5) return;
    last_report_ = std::chrono::steady_clock::now();
    const bool tty = isatty(STDERR_FILENO);
    if (!final && !tty) return;
    std::fprintf(stderr, "%sloading: read into 2 MiB pages %.2f / %.2f GB, %.1f s%s", tty ? "\r" : "", done / 1e9,
                 total / 1e9, SecondsSince(start_), final ? "\n" : "");
    std::fflush(stderr);
  }

  Status Run() {
    const ModelConfig& c = m_.config_;
    m_.compute_dtype_ = ChooseComputeDType();
    total_bytes_ = m_.checkpoint_->TotalBytes();
    ranges_ = RangesOf(c, options_.shard, VocabAlign());
    m_.vocab_ranges_ = VocabRanges(c, VocabRanks(options_.shard), VocabAlign());

    LATTE_ASSIGN_OR_RETURN(m_.embed_tokens_,
                           Matrix("model.embed_tokens.weight", &m_.memory_.embeddings, Fp8Role::kNever));
    m_.layers_.resize(c.num_hidden_layers);
    for (int64_t layer = 0; layer < c.num_hidden_layers; ++layer) {
      LATTE_RETURN_IF_ERROR(LoadLayer(layer, m_.layers_[layer]));
    }
    LATTE_ASSIGN_OR_RETURN(m_.final_norm_, Vector("model.norm.weight", &m_.memory_.embeddings));
    const Slice vocab = Sharded() ? Slice::Rows(ranges_.vocab) : Slice{};
    if (Sharded()) {
      // This rank's rows of lm_head (tied: of embed_tokens), whatever its storage.
      LATTE_ASSIGN_OR_RETURN(m_.lm_head_, Matrix(c.tie_word_embeddings ? "model.embed_tokens.weight" : "lm_head.weight",
                                                 &m_.memory_.embeddings, Fp8Role::kKept, vocab));
    } else if (c.tie_word_embeddings && QuantizesAtLoad(Fp8Role::kKept, "model.embed_tokens.weight")) {
      // lm_head is embed_tokens: its fp8 copy sits beside the embedding, which stays as stored.
      const TensorInfo& t = *m_.checkpoint_->Find("model.embed_tokens.weight");
      m_.lm_head_ = QuantizeKept(t, /*release_source=*/false);
      m_.memory_.embeddings += m_.lm_head_.Bytes() + m_.lm_head_.ScaleBytes();
    } else if (c.tie_word_embeddings) {
      m_.lm_head_ = m_.embed_tokens_;
    } else {
      LATTE_ASSIGN_OR_RETURN(m_.lm_head_, Matrix("lm_head.weight", &m_.memory_.embeddings));
    }
    if (options_.mtp) LATTE_RETURN_IF_ERROR(LoadMtp());
    if (options_.progress) {
      ReportProgress(/*final=*/true);
      ReportMemory();
    }
    return Status::Ok();
  }

 private:
  // The first MTP layer (MtpWeights), held as the main layers are.
  Status LoadMtp() {
    const ModelConfig& c = m_.config_;
    const std::string p = LayerPrefix(c.num_hidden_layers);
    MtpWeights& mtp = m_.mtp_.emplace();
    size_t* bucket = &m_.memory_.mtp;
    const WeightMemory before = m_.memory_;
    // V3's release (and vLLM's loader) share the embedding and the output head with the
    // main model: a copy holding the same bytes is held once.
    if (SameStoredTensor(p + "embed_tokens.weight", "model.embed_tokens.weight")) {
      mtp.embed_tokens = m_.embed_tokens_;
      ReleaseCopy(p + "embed_tokens.weight");
    } else {
      LATTE_ASSIGN_OR_RETURN(mtp.embed_tokens, Matrix(p + "embed_tokens.weight", bucket, Fp8Role::kNever));
    }
    LATTE_ASSIGN_OR_RETURN(mtp.enorm, Vector(p + "enorm.weight", bucket));
    LATTE_ASSIGN_OR_RETURN(mtp.hnorm, Vector(p + "hnorm.weight", bucket));
    LATTE_ASSIGN_OR_RETURN(mtp.eh_proj, Matrix(p + "eh_proj.weight", bucket));
    LATTE_RETURN_IF_ERROR(LoadLayer(c.num_hidden_layers, mtp.block));
    LATTE_ASSIGN_OR_RETURN(mtp.head_norm, Vector(p + "shared_head.norm.weight", bucket));
    if (!c.tie_word_embeddings && SameStoredTensor(p + "shared_head.head.weight", "lm_head.weight")) {
      mtp.head = m_.lm_head_;
      ReleaseCopy(p + "shared_head.head.weight");
    } else {
      LATTE_ASSIGN_OR_RETURN(mtp.head, Matrix(p + "shared_head.head.weight", bucket));
    }
    // The block's bytes went to the main layers' buckets: they are the MTP layer's.
    WeightMemory& after = m_.memory_;
    after.mtp += (after.attention - before.attention) + (after.attention_prepared - before.attention_prepared) +
                 (after.materialized - before.materialized) + (after.experts - before.experts) +
                 (after.dense_mlp - before.dense_mlp);
    after.attention = before.attention;
    after.attention_prepared = before.attention_prepared;
    after.materialized = before.materialized;
    after.experts = before.experts;
    after.dense_mlp = before.dense_mlp;
    return Status::Ok();
  }

  // A tensor held through another's view: its pages leave the resident set.
  void ReleaseCopy(const std::string& name) {
    const TensorInfo& t = *m_.checkpoint_->Find(name);
    ReleasePages(t.data, t.nbytes);
    Done(t);
  }

  // Whether tensors a and b hold the same values in the same format (one process: a
  // sharded load holds slices).
  bool SameStoredTensor(const std::string& a, const std::string& b) const {
    const TensorInfo* x = m_.checkpoint_->Find(a);
    const TensorInfo* y = m_.checkpoint_->Find(b);
    if (Sharded() || x == nullptr || y == nullptr || x->dtype != y->dtype || x->shape != y->shape) return false;
    if (x->dtype == DType::kF8E4M3) return false;  // their scales too: rare enough to hold twice
    return x->nbytes == y->nbytes && std::memcmp(x->data, y->data, x->nbytes) == 0;
  }

  // Every expected tensor is present with the right shape; tensors of layers past
  // num_hidden_layers (V3's multi-token-prediction layer) are skipped with a note,
  // unless LoadOptions::mtp asks for the first of them.
  Status CheckTensorSet() {
    const ModelConfig& c = m_.config_;
    if (options_.mtp && c.num_nextn_predict_layers == 0) {
      return Status::InvalidArgument(source_ + " has no multi-token-prediction layer (" + ConfigSource() +
                                         " sets no num_nextn_predict_layers): --speculative mtp needs one, as "
                                         "DeepSeek-V3 and R1 have",
                                     "speculative");
    }
    if (options_.mtp && options_.shard.sharded()) {
      return Status::InvalidArgument("--speculative mtp runs in one process only (not under --tp, --dp or --ep)",
                                     "speculative");
    }
    // A config that names more layers than the checkpoint holds fails here, on the
    // tensor names alone, before the expected list (tensors per layer x layers) is built.
    std::set<int64_t> present;
    for (const TensorInfo& t : m_.checkpoint_->tensors()) {
      if (const int64_t layer = LayerOf(t.name); layer >= 0) present.insert(layer);
    }
    for (int64_t layer = 0; layer < c.num_hidden_layers; ++layer) {
      if (present.count(layer) == 0) {
        return Status::NotFound(source_ + ": missing tensor \"" + LayerPrefix(layer) +
                                "input_layernorm.weight\" (config.json's num_hidden_layers is " +
                                std::to_string(c.num_hidden_layers) + "; the checkpoint has no tensor of layer " +
                                std::to_string(layer) + ")");
      }
    }
    std::vector<TensorSpec> expected = ExpectedTensors(c);
    if (options_.mtp) {
      for (TensorSpec& spec : ExpectedMtpTensors(c)) {
        if (LayerOf(spec.name) == c.num_hidden_layers) expected.push_back(std::move(spec));
      }
    }
    for (const TensorSpec& spec : expected) {
      specs_[spec.name] = spec;
      const TensorInfo* t = m_.checkpoint_->Find(spec.name);
      if (t == nullptr) {
        return Status::NotFound(source_ + ": missing tensor \"" + spec.name + "\" (" + ConfigSource() +
                                " expects it, shape " + ShapeString(spec.shape) + ")");
      }
      if (t->shape != spec.shape) {
        return Status::DataLoss(FileName(t->file) + ": tensor \"" + spec.name + "\" has shape " +
                                ShapeString(t->shape) + ", " + ConfigSource() + " implies " + ShapeString(spec.shape));
      }
    }
    int64_t skipped = 0;
    std::set<int64_t> skipped_layers;
    for (const TensorInfo& t : m_.checkpoint_->tensors()) {
      const int64_t layer = LayerOf(t.name);
      if (layer >= c.num_hidden_layers + (options_.mtp ? 1 : 0)) {
        ++skipped;
        skipped_layers.insert(layer);
        skipped_bytes_ += t.nbytes;
      } else if (!specs_.count(t.name) && !EndsWith(t.name, "_scale_inv")) {
        ++unexpected_;
        if (first_unexpected_.empty()) first_unexpected_ = t.name;
      }
    }
    if (skipped > 0 && options_.progress) {
      std::fprintf(stderr,
                   "note: skipping %lld tensors of %zu layer(s) past num_hidden_layers=%lld "
                   "(e.g. the multi-token-prediction layer)\n",
                   static_cast<long long>(skipped), skipped_layers.size(), static_cast<long long>(c.num_hidden_layers));
    }
    if (unexpected_ > 0 && options_.progress) {
      std::fprintf(stderr, "note: ignoring %lld tensor(s) the model does not use (first: \"%s\")\n",
                   static_cast<long long>(unexpected_), first_unexpected_.c_str());
    }
    return Status::Ok();
  }

  // f32 only when every projection is stored f32 (then the three modes can be
  // compared at f32 precision); bf16 for bf16, f16 and fp8 checkpoints, and for any
  // checkpoint quantized to fp8 at load (as fp8 checkpoints are).
  DType ChooseComputeDType() const {
    if (options_.quantize == WeightQuantization::kFp8) return DType::kBF16;
    for (const auto& [name, spec] : specs_) {
      if (spec.kind != TensorKind::kLinear) continue;
      if (m_.checkpoint_->Find(name)->dtype != DType::kF32) return DType::kBF16;
    }
    return DType::kF32;
  }

  Status LoadLayer(int64_t layer, LayerWeights& lw) {
    const ModelConfig& c = m_.config_;
    const std::string p = LayerPrefix(layer);
    WeightMemory& mem = m_.memory_;
    LATTE_ASSIGN_OR_RETURN(lw.input_layernorm, Vector(p + "input_layernorm.weight", &mem.attention));
    LATTE_ASSIGN_OR_RETURN(lw.post_attention_layernorm, Vector(p + "post_attention_layernorm.weight", &mem.attention));
    MlaWeights& a = lw.attn;
    const std::string s = p + "self_attn.";
    const int64_t qk = c.QkHeadDim(), kv_b_rows = c.qk_nope_head_dim + c.v_head_dim;
    if (c.q_lora_rank) {
      LATTE_ASSIGN_OR_RETURN(a.q_a_proj, Matrix(s + "q_a_proj.weight", &mem.attention));
      LATTE_ASSIGN_OR_RETURN(a.q_a_layernorm, Vector(s + "q_a_layernorm.weight", &mem.attention));
      LATTE_ASSIGN_OR_RETURN(a.q_b_proj, Matrix(s + "q_b_proj.weight", &mem.attention, Fp8Role::kKept, HeadRows(qk)));
    } else {
      LATTE_ASSIGN_OR_RETURN(a.q_b_proj, Matrix(s + "q_proj.weight", &mem.attention, Fp8Role::kKept, HeadRows(qk)));
    }
    LATTE_ASSIGN_OR_RETURN(a.kv_a_proj_with_mqa, Matrix(s + "kv_a_proj_with_mqa.weight", &mem.attention));
    LATTE_ASSIGN_OR_RETURN(a.kv_a_layernorm, Vector(s + "kv_a_layernorm.weight", &mem.attention));
    // bf16 even from fp8: the per-head W_UKᵀ / W_UV batched products run on bf16.
    LATTE_ASSIGN_OR_RETURN(a.kv_b_proj,
                           Matrix(s + "kv_b_proj.weight", &mem.attention, Fp8Role::kDequantized, HeadRows(kv_b_rows)));
    LATTE_ASSIGN_OR_RETURN(a.o_proj, Matrix(s + "o_proj.weight", &mem.attention, Fp8Role::kKept,
                                            Sharded() ? Slice::Cols(Scaled(ranges_.heads, c.v_head_dim)) : Slice{}));
    // The local heads' per-head matrices (shard_config: num_attention_heads = local heads).
    PrepareMlaWeights(m_.shard_config_, m_.mode_, m_.compute_dtype_, a, m_.owned_, m_.memory_);

    const std::string mlp = p + "mlp.";
    lw.is_moe = c.IsMoeLayer(layer);
    if (!lw.is_moe) return LoadMlp(mlp, lw.mlp, &mem.dense_mlp, ranges_.dense_width);
    MoeWeights& moe = lw.moe;
    LATTE_ASSIGN_OR_RETURN(moe.router, Vector(mlp + "gate.weight", &mem.experts));
    if (c.HasScoreCorrectionBias()) {
      LATTE_ASSIGN_OR_RETURN(moe.score_bias, Vector(mlp + "gate.e_score_correction_bias", &mem.experts));
    }
    moe.experts.resize(c.n_routed_experts);
    for (int64_t e = ranges_.experts.first; e < ranges_.experts.end(); ++e) {
      LATTE_RETURN_IF_ERROR(
          LoadMlp(mlp + "experts." + std::to_string(e) + ".", moe.experts[e], &mem.experts, ranges_.expert_width));
    }
    if (c.n_shared_experts > 0) {
      moe.shared.emplace();
      LATTE_RETURN_IF_ERROR(LoadMlp(mlp + "shared_experts.", *moe.shared, &mem.experts, ranges_.shared_width));
    }
    return Status::Ok();
  }

  // An MLP's columns `width` of its hidden layer: gate/up rows, down_proj columns.
  Status LoadMlp(const std::string& prefix, MlpWeights& w, size_t* bucket, IndexRange width) {
    const bool split = Sharded() && width.count != 0;
    const Slice rows = split ? Slice::Rows(width) : Slice{}, cols = split ? Slice::Cols(width) : Slice{};
    LATTE_ASSIGN_OR_RETURN(w.gate_proj, Matrix(prefix + "gate_proj.weight", bucket, Fp8Role::kKept, rows));
    LATTE_ASSIGN_OR_RETURN(w.up_proj, Matrix(prefix + "up_proj.weight", bucket, Fp8Role::kKept, rows));
    LATTE_ASSIGN_OR_RETURN(w.down_proj, Matrix(prefix + "down_proj.weight", bucket, Fp8Role::kKept, cols));
    return Status::Ok();
  }

  bool Sharded() const { return options_.shard.sharded(); }
  std::string ConfigSource() const { return from_gguf_ ? "the GGUF metadata" : "config.json"; }
  // Types the kernels compute on as stored besides the compute dtype and fp8: GGUF's
  // block formats, and F16 from a GGUF (llama.cpp computes on F16 as stored; a
  // safetensors f16 checkpoint is converted to bf16).
  bool HeldAsStored(DType dtype) const { return IsBlockQuantized(dtype) || (dtype == DType::kF16 && from_gguf_); }
  // The local heads' rows of a matrix with `per_head` rows per head.
  Slice HeadRows(int64_t per_head) const { return Sharded() ? Slice::Rows(Scaled(ranges_.heads, per_head)) : Slice{}; }
  static IndexRange Scaled(IndexRange r, int64_t by) { return {r.first * by, r.count * by}; }
  // lm_head rows are split on fp8 block rows when lm_head is held in fp8.
  int64_t VocabAlign() const {
    if (options_.quantize == WeightQuantization::kFp8) return QuantizationBlock().block_rows;
    const TensorInfo* head =
        m_.checkpoint_->Find(m_.config_.tie_word_embeddings ? "model.embed_tokens.weight" : "lm_head.weight");
    if (head && head->dtype == DType::kF8E4M3 && m_.config_.quantization) return m_.config_.quantization->block_rows;
    return 1;
  }

  // The slice of t as a tensor of its own, in t's dtype: its bytes copied out of the
  // mapping into `buffer`, the mapping's pages of t given back. A sharded load copies
  // every matrix (kWhole: all of it), so nothing of the rank's resident set is the
  // file's. A block format's column cuts must lie on its blocks (a row is blocks end
  // to end); an error says which tensor and layout they do not.
  Result<TensorInfo> CopySlice(const TensorInfo& t, const Slice& slice, AlignedBuffer& buffer) {
    const int64_t rows = t.shape[0], cols = t.shape[1];
    IndexRange r{0, rows}, c{0, cols};
    if (slice.axis == Slice::kRows) r = slice.range;
    if (slice.axis == Slice::kCols) c = slice.range;
    const int64_t block = DTypeBlockElements(t.dtype);
    if (c.first % block != 0 || c.count % block != 0) {
      return Status::InvalidArgument(source_ + ": a rank's share of " + t.name + " is " + std::to_string(c.count) +
                                         " columns, not whole " + std::string(DTypeName(t.dtype)) + " blocks of " +
                                         std::to_string(block) +
                                         " values: split it over fewer ranks (routed experts: --ep keeps each whole)",
                                     "tp");
    }
    const size_t row_bytes = DTypeRowBytes(t.dtype, cols), slice_row_bytes = DTypeRowBytes(t.dtype, c.count);
    const size_t first_col_bytes = DTypeRowBytes(t.dtype, c.first);
    buffer = AlignedBuffer(std::max<size_t>(1, static_cast<size_t>(r.count) * slice_row_bytes));
    std::byte* out = buffer.data();
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < r.count; ++i) {
      std::memcpy(out + static_cast<size_t>(i) * slice_row_bytes,
                  t.data + static_cast<size_t>(r.first + i) * row_bytes + first_col_bytes, slice_row_bytes);
    }
    ReleasePages(t.data, t.nbytes);
    TensorInfo sliced = t;
    sliced.shape = {r.count, c.count};
    sliced.data = reinterpret_cast<const uint8_t*>(out);
    sliced.nbytes = static_cast<size_t>(r.count) * slice_row_bytes;
    return sliced;
  }

  // The block scales covering `slice` of an fp8 weight (its cuts lie on block edges).
  static Slice ScaleSlice(const Slice& slice, const Fp8Quantization& q) {
    const int64_t block = slice.axis == Slice::kRows ? q.block_rows : q.block_cols;
    return {slice.axis, {slice.range.first / block, (slice.range.count + block - 1) / block}};
  }

  // Keeps the temporary buffers a view points into.
  void KeepIfUsed(AlignedBuffer& buffer, const WeightView& view) {
    const std::byte* begin = buffer.data();
    const std::byte* end = begin + buffer.size();
    const auto inside = [&](const void* p) {
      return p != nullptr && static_cast<const std::byte*>(p) >= begin && static_cast<const std::byte*>(p) < end;
    };
    if (inside(view.data) || inside(view.scale)) m_.owned_.push_back(std::move(buffer));
  }

  // A 2-D weight in the compute dtype: the mapping itself when the stored dtype is
  // already the compute dtype, else a converted (fp8: dequantized) copy. fp8 under
  // Fp8Weights::kKeep (role kKept or kNever): an e4m3 view into the mapping with f32
  // scales. Under --quantize fp8, a weight not stored in fp8 is quantized first (role
  // kKept: an owned e4m3 copy; kDequantized: its bf16 dequantization).
  Result<WeightView> Matrix(const std::string& name, size_t* bucket, Fp8Role role = Fp8Role::kKept,
                            const Slice& slice = {}) {
    const TensorInfo& full = *m_.checkpoint_->Find(name);
    if (!Sharded()) return Hold(full, nullptr, bucket, role, name);
    AlignedBuffer data, scales;
    std::optional<TensorInfo> scale_slice;
    if (full.dtype == DType::kF8E4M3) {
      LATTE_ASSIGN_OR_RETURN(const TensorInfo* s, Fp8Scales(full));
      LATTE_ASSIGN_OR_RETURN(scale_slice, CopySlice(*s, ScaleSlice(slice, *m_.config_.quantization), scales));
      Done(*s);
    }
    LATTE_ASSIGN_OR_RETURN(const TensorInfo t, CopySlice(full, slice, data));
    LATTE_ASSIGN_OR_RETURN(WeightView view, Hold(t, scale_slice ? &*scale_slice : nullptr, bucket, role, name));
    KeepIfUsed(data, view);
    KeepIfUsed(scales, view);
    return view;
  }

  // t in the compute dtype (see Matrix); `scales`: t's block scales when t is a slice
  // of an fp8 weight (else they are looked up by name).
  Result<WeightView> Hold(const TensorInfo& t, const TensorInfo* scales, size_t* bucket, Fp8Role role,
                          const std::string& name) {
    const int64_t rows = t.shape[0];
    const int64_t cols = t.shape[1];
    const DType out = m_.compute_dtype_;
    WeightView view{out, rows, cols, cols, nullptr};
    if (QuantizesAtLoad(role, name)) {
      if (role == Fp8Role::kKept) {
        view = QuantizeKept(t, /*release_source=*/true);
      } else {
        view.data = QuantizeThenDequantize(t);
      }
    } else if (t.dtype == out) {
      view.data = t.data;
    } else if (HeldAsStored(t.dtype)) {
      // A GGUF's formats are computed on as stored (kernels/block_quant.h), except
      // kv_b_proj: the per-head W_UKᵀ / W_UV products run on the compute dtype.
      if (role == Fp8Role::kDequantized) {
        view.data = Convert(t);
      } else {
        view = WeightView{t.dtype, rows, cols, cols, t.data};
        stored_types_.insert(t.dtype);
      }
    } else if (t.dtype == DType::kF8E4M3) {
      const TensorInfo* s = scales;
      if (s == nullptr) {
        LATTE_ASSIGN_OR_RETURN(s, Fp8Scales(t));
        Done(*s);
      }
      if (role != Fp8Role::kDequantized && options_.fp8 == Fp8Weights::kKeep) {
        view = Fp8View(t, *s, ScalesAsF32(*s));
        m_.fp8_kept_ = true;
      } else {
        view.data = DequantizeFp8(t, *s);
      }
    } else {
      view.data = Convert(t);
    }
    *bucket += view.Bytes() + view.ScaleBytes();
    Done(t);
    return view;
  }

  Result<std::vector<float>> Vector(const std::string& name, size_t* bucket) {
    const TensorInfo& t = *m_.checkpoint_->Find(name);
    if (t.dtype == DType::kF8E4M3) {
      return Status::DataLoss(FileName(t.file) + ": tensor \"" + name +
                              "\" is F8_E4M3, which is supported only for linear projections");
    }
    std::vector<float> v(t.NumElements());
    if (IsBlockQuantized(t.dtype)) {
      DequantizeToF32(t.dtype, t.data, t.NumElements(), v.data());
    } else {
      for (size_t i = 0; i < v.size(); ++i) v[i] = ElementToF32(t.dtype, t.data, i);
    }
    *bucket += v.size() * sizeof(float);
    Done(t);
    return v;
  }

  // Whether matrix `name` in `role` is quantized to fp8 here (--quantize fp8, and not
  // already stored in fp8).
  bool QuantizesAtLoad(Fp8Role role, const std::string& name) const {
    const DType stored = m_.checkpoint_->Find(name)->dtype;
    return options_.quantize == WeightQuantization::kFp8 && role != Fp8Role::kNever && stored != DType::kF8E4M3 &&
           !IsBlockQuantized(stored);
  }

  // The block grid of quantization at load: the checkpoint's own (fp8 checkpoints:
  // weight_block_size), else DeepSeek's 128x128.
  Fp8Quantization QuantizationBlock() const { return m_.config_.quantization.value_or(Fp8Quantization{}); }

  // t (bf16 / f16 / f32) quantized into `e4m3` [rows, cols] and `scale_inv`
  // [ceil(rows / block_rows), ceil(cols / block_cols)]: the view over them.
  WeightView QuantizeInto(const TensorInfo& t, uint8_t* e4m3, float* scale_inv) {
    const Fp8Quantization q = QuantizationBlock();
    const int64_t rows = t.shape[0], cols = t.shape[1];
    QuantizeToFp8({t.dtype, t.data, rows, cols, q.block_rows, q.block_cols, e4m3, scale_inv});
    ++quantized_;
    return Fp8WeightView(rows, cols, cols, e4m3, scale_inv, (cols + q.block_cols - 1) / q.block_cols, q.block_rows,
                         q.block_cols);
  }

  static size_t ScaleCount(const TensorInfo& t, const Fp8Quantization& q) {
    return static_cast<size_t>(((t.shape[0] + q.block_rows - 1) / q.block_rows) *
                               ((t.shape[1] + q.block_cols - 1) / q.block_cols));
  }

  // t quantized into owned buffers, kept as an fp8 view. `release_source`: t's bytes
  // are read by nothing else, so their pages leave the resident set (bf16 and fp8 copies
  // of a matrix never both stay in memory).
  WeightView QuantizeKept(const TensorInfo& t, bool release_source) {
    auto* e4m3 = reinterpret_cast<uint8_t*>(NewBuffer(static_cast<size_t>(t.NumElements())));
    auto* scales = reinterpret_cast<float*>(NewBuffer(ScaleCount(t, QuantizationBlock()) * sizeof(float)));
    const WeightView view = QuantizeInto(t, e4m3, scales);
    if (release_source) ReleasePages(t.data, t.nbytes);
    m_.fp8_kept_ = true;
    return view;
  }

  // kv_b_proj under --quantize fp8: quantized as an fp8 checkpoint stores it, then
  // dequantized to bf16 as the loader does with those (the same values as the fp8
  // export of the same weights); the e4m3 copy is freed.
  const void* QuantizeThenDequantize(const TensorInfo& t) {
    AlignedBuffer e4m3(static_cast<size_t>(t.NumElements()));
    AlignedBuffer scales(ScaleCount(t, QuantizationBlock()) * sizeof(float));
    const WeightView fp8 = QuantizeInto(t, e4m3.as<uint8_t>(), scales.as<float>());
    bf16* out = reinterpret_cast<bf16*>(NewBuffer(static_cast<size_t>(fp8.rows * fp8.cols) * sizeof(bf16)));
    DequantizeFp8ToBf16(fp8, 0, fp8.rows, out);
    ReleasePages(t.data, t.nbytes);
    return out;
  }

  std::byte* NewBuffer(size_t bytes) {
    m_.owned_.emplace_back(bytes);
    return m_.owned_.back().data();
  }

  const void* Convert(const TensorInfo& t) {
    const size_t n = static_cast<size_t>(t.NumElements());
    std::byte* dst = NewBuffer(n * DTypeSize(m_.compute_dtype_));
    const bool to_bf16 = m_.compute_dtype_ == DType::kBF16;
    if (IsBlockQuantized(t.dtype)) {
      std::vector<float> values(n);
      DequantizeToF32(t.dtype, t.data, static_cast<int64_t>(n), values.data());
      for (size_t i = 0; i < n; ++i) {
        if (to_bf16) {
          reinterpret_cast<bf16*>(dst)[i] = F32ToBf16(values[i]);
        } else {
          reinterpret_cast<float*>(dst)[i] = values[i];
        }
      }
      return dst;
    }
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; ++i) {
      const float v = ElementToF32(t.dtype, t.data, i);
      if (to_bf16) {
        reinterpret_cast<bf16*>(dst)[i] = F32ToBf16(v);
      } else {
        reinterpret_cast<float*>(dst)[i] = v;
      }
    }
    return dst;
  }

  // The scale_inv tensor of fp8 weight t, checked: quantization_config present,
  // shape [ceil(rows / block_rows), ceil(cols / block_cols)], not itself fp8.
  Result<const TensorInfo*> Fp8Scales(const TensorInfo& t) {
    const std::string where = FileName(t.file) + ": tensor \"" + t.name + "\"";
    if (!m_.config_.quantization) {
      return Status::DataLoss(where + " is F8_E4M3 but config.json has no quantization_config");
    }
    const TensorInfo* s = m_.checkpoint_->Find(t.name + "_scale_inv");
    if (s == nullptr) return Status::NotFound(where + " is F8_E4M3 but \"" + t.name + "_scale_inv\" is missing");
    const Fp8Quantization& q = *m_.config_.quantization;
    const std::vector<int64_t> expected = ScaleInvShape(t.shape, q);
    if (s->shape != expected) {
      return Status::DataLoss(FileName(s->file) + ": tensor \"" + s->name + "\" has shape " + ShapeString(s->shape) +
                              ", expected " + ShapeString(expected) + " for " + ShapeString(t.shape) + " in " +
                              std::to_string(q.block_rows) + "x" + std::to_string(q.block_cols) + " blocks");
    }
    if (s->dtype == DType::kF8E4M3) {
      return Status::DataLoss(FileName(s->file) + ": tensor \"" + s->name + "\" must be F32/BF16/F16, not F8_E4M3");
    }
    return s;
  }

  // The scales as f32: the mapping itself when stored f32 and 4-byte aligned,
  // else an owned converted copy (counted by a kept view's ScaleBytes()).
  const float* ScalesAsF32(const TensorInfo& s) {
    if (s.dtype == DType::kF32 && reinterpret_cast<uintptr_t>(s.data) % alignof(float) == 0) {
      return reinterpret_cast<const float*>(s.data);
    }
    const size_t n = static_cast<size_t>(s.NumElements());
    float* out = reinterpret_cast<float*>(NewBuffer(n * sizeof(float)));
    for (size_t i = 0; i < n; ++i) out[i] = ElementToF32(s.dtype, s.data, i);
    return out;
  }

  // fp8 weight t as an e4m3 view with its block scales (f32: [ceil(rows / block_rows),
  // ceil(cols / block_cols)]).
  WeightView Fp8View(const TensorInfo& t, const TensorInfo& s, const float* scales) const {
    const Fp8Quantization& q = *m_.config_.quantization;
    const int64_t cols = t.shape[1];
    return Fp8WeightView(t.shape[0], cols, cols, t.data, scales, s.shape[1], q.block_rows, q.block_cols);
  }

  // weight = fp8 value × scale_inv of its block (the V3/R1 release format), as bf16,
  // by the kernels' dequantization (the one the large-m fp8 matmul runs).
  const void* DequantizeFp8(const TensorInfo& t, const TensorInfo& s) {
    const WeightView fp8 = Fp8View(t, s, ScalesAsF32(s));
    bf16* out = reinterpret_cast<bf16*>(NewBuffer(static_cast<size_t>(fp8.rows * fp8.cols) * sizeof(bf16)));
    DequantizeFp8ToBf16(fp8, 0, fp8.rows, out);
    return out;
  }

  void Done(const TensorInfo& t) {
    ++tensors_done_;
    bytes_done_ += t.nbytes;
    if (options_.progress && SecondsSince(last_report_) > 0.5) ReportProgress(false);
  }

  void ReportProgress(bool final) {
    last_report_ = std::chrono::steady_clock::now();
    const bool tty = isatty(STDERR_FILENO);
    if (!final && !tty) return;  // in logs, one line at the end
    std::fprintf(stderr, "%sloading: %lld tensors, %.2f / %.2f GB, %.1f s%s", tty ? "\r" : "",
                 static_cast<long long>(tensors_done_), bytes_done_ / 1e9, (total_bytes_ - skipped_bytes_) / 1e9,
                 SecondsSince(start_), final ? "\n" : "");
    std::fflush(stderr);
  }

  // The weights' dtypes, for the memory report.
  std::string DescribeDtypes() const {
    const std::string compute(DTypeName(m_.compute_dtype_));
    if (!stored_types_.empty()) {
      std::string s;
      for (DType d : stored_types_) s += (s.empty() ? "" : ", ") + std::string(DTypeName(d));
      return s + " as stored, kv_b_proj and the norms " + compute;
    }
    if (!m_.fp8_kept_) return compute;
    std::string s = "F8_E4M3 kept with f32 block scales";
    if (quantized_ > 0) {
      const Fp8Quantization q = QuantizationBlock();
      s += " (" + std::to_string(quantized_) + (quantized_ == 1 ? " matrix" : " matrices") + " quantized at load in " +
           std::to_string(q.block_rows) + "x" + std::to_string(q.block_cols) + " blocks)";
    }
    return s + ", kv_b_proj, embed_tokens and the rest " + compute;
  }

  static std::string GbString(size_t bytes) {
    char text[32];
    std::snprintf(text, sizeof text, "%.3f GB", bytes / 1e9);
    return text;
  }

  void ReportMemory() const {
    const WeightMemory& w = m_.memory_;
    const std::string dtype = DescribeDtypes();
    std::fprintf(stderr,
                 "weights (%s, mla-mode %s): attention %.3f GB, w_uk_t copies %.3f GB, "
                 "materialized W_Q_UK+W_UV_O %.3f GB, dense mlp %.3f GB, experts %.3f GB, "
                 "embeddings %.3f GB, %stotal %.3f GB\n",
                 dtype.c_str(), std::string(MlaModeName(m_.mode_)).c_str(), w.attention / 1e9,
                 w.attention_prepared / 1e9, w.materialized / 1e9, w.dense_mlp / 1e9, w.experts / 1e9,
                 w.embeddings / 1e9, m_.mtp_ ? ("MTP layer " + GbString(w.mtp) + ", ").c_str() : "", w.Total() / 1e9);
  }

  ModelWeights& m_;
  LoadOptions options_;
  std::string source_;
  bool from_gguf_ = false;
  std::map<std::string, TensorSpec> specs_;
  ShardRanges ranges_;
  int64_t unexpected_ = 0;
  int64_t quantized_ = 0;  // matrices quantized to fp8 at load
  std::string first_unexpected_;
  std::set<DType> stored_types_;  // GGUF formats held as stored
  int64_t tensors_done_ = 0;
  size_t bytes_done_ = 0, total_bytes_ = 0, skipped_bytes_ = 0;
  std::chrono::steady_clock::time_point start_, last_report_;
};

std::optional<Fp8Weights> ParseFp8Weights(std::string_view name) {
  if (name == "keep") return Fp8Weights::kKeep;
  if (name == "bf16") return Fp8Weights::kDequantizeBf16;
  return std::nullopt;
}

std::string_view Fp8WeightsName(Fp8Weights fp8) { return fp8 == Fp8Weights::kKeep ? "keep" : "bf16"; }

std::optional<WeightQuantization> ParseWeightQuantization(std::string_view name) {
  if (name == "none") return WeightQuantization::kNone;
  if (name == "fp8") return WeightQuantization::kFp8;
  return std::nullopt;
}

std::string_view WeightQuantizationName(WeightQuantization q) { return q == WeightQuantization::kFp8 ? "fp8" : "none"; }

Status CheckLoadOptions(const LoadOptions& options) {
  if (options.quantize == WeightQuantization::kFp8 && options.fp8 == Fp8Weights::kDequantizeBf16) {
    return Status::InvalidArgument(
        "--quantize fp8 and --fp8 bf16 contradict each other: the first holds the weights in fp8, "
        "the second dequantizes them to bf16");
  }
  return Status::Ok();
}

Result<std::unique_ptr<ModelWeights>> ModelWeights::Load(const std::string& dir, const LoadOptions& options) {
  LATTE_RETURN_IF_ERROR(CheckLoadOptions(options));
  LATTE_ASSIGN_OR_RETURN(const std::optional<std::string> gguf_path, FindGgufFile(dir));
  if (gguf_path) return LoadGguf(*gguf_path, options);
  auto m = std::make_unique<ModelWeights>();
  m->mode_ = options.mode;
  LATTE_ASSIGN_OR_RETURN(m->config_, ModelConfig::FromFile(dir + "/config.json"));
  LATTE_RETURN_IF_ERROR(m->CheckShard(options));
  // Headers first, from an mmap: a checkpoint that cannot serve the config fails here
  // before a huge-page copy reads any data.
  LATTE_ASSIGN_OR_RETURN(Checkpoint checkpoint, Checkpoint::Open(dir, FileResidency::kMapped));
  m->checkpoint_ = std::make_unique<Checkpoint>(std::move(checkpoint));
  const std::string index = dir + "/model.safetensors.index.json";
  std::string source = std::filesystem::exists(index) ? FileName(index) : dir;
  if (!std::filesystem::exists(index) && !m->checkpoint_->tensors().empty()) {
    source = FileName(m->checkpoint_->tensors().front().file);
  }
  WeightLoader loader(*m, options, source, /*from_gguf=*/false);
  LATTE_RETURN_IF_ERROR(loader.Check());
  if (options.residency == FileResidency::kHugePageCopy && !options.shard.sharded()) {
    std::set<std::string> files;
    for (const TensorInfo& t : m->checkpoint_->tensors()) files.insert(t.file);
    uint64_t total = 0;
    for (const std::string& f : files) total += std::filesystem::file_size(f);
    LATTE_ASSIGN_OR_RETURN(Checkpoint copy, Checkpoint::Open(dir, FileResidency::kHugePageCopy, [&](uint64_t done) {
                             loader.ReportReading(done, total);
                           }));
    m->checkpoint_ = std::make_unique<Checkpoint>(std::move(copy));
  }
  LATTE_RETURN_IF_ERROR(loader.Run());
  return m;
}

Status ModelWeights::CheckShard(const LoadOptions& options) {
  // The split is checked against the config before a byte of weights is read.
  std::optional<Fp8Quantization> fp8_blocks = config_.quantization;
  if (options.quantize == WeightQuantization::kFp8) fp8_blocks = config_.quantization.value_or(Fp8Quantization{});
  LATTE_RETURN_IF_ERROR(CheckTensorShard(config_, options.shard, fp8_blocks));
  shard_ = options.shard;
  shard_config_ = config_;
  shard_config_.num_attention_heads /= options.shard.size;
  return Status::Ok();
}

Result<std::unique_ptr<ModelWeights>> ModelWeights::LoadGguf(const std::string& path, const LoadOptions& options) {
  auto m = std::make_unique<ModelWeights>();
  m->mode_ = options.mode;
  // Headers first, from an mmap, as for safetensors.
  LATTE_ASSIGN_OR_RETURN(GgufModel mapped, GgufModel::Open(path, FileResidency::kMapped));
  auto gguf = std::make_shared<const GgufModel>(std::move(mapped));
  LATTE_ASSIGN_OR_RETURN(m->config_, ConfigFromGguf(*gguf, path));
  LATTE_RETURN_IF_ERROR(m->CheckShard(options));
  LATTE_ASSIGN_OR_RETURN(Checkpoint checkpoint, CheckpointFromGguf(gguf, m->config_));
  m->checkpoint_ = std::make_unique<Checkpoint>(std::move(checkpoint));
  WeightLoader loader(*m, options, FileName(path), /*from_gguf=*/true);
  LATTE_RETURN_IF_ERROR(loader.Check());
  if (options.residency == FileResidency::kHugePageCopy) {
    uint64_t total = 0;
    for (const std::string& f : gguf->files()) total += std::filesystem::file_size(f);
    LATTE_ASSIGN_OR_RETURN(GgufModel copied, GgufModel::Open(path, FileResidency::kHugePageCopy, [&](uint64_t done) {
                             loader.ReportReading(done, total);
                           }));
    gguf = std::make_shared<const GgufModel>(std::move(copied));
    LATTE_ASSIGN_OR_RETURN(Checkpoint copy, CheckpointFromGguf(gguf, m->config_));
    m->checkpoint_ = std::make_unique<Checkpoint>(std::move(copy));
  }
  LATTE_RETURN_IF_ERROR(loader.Run());
  return m;
}

}  // namespace latte
