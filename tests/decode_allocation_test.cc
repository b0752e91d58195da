// A steady decode step allocates nothing: no heap allocation per generated token.
// The test binary's global operator new is replaced by a counting one (malloc
// underneath; every form, nothrow and aligned ones included, so that new and delete
// always pair up under ASan); counting is switched on only around the steps under
// test, so the rest of the suite is unaffected.
#include <atomic>
#include <cstdlib>
#include <new>

#include <gtest/gtest.h>

#include "greedy_generate.h"
#include "model/deepseek.h"
#include "test_models.h"

namespace {

std::atomic<bool> g_counting{false};
std::atomic<int64_t> g_allocations{0};

void* CountedAlloc(std::size_t size, std::size_t align) {
  if (g_counting.load(std::memory_order_relaxed)) g_allocations.fetch_add(1, std::memory_order_relaxed);
  if (size == 0) size = 1;
  void* p = align <= alignof(std::max_align_t) ? std::malloc(size)
                                               : std::aligned_alloc(align, (size + align - 1) / align * align);
  if (p == nullptr) throw std::bad_alloc();
  return p;
}

}  // namespace

void* operator new(std::size_t size) { return CountedAlloc(size, alignof(std::max_align_t)); }
void* operator new[](std::size_t size) { return CountedAlloc(size, alignof(std::max_align_t)); }
void* operator new(std::size_t size, std::align_val_t align) {
  return CountedAlloc(size, static_cast<std::size_t>(align));
}
void* operator new[](std::size_t size, std::align_val_t align) {
  return CountedAlloc(size, static_cast<std::size_t>(align));
}
void* operator new(std::size_t size, const std::nothrow_t&) noexcept {
  try {
    return CountedAlloc(size, alignof(std::max_align_t));
  } catch (const std::bad_alloc&) {
    return nullptr;
  }
}
void* operator new[](std::size_t size, const std::nothrow_t& tag) noexcept { return operator new(size, tag); }
void* operator new(std::size_t size, std::align_val_t align, const std::nothrow_t&) noexcept {
  try {
    return CountedAlloc(size, static_cast<std::size_t>(align));
  } catch (const std::bad_alloc&) {
    return nullptr;
  }
}
void* operator new[](std::size_t size, std::align_val_t align, const std::nothrow_t& tag) noexcept {
  return operator new(size, align, tag);
}
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }

namespace latte {
namespace {

// operator new calls made while `f` runs.
template <typename F> int64_t CountAllocations(F&& f) {
  g_allocations = 0;
  g_counting = true;
  f();
  g_counting = false;
  return g_allocations.load();
}

TEST(DecodeAllocation, CounterSeesVectorAllocations) {
  // The hook itself works: a vector's growth is counted.
  const int64_t n = CountAllocations([] {
    std::vector<int> v;
    for (int i = 0; i < 100; ++i) v.push_back(i);
  });
  EXPECT_GT(n, 0);
}

class DecodeAllocationModes : public ::testing::TestWithParam<MlaMode> {};

// Two rounds of sequences through one model: the first warms every scratch buffer
// (and oneDNN's per-shape primitives) up to the longest context; the second's decode
// steps must not allocate at all. Steps alternate between one sequence alone and
// four batched, both on latte's own GEMV (m < 6). From m = 6 on, projections run on
// oneDNN, whose execute() allocates its execution context internally on every call
// (a few small blocks per GEMM, outside latte's control).
//
// The naive mode is left out: it decompresses the whole cache every step, a GEMM
// whose m grows by one per token, so it plans a new oneDNN primitive per step. It is
// the reference baseline, not a serving mode.
TEST_P(DecodeAllocationModes, WarmDecodeStepsDoNotAllocate) {
  const std::string dir = testing_models::MakeModel("tiny", MakeModelOverrides{});
  auto weights = ModelWeights::Load(dir, LoadOptions{GetParam(), false});
  ASSERT_TRUE(weights.ok()) << weights.status().message();
  DeepSeekModel model(**weights);
  constexpr int64_t kSequences = 4;
  const int64_t prompt = 7, steps = 40, vocab = model.config().vocab_size;
  std::vector<float> logits;

  auto run_round = [&](bool count) {
    SequenceCaches caches = model.NewCaches(kSequences, prompt + steps);
    std::vector<int32_t> prompts;
    std::vector<SequenceSpan> prefill;
    std::vector<int64_t> lengths(kSequences, prompt);
    for (int64_t b = 0; b < kSequences; ++b) {
      prefill.push_back({caches.table(b), 0, prompt});
      for (int64_t i = 0; i < prompt; ++i) prompts.push_back(static_cast<int32_t>((i * 37 + b * 11 + 5) % vocab));
    }
    EXPECT_TRUE(model.Forward(prompts, prefill, caches.cache(), logits).ok());
    std::vector<int32_t> one(1), all(kSequences);
    std::vector<SequenceSpan> first(1), spans(kSequences);
    int64_t allocations = 0;
    for (int64_t step = 0; step < steps; ++step) {
      auto decode = [&] {
        if (step % 2 == 0) {  // the first sequence alone
          one[0] = ArgMax(logits.data(), vocab);
          first[0] = {caches.table(0), lengths[0]++, 1};
          EXPECT_TRUE(model.Forward(one, first, caches.cache(), logits).ok());
        } else {  // every sequence that still has room, batched
          for (int64_t b = 0; b < kSequences; ++b) {
            all[b] = static_cast<int32_t>((step * 13 + b) % vocab);
            spans[b] = {caches.table(b), lengths[b]++, 1};
          }
          EXPECT_TRUE(model.Forward(all, spans, caches.cache(), logits).ok());
        }
      };
      if (count) {
        allocations += CountAllocations(decode);
      } else {
        decode();
      }
    }
    return allocations;
  };
  run_round(/*count=*/false);
  EXPECT_EQ(run_round(/*count=*/true), 0) << "operator new calls in " << steps << " warm decode steps";
}

INSTANTIATE_TEST_SUITE_P(ServingModes, DecodeAllocationModes,
                         ::testing::Values(MlaMode::kAbsorbed, MlaMode::kMaterialized),
                         [](const auto& info) { return std::string(MlaModeName(info.param)); });

// GreedyGenerate's allocations do not grow with the number of tokens: 8 and 48
// generated tokens cost the same number of operator new calls on a warm model.
TEST(DecodeAllocation, GreedyGenerateAllocationsDoNotGrowWithTokens) {
  const std::string dir = testing_models::MakeModel("tiny", MakeModelOverrides{});
  auto weights = ModelWeights::Load(dir, LoadOptions{MlaMode::kAbsorbed, false});
  ASSERT_TRUE(weights.ok()) << weights.status().message();
  DeepSeekModel model(**weights);
  const std::vector<int32_t> prompt = {3, 14, 15, 92, 65};
  ASSERT_TRUE(GreedyGenerate(model, prompt, 48, false).ok());  // warm-up
  const int64_t short_run = CountAllocations([&] { ASSERT_TRUE(GreedyGenerate(model, prompt, 8, false).ok()); });
  const int64_t long_run = CountAllocations([&] { ASSERT_TRUE(GreedyGenerate(model, prompt, 48, false).ok()); });
  EXPECT_EQ(short_run, long_run);
}

}  // namespace
}  // namespace latte
