// Attention over packed documents (model/attention.h) against the dense reference it replaces: a [B, 1, T, T]
// mask of "same document and causal" (and the sliding window, and GPT-OSS's sinks, as transformers'
// eager_attention_forward computes them), built here and nowhere in the library.
#include <cmath>
#include <cstdio>
#include <random>

#include <gtest/gtest.h>

#include "common/resident_memory.h"
#include "model/attention.h"
#include "model/causal_lm.h"
#include "model/libtorch.h"
#include "support/attention_reference.h"
#include "support/sanitizers.h"

namespace rp::model {
namespace {

using test::denseAttention;
using test::segments;


struct Case {
  const char* name;
  std::vector<std::vector<std::int64_t>> lengths;  // per row
  std::int64_t T;
  std::int64_t window = 0;
  bool sinks = false;
  const char* kernel;  // what attend() takes on the CPU
  double tolerance = 1e-6;
  double softcap = 0.0;  // Gemma 2's on the scores
};

void expectEqualsReference(const Case& c) {
  SCOPED_TRACE(c.name);
  torch::manual_seed(11);
  const std::int64_t B = static_cast<std::int64_t>(c.lengths.size()), H = 4, Hkv = 2, D = 8;
  auto q = torch::randn({B, H, c.T, D}).requires_grad_();
  auto k = torch::randn({B, Hkv, c.T, D}).requires_grad_();
  auto v = torch::randn({B, Hkv, c.T, D}).requires_grad_();
  AttendOptions o{.scale = 1.0 / std::sqrt(8.0), .window = c.window, .sinks = {}, .softcap = c.softcap};
  if (c.sinks) o.sinks = torch::randn({H}).requires_grad_();
  const auto ids = segments(c.lengths, c.T);
  const auto documents = Documents::of(ids, B, c.T);
  EXPECT_STREQ(attentionKernel(q, documents, o), c.kernel);

  const auto out = attend(q, k, v, documents, o);
  const auto ref = denseAttention(q, k, v, ids, o);
  ASSERT_EQ(out.sizes(), ref.sizes());
  EXPECT_LE((out - ref).abs().max().item<double>(), c.tolerance);

  const auto upstream = torch::randn_like(ref);
  std::vector<torch::Tensor> inputs{q, k, v};
  if (c.sinks) inputs.push_back(o.sinks);
  const auto grads = torch::autograd::grad({out}, inputs, {upstream});
  const auto refGrads = torch::autograd::grad({ref}, inputs, {upstream});
  for (std::size_t n = 0; n < inputs.size(); ++n) {
    // Relative to the gradient's size: a key's gradient sums over every query of its document.
    const double size = std::max(1.0, refGrads[n].abs().max().item<double>());
    EXPECT_LE((grads[n] - refGrads[n]).abs().max().item<double>() / size, c.tolerance)
        << "gradient of input " << n << " (largest entry " << size << ")";
  }
}

TEST(Attention, PerDocumentEqualsTheMaskedReference) {
  expectEqualsReference({"one document per row", {{24}, {24}}, 24, 0, false, "causal"});
  expectEqualsReference({"length-1 documents", {{1, 1, 5, 1, 16}, {1, 23}}, 24, 0, false, "per_document"});
  expectEqualsReference({"a row of one document beside a packed one", {{24}, {3, 7, 14}}, 24, 0, false,
                         "per_document"});
  std::mt19937 rng(5);
  for (int trial = 0; trial < 5; ++trial) {
    std::vector<std::vector<std::int64_t>> lengths(3);
    for (auto& row : lengths) {
      std::int64_t left = 40;
      while (left > 0) {
        const auto length = std::min<std::int64_t>(left, 1 + static_cast<std::int64_t>(rng() % 15));
        row.push_back(length);
        left -= length;
      }
    }
    expectEqualsReference({"random splits", lengths, 40, 0, false, "per_document"});
  }
}

TEST(Attention, SlidingWindowAndSinksPerDocumentEqualTheReference) {
  expectEqualsReference({"window, one document", {{20}}, 20, 6, false, "per_document_windowed"});
  expectEqualsReference({"window, packed", {{3, 12, 5}, {20}}, 20, 6, false, "per_document_windowed"});
  expectEqualsReference({"sinks, packed", {{3, 12, 5}, {1, 19}}, 20, 0, true, "per_document_math"});
  expectEqualsReference({"window and sinks", {{9, 11}, {20}}, 20, 4, true, "per_document_math"});
  // Windows longer than a block of queries (windowedMath's 256): a block sees keys from before its own start.
  // (A gradient sums over the ~300 queries that see a key, in another order than the reference's one matmul.)
  expectEqualsReference({"window longer than a block", {{700}}, 700, 300, false, "per_document_windowed", 4e-6});
  expectEqualsReference(
      {"window longer than a block, packed", {{40, 560}}, 600, 257, false, "per_document_windowed", 4e-6});
  // A window as long as the longest document hides nothing: the full-causal kernels.
  expectEqualsReference({"window at the longest document", {{3, 12, 5}, {20}}, 20, 20, false, "per_document"});
  expectEqualsReference({"window past every row", {{20}, {20}}, 20, 64, false, "causal"});
  expectEqualsReference({"window one short of a document", {{21}}, 21, 20, false, "per_document_windowed"});
  // Gemma 2: scores soft-capped (cap 2 bites: the inputs' scores reach ~4), full and sliding layers, packed.
  expectEqualsReference({"soft-capped, packed", {{3, 12, 5}, {20}}, 20, 0, false, "per_document_math", 1e-6, 2.0});
  expectEqualsReference({"soft-capped, one per row", {{20}, {20}}, 20, 0, false, "per_document_math", 1e-6, 2.0});
  expectEqualsReference(
      {"soft-capped window, longer than a block", {{30, 570}}, 600, 260, false, "per_document_math", 4e-6, 2.0});
  expectEqualsReference(
      {"window and sinks, longer than a block", {{100, 500}}, 600, 300, true, "per_document_math", 4e-6});
}

// The emulated device (docs/emulated.md): on meta tensors attention is the flash kernel's shapes — one call over
// the packed documents, grouped-query heads as they are — and its backward gives q, k and v their gradients'
// shapes; the T x T scores SDPA's math path would save never exist.
TEST(Attention, OnMetaTensorsItIsTheFlashKernelsShapes) {
  const std::int64_t B = 2, H = 4, Hkv = 2, T = 6, D = 8;
  const auto options = torch::TensorOptions().dtype(torch::kBFloat16).device(torch::kMeta).requires_grad(true);
  const auto q = torch::empty({B, H, T, D}, options), k = torch::empty({B, Hkv, T, D}, options),
             v = torch::empty({B, Hkv, T, D}, options);
  const auto documents = Documents::of(segments({{2, 4}, {6}}, T), B, T);
  EXPECT_STREQ(attentionKernel(q, documents, {}), "meta_flash");
  const auto out = attend(q, k, v, documents, {});
  EXPECT_TRUE(out.is_meta());
  EXPECT_EQ(out.sizes(), (std::vector<std::int64_t>{B, T, H, D}));
  out.sum().backward();
  EXPECT_EQ(q.grad().sizes(), q.sizes());
  EXPECT_EQ(k.grad().sizes(), k.sizes());
  EXPECT_EQ(v.grad().sizes(), v.sizes());
}

TEST(Attention, DocumentsFollowTheSegmentIds) {
  const auto d = Documents::of(segments({{2, 3}, {5}}, 5), 2, 5);
  EXPECT_EQ(d.offsets, (std::vector<std::int64_t>{0, 2, 5, 10}));
  EXPECT_EQ(d.longest, 5);
  EXPECT_FALSE(d.onePerRow());
  EXPECT_TRUE(torch::equal(d.cumulative, torch::tensor({0, 2, 5, 10}, torch::kInt32)));
  const auto plain = Documents::of(torch::Tensor(), 3, 4);
  EXPECT_EQ(plain.offsets, (std::vector<std::int64_t>{0, 4, 8, 12}));
  EXPECT_TRUE(plain.onePerRow());
}

// How far one decoder layer's forward and backward on a 32768-token row of 4 documents of 8192 grows the resident
// peak; a sliding layer with `window` > 0. Callers skip where the peak cannot be measured.
std::int64_t layerPeakGrowth(std::int64_t window) {
  ModelConfig c;
  c.arch = window > 0 ? Architecture::kMistral : Architecture::kLlama;
  c.vocabSize = 64;
  c.hiddenSize = 32;
  c.intermediateSize = 64;
  c.numLayers = 1;
  c.numHeads = 2;
  c.numKvHeads = 1;
  c.headDim = 16;
  c.maxPositions = 8192;
  c.slidingWindow = window;
  c.slidingLayers = {window > 0};
  CausalLM model(c, torch::kFloat);
  const std::int64_t T = 32768, L = T / 4;
  Batch batch = causalBatch(torch::randint(64, {1, T}, torch::kInt64));
  batch.positionIds = torch::arange(L).repeat({4}).unsqueeze(0);
  batch.segmentIds = torch::arange(4).repeat_interleave(L).unsqueeze(0);
  const auto before = readResidentMemory().bytes;
  resetResidentPeak();
  const auto ctx = model.rotary().context(batch, torch::kFloat);
  const auto x = torch::randn({1, T, c.hiddenSize}, torch::requires_grad());
  model.decoderLayer(0).forward(x, ctx).sum().backward();
  EXPECT_TRUE(x.grad().defined());
  return readResidentMemory().peakBytes - before;
}

// One decoder layer, forward and backward, on a 32768-token row of 4 documents: a [T, T] boolean mask alone
// would be 1 GiB (and its float scores 4 GiB per head); per-document attention holds O(T) beyond the
// documents' own L² work, which a flash kernel does not keep either.
TEST(Attention, A32kRowOfFourDocumentsStaysFarBelowOneMask) {
  if (!resetResidentPeak()) GTEST_SKIP() << "the kernel does not let this process reset its resident peak";
  if (test::kAddressSanitizer)
    GTEST_SKIP() << "under ASan, freed memory stays resident (quarantine): no peak to measure";
  const std::int64_t grown = layerPeakGrowth(0);
  const std::int64_t oneMask = std::int64_t{32768} * 32768;  // bytes of one boolean [T, T] mask
  EXPECT_LT(grown, oneMask / 4) << "peak grew by " << grown / 1e6 << " MB; one [T, T] mask is " << oneMask / 1e6
                                << " MB";
}

// A sliding layer (window 2048) on the same row: the windowed blocks keep what the flash kernel keeps and one
// mask, far below one document's [L, L] float scores (eager blocks would keep their probabilities, L x window a
// head: 134 MB a document here).
TEST(Attention, ASlidingLayerHoldsTheWindowNotTheDocument) {
  if (!resetResidentPeak()) GTEST_SKIP() << "the kernel does not let this process reset its resident peak";
  if (test::kAddressSanitizer)
    GTEST_SKIP() << "under ASan, freed memory stays resident (quarantine): no peak to measure";
  const std::int64_t grown = layerPeakGrowth(2048);
  const std::int64_t documentScores = std::int64_t{8192} * 8192 * 2 * 4;  // one document's float [H, L, L] scores
  EXPECT_LT(grown, documentScores / 2) << "peak grew by " << grown / 1e6 << " MB; one document's scores are "
                                       << documentScores / 1e6 << " MB";
  std::printf("a sliding layer (window 2048) on 4 x 8192 tokens: the peak grew by %.0f MB\n", grown / 1e6);
}

}  // namespace
}  // namespace rp::model
