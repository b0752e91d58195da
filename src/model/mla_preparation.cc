#include "model/mla_preparation.h"

#include <cstring>

#include "kernels/matmul.h"

namespace latte {
namespace {

void CopyToF32(const WeightView& w, float* out) {  // out: [w.rows, w.cols]
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < w.rows; ++r) {
    for (int64_t c = 0; c < w.cols; ++c) out[r * w.cols + c] = w.At(r, c);
  }
}

void TransposeToF32(const WeightView& w, float* out) {  // out: [w.cols, w.rows]
  for (int64_t r = 0; r < w.rows; ++r) {
    for (int64_t c = 0; c < w.cols; ++c) out[c * w.rows + r] = w.At(r, c);
  }
}

class Preparer {
 public:
  Preparer(const ModelConfig& c, DType compute, std::vector<AlignedBuffer>& owned, WeightMemory& memory)
      : c_(c), dt_(compute), owned_(owned), memory_(memory) {}

  // w_uk_t: [H, d_c, d_n], exact copies of kv_b_proj's values, transposed so the
  // bmm q_lat,h = W_UK,hᵀ · q_n,h reads contiguous rows (vLLM keeps the same W_UK_T).
  void SplitKvB(MlaWeights& a) {
    const int64_t H = c_.num_attention_heads, d_n = c_.qk_nope_head_dim, d_v = c_.v_head_dim;
    const int64_t d_c = c_.kv_lora_rank;
    const size_t esize = DTypeSize(dt_);
    std::byte* uk = NewBuffer(static_cast<size_t>(H * d_c * d_n) * esize);
    const auto* kvb = static_cast<const std::byte*>(a.kv_b_proj.data);
    for (int64_t h = 0; h < H; ++h) {
      for (int64_t i = 0; i < d_n; ++i) {
        const std::byte* src_row = kvb + static_cast<size_t>((h * (d_n + d_v) + i) * a.kv_b_proj.ld) * esize;
        for (int64_t col = 0; col < d_c; ++col) {
          std::memcpy(uk + static_cast<size_t>((h * d_c + col) * d_n + i) * esize,
                      src_row + static_cast<size_t>(col) * esize, esize);
        }
      }
      a.w_uk_t.push_back(WeightView{dt_, d_c, d_n, d_n, uk + static_cast<size_t>(h * d_c * d_n) * esize});
    }
    memory_.attention_prepared += static_cast<size_t>(H * d_c * d_n) * esize;
  }

  // W_Q_UK,h = W_UK,hᵀ · q_b_nope,h and W_UV_O[:, h] = o_proj,h · W_UV,h, computed in
  // f32 and stored in the compute precision (docs/mla.md, mode 3).
  void Materialize(MlaWeights& a) {
    const int64_t H = c_.num_attention_heads, d_n = c_.qk_nope_head_dim, d_v = c_.v_head_dim;
    const int64_t d_c = c_.kv_lora_rank, d = c_.hidden_size, d_in = a.q_b_proj.cols;

    AlignedBuffer q_uk(static_cast<size_t>(H * d_c * d_in) * sizeof(float));
    std::vector<float> uk_t(d_c * d_n), q_nope_t(d_in * d_n);
    for (int64_t h = 0; h < H; ++h) {
      CopyToF32(a.w_uk_t[h], uk_t.data());                                            // [d_c, d_n]
      TransposeToF32(a.q_b_proj.RowBlock(h * c_.QkHeadDim(), d_n), q_nope_t.data());  // [d_in, d_n]
      Matmul(uk_t.data(), d_c, WeightView{DType::kF32, d_in, d_n, d_n, q_nope_t.data()},
             q_uk.as<float>() + h * d_c * d_in);
    }
    a.w_q_uk = Store(std::move(q_uk), H * d_c, d_in);

    std::vector<float> o_proj(d * H * d_v), uv_t(d_c * d_v);
    CopyToF32(a.o_proj, o_proj.data());  // [d, H·d_v]
    AlignedBuffer uv_o(static_cast<size_t>(d * H * d_c) * sizeof(float));
    for (int64_t h = 0; h < H; ++h) {
      TransposeToF32(a.w_uv[h], uv_t.data());  // [d_c, d_v]
      Matmul({.x = o_proj.data() + h * d_v,
              .m = d,
              .ldx = H * d_v,
              .w = WeightView{DType::kF32, d_c, d_v, d_v, uv_t.data()},
              .y = uv_o.as<float>() + h * d_c,
              .ldy = H * d_c});
    }
    a.w_uv_o = Store(std::move(uv_o), d, H * d_c);
  }

 private:
  std::byte* NewBuffer(size_t bytes) {
    owned_.emplace_back(bytes);
    return owned_.back().data();
  }

  // Keeps an f32 product as a weight in the compute precision.
  WeightView Store(AlignedBuffer f32, int64_t rows, int64_t cols) {
    const size_t n = static_cast<size_t>(rows * cols);
    WeightView v{dt_, rows, cols, cols, nullptr};
    if (dt_ == DType::kF32) {
      owned_.push_back(std::move(f32));
      v.data = owned_.back().data();
    } else {
      bf16* out = reinterpret_cast<bf16*>(NewBuffer(n * sizeof(bf16)));
      const float* in = f32.as<float>();
#pragma omp parallel for schedule(static)
      for (size_t i = 0; i < n; ++i) out[i] = F32ToBf16(in[i]);
      v.data = out;
    }
    memory_.materialized += v.Bytes();
    return v;
  }

  const ModelConfig& c_;
  DType dt_;
  std::vector<AlignedBuffer>& owned_;
  WeightMemory& memory_;
};

}  // namespace

void PrepareMlaWeights(const ModelConfig& c, MlaMode mode, DType compute, MlaWeights& a,
                       std::vector<AlignedBuffer>& owned, WeightMemory& memory) {
  const int64_t H = c.num_attention_heads, d_n = c.qk_nope_head_dim, d_r = c.qk_rope_head_dim;
  const int64_t d_v = c.v_head_dim;
  a.w_uk_t.clear();
  a.w_uv.clear();
  a.q_rope.clear();
  for (int64_t h = 0; h < H; ++h) {
    a.w_uv.push_back(a.kv_b_proj.RowBlock(h * (d_n + d_v) + d_n, d_v));
    a.q_rope.push_back(a.q_b_proj.RowBlock(h * c.QkHeadDim() + d_n, d_r));
  }
  if (mode == MlaMode::kNaive) return;
  Preparer p(c, compute, owned, memory);
  p.SplitKvB(a);
  if (mode == MlaMode::kMaterialized) p.Materialize(a);
}

}  // namespace latte
