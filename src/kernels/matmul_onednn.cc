// Large-m matmul through oneDNN 2.x (compute-bound prefill / batched decode).
//
// bf16 weights: x is rounded to bf16 into a per-thread scratch buffer (m*k*2
// bytes, grown once, reused) and oneDNN runs bf16 x bf16 -> f32 (AVX512_BF16
// vdpbf16ps where the CPU has it). f32 weights: plain sgemm. The weight
// [n, k] row-major with row stride ld is handed to oneDNN as its [k, n]
// operand with strides {1, ld}: a transposed view, no copy.
//
// Building a primitive costs ~0.1-1 ms, more than a decode-sized GEMM, so
// primitives (and their memory objects, re-pointed per call) are cached per
// thread by shape. Per thread because a oneDNN primitive with the default
// library-managed scratchpad must not run on two threads at once.
#include <omp.h>
#include <dnnl.hpp>

#include <algorithm>
#include <type_traits>
#include <unordered_map>

#include "base/aligned_buffer.h"
#include "base/cpu_features.h"
#include "base/scratch.h"
#include "kernels/bf16_round.h"
#include "kernels/matmul_internal.h"

namespace latte::matmul_internal {
namespace {

using dt = dnnl::memory::data_type;

struct Key {
  int64_t m, n, k, ld, ldx, ldy;
  DType dtype;
  bool kn = false;  // the weight is [k, n] row-major (row stride ld), not [n, k]
  bool operator==(const Key&) const = default;
};

struct KeyHash {
  size_t operator()(const Key& key) const {
    size_t h = static_cast<size_t>(key.dtype) * 2 + key.kn;
    for (int64_t v : {key.m, key.n, key.k, key.ld, key.ldx, key.ldy}) {
      h = h * 0x9e3779b97f4a7c15ull + static_cast<size_t>(v);
    }
    return h;
  }
};

struct Entry {
  bool ok = false;  // false: oneDNN has no optimised kernel here; don't retry
  dnnl::matmul prim;
  dnnl::memory src, wei, dst;
};

// Prompt lengths vary, so m takes many values over a run; past this many shapes
// the cache is dropped and rebuilt (decode uses a handful of shapes per model).
constexpr size_t kMaxCachedShapes = 256;

struct Context {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
  std::unordered_map<Key, Entry, KeyHash> cache;
  AlignedBuffer x_bf16;  // [m, k] bf16 scratch for the bf16 path
};

// LATTE_ISA=avx2 turns AVX-512 off for latte's kernels, LATTE_ISA=avx512 its BF16 and
// VNNI extensions; oneDNN's JIT is held to the same set (AVX2, or AVX-512 without them),
// so its GEMMs run as on such a CPU (where this changes nothing). set_max_cpu_isa takes
// effect only before oneDNN's first primitive: once, here.
void CapOneDnnIsa() {
  static const bool capped = [] {
    const CpuFeatures& cpu = GetCpuFeatures();
    dnnl::cpu_isa cap;
    if (!cpu.avx512f && cpu.avx2) {
      cap = dnnl::cpu_isa::avx2;
    } else if (cpu.avx512f && !cpu.avx512_bf16 && !cpu.avx512_vnni) {
      cap = dnnl::cpu_isa::avx512_core;
    } else {
      return false;
    }
    try {
      dnnl::set_max_cpu_isa(cap);
    } catch (const dnnl::error&) {
      return false;  // a primitive ran first (not in latte); oneDNN keeps its own choice
    }
    return true;
  }();
  (void)capped;
}

Context& ThreadContext() {
  CapOneDnnIsa();
  thread_local Context context;
  return context;
}

Entry Build(Context& c, const Key& key) {
  Entry e;
  const dt src_type = key.dtype == DType::kBF16 ? dt::bf16 : dt::f32;
  const dnnl::memory::desc src_md({key.m, key.k}, src_type, {key.ldx, 1});
  const dnnl::memory::desc wei_md({key.k, key.n}, src_type,
                                  key.kn ? dnnl::memory::dims{key.ld, 1} : dnnl::memory::dims{1, key.ld});
  const dnnl::memory::desc dst_md({key.m, key.n}, dt::f32, {key.ldy, 1});
  try {
    const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(src_md, wei_md, dst_md), c.engine);
    // "ref:any" is a scalar loop (oneDNN 2.6's bf16 matmul below AVX-512): our
    // portable kernel is faster, so report "no fast path" instead.
    const std::string impl = pd.impl_info_str();
    if (impl.rfind("ref", 0) == 0) return e;
    e.prim = dnnl::matmul(pd);
    e.src = dnnl::memory(src_md, c.engine, DNNL_MEMORY_NONE);
    e.wei = dnnl::memory(wei_md, c.engine, DNNL_MEMORY_NONE);
    e.dst = dnnl::memory(dst_md, c.engine, DNNL_MEMORY_NONE);
    e.ok = true;
  } catch (const dnnl::error&) {
    e.ok = false;
  }
  return e;
}

// y = src · wᵀ with src already in the operand type (bf16 for bf16 weights); with kn,
// y = src · w for w [w.rows = k, w.cols = n].
bool Run(Context& c, const void* src, int64_t m, int64_t ldsrc, const WeightView& w, float* y, int64_t ldy,
         bool kn = false) {
  const Key key =
      kn ? Key{m, w.cols, w.rows, w.ld, ldsrc, ldy, w.dtype, true} : Key{m, w.rows, w.cols, w.ld, ldsrc, ldy, w.dtype};
  auto it = c.cache.find(key);
  if (it == c.cache.end()) {
    if (c.cache.size() >= kMaxCachedShapes) c.cache.clear();
    it = c.cache.emplace(key, Build(c, key)).first;
  }
  Entry& e = it->second;
  if (!e.ok) return false;
  try {
    e.src.set_data_handle(const_cast<void*>(src));
    e.wei.set_data_handle(const_cast<void*>(w.data));
    e.dst.set_data_handle(y);
    e.prim.execute(c.stream, {{DNNL_ARG_SRC, e.src}, {DNNL_ARG_WEIGHTS, e.wei}, {DNNL_ARG_DST, e.dst}});
    c.stream.wait();
  } catch (const dnnl::error&) {
    return false;  // y may be partly written; the caller's fallback rewrites all of it
  }
  return true;
}

// The per-thread bf16 scratch, grown to at least `count` values (never shrinks,
// so steady-state calls allocate nothing).
bf16* Scratch(Context& c, int64_t count) {
  const size_t bytes = static_cast<size_t>(count) * sizeof(bf16);
  return GrowAligned<bf16>(c.x_bf16, bytes);
}

// The chunk loop of MatmulConvertedF32 / MatmulConvertedBf16: each chunk of w's rows
// converted to T in per-thread scratch (one buffer per T, grown only), then
// multiply(chunk's view, its y columns).
template <class T, class Multiply>
bool ConvertedChunks(const MatmulProblem& p, const ConvertRows<T>& convert, Multiply&& multiply) {
  const WeightView& w = p.w;
  if (p.m <= 0 || w.rows <= 0) return true;
  const int64_t k = w.cols;
  thread_local AlignedBuffer scratch;
  const int64_t chunk = ConvertedChunkRows(w, sizeof(T));
  T* converted = GrowAligned<T>(scratch, static_cast<size_t>(chunk * k) * sizeof(T));  // [chunk, k]
  for (int64_t r0 = 0; r0 < w.rows; r0 += chunk) {
    const int64_t n = std::min(chunk, w.rows - r0);
    convert(r0, n, converted);
    constexpr DType kType = std::is_same_v<T, float> ? DType::kF32 : DType::kBF16;
    if (!multiply(WeightView{kType, n, k, k, converted}, p.y + r0)) return false;
  }
  return true;
}

}  // namespace

bool MatmulOneDnn(const MatmulProblem& p) {
  if (p.m <= 0 || p.w.rows <= 0) return true;
  Context& c = ThreadContext();
  if (p.w.dtype != DType::kBF16) return Run(c, p.x, p.m, p.ldx, p.w, p.y, p.ldy);
  bf16* xb = Scratch(c, p.m * p.w.cols);  // [m, k]
  RoundToBf16(p.x, p.m, p.ldx, p.w.cols, xb);
  return Run(c, xb, p.m, p.w.cols, p.w, p.y, p.ldy);
}

bool MatmulOneDnnBf16X(const Bf16XProblem& p) {
  if (p.m <= 0 || p.w.rows <= 0) return true;
  if (p.w.dtype != DType::kBF16) return false;
  return Run(ThreadContext(), p.x, p.m, p.ldx, p.w, p.y, p.ldy);
}

int64_t ConvertedChunkRows(const WeightView& w, int64_t value_bytes) {
  constexpr int64_t kChunkBytes = int64_t{8} << 20;
  int64_t rows = kChunkBytes / (std::max<int64_t>(w.cols, 1) * value_bytes);
  rows = std::max<int64_t>(16, rows / 16 * 16);
  return std::min(rows, w.rows);
}

bool MatmulConvertedF32(const float* x, int64_t ldx, const MatmulProblem& p, const ConvertRows<float>& convert) {
  return ConvertedChunks<float>(p, convert, [&](const WeightView& chunk, float* y) {
    return MatmulOneDnn({x, p.m, ldx, chunk, y, p.ldy});
  });
}

bool MatmulConvertedBf16(const MatmulProblem& p, const ConvertRows<bf16>& convert) {
  if (p.m <= 0 || p.w.rows <= 0) return true;
  bf16* xb = Scratch(ThreadContext(), p.m * p.w.cols);  // [m, k]: x rounded once for every chunk
  RoundToBf16(p.x, p.m, p.ldx, p.w.cols, xb);
  return ConvertedChunks<bf16>(p, convert, [&](const WeightView& chunk, float* y) {
    return MatmulOneDnnBf16X({xb, p.m, p.w.cols, chunk, y, p.ldy});
  });
}

bool MatmulOneDnnF32KN(const float* x, int64_t m, int64_t ldx, const float* b, int64_t k, int64_t n, int64_t ldb,
                       float* y, int64_t ldy) {
  if (m <= 0 || n <= 0) return true;
  return Run(ThreadContext(), x, m, ldx, WeightView{DType::kF32, k, n, ldb, b}, y, ldy, /*kn=*/true);
}

bool MatmulOneDnnSharedX(const BatchedMatmulParams& p) {
  if (p.m <= 0 || p.w.empty() || p.w[0].rows <= 0) return true;
  Context& c = ThreadContext();
  const int64_t k = p.w[0].cols;
  const void* src = p.x;
  int64_t ldsrc = p.ldx;
  if (p.w[0].dtype == DType::kBF16) {
    bf16* xb = Scratch(c, p.m * k);  // [m, k], rounded once for every head
    RoundToBf16(p.x, p.m, p.ldx, k, xb);
    src = xb;
    ldsrc = k;
  }
  for (size_t b = 0; b < p.w.size(); ++b) {
    if (!Run(c, src, p.m, ldsrc, p.w[b], p.y + b * p.y_stride, p.ldy)) return false;
  }
  return true;
}

}  // namespace latte::matmul_internal
