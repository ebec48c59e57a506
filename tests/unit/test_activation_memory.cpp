// The planner's activation memory (Note [Activation bytes], schedule/projection.h) against what our decoder
// layers really hold: two layers' forward with gradients on the CPU at 8k and 16k tokens of four packed
// documents, float32 and bfloat16, Llama and Qwen3 shapes; in float32 also the backward's peak above them. Large
// allocations are mapped and unmapped one by one (M_MMAP_THRESHOLD), so the resident size follows what is
// alive and each point measures only its own.
#include <malloc.h>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "common/resident_memory.h"
#include "model/causal_lm.h"
#include "model/libtorch.h"
#include "schedule/projection.h"
#include "support/sanitizers.h"

namespace rp::model {
namespace {

struct Point {
  Architecture arch;
  torch::ScalarType dtype;
  std::int64_t tokens;
};

TEST(ActivationMemory, TheEstimateMatchesWhatTwoLayersHold) {
  if (test::kAddressSanitizer) GTEST_SKIP() << "under ASan, freed memory stays resident (quarantine)";
  if (!resetResidentPeak()) GTEST_SKIP() << "the kernel does not let this process reset its resident peak";
  ASSERT_EQ(mallopt(M_MMAP_THRESHOLD, 64 * 1024), 1);
  torch::manual_seed(0);
  for (const Point& p :
       {Point{Architecture::kLlama, torch::kFloat, 8192}, Point{Architecture::kQwen3, torch::kFloat, 8192},
        Point{Architecture::kQwen3, torch::kBFloat16, 8192}, Point{Architecture::kQwen3, torch::kBFloat16, 16384}}) {
    ModelConfig c;
    c.arch = p.arch;
    c.qkNorm = p.arch == Architecture::kQwen3;
    c.vocabSize = 64;
    c.hiddenSize = 256;
    c.intermediateSize = 768;
    c.numLayers = 2;
    c.numHeads = 4;
    c.numKvHeads = 2;
    c.headDim = 64;
    c.maxPositions = p.tokens;
    SCOPED_TRACE(fmt::format("{} {} at {} tokens", architectureName(p.arch), c10::toString(p.dtype), p.tokens));
    CausalLM model(c, p.dtype);
    {
      torch::NoGradGuard noGrad;
      for (auto& param : model.parameters()) param.normal_(0.0, 0.02);
    }
    Batch batch = causalBatch(torch::randint(64, {1, p.tokens}, torch::kInt64));
    batch.segmentIds = torch::arange(4).repeat_interleave(p.tokens / 4).unsqueeze(0);
    batch.positionIds = torch::arange(p.tokens / 4).repeat({4}).unsqueeze(0);
    const auto ctx = model.rotary().context(batch, p.dtype);
    const auto x = torch::randn({1, p.tokens, c.hiddenSize}).to(p.dtype).requires_grad_();

    const auto before = readResidentMemory().bytes;
    resetResidentPeak();
    torch::Tensor h = x;
    for (int l = 0; l < 2; ++l) h = model.decoderLayer(l).forward(h, ctx);
    const double held = static_cast<double>(readResidentMemory().bytes - before);
    // float32 only: bfloat16's backward matmuls are two orders of magnitude slower on a CPU without AVX-512 BF16.
    const bool backward = p.dtype == torch::kFloat;
    if (backward) h.sum().backward();
    const double peak = static_cast<double>(readResidentMemory().peakBytes - before);

    const schedule::ModelShape shape = schedule::shapeOf(c);
    const auto tokens = static_cast<double>(p.tokens);
    const int bytes = static_cast<int>(c10::elementSize(p.dtype));
    const double layer = schedule::decoderLayerActivationBytes(shape, tokens, bytes, false);
    const double working = schedule::decoderLayerBackwardWorkingBytes(shape, tokens, bytes, false);
    std::printf("%s %s %ld tokens: held %.1f MB, estimated %.1f MB (%.2f)%s\n", architectureName(p.arch),
                c10::toString(p.dtype), static_cast<long>(p.tokens), held / 1e6, 2 * layer / 1e6, held / (2 * layer),
                backward ? fmt::format("; the backward's peak {:.1f} MB above it, estimated {:.1f} MB",
                                       (peak - held) / 1e6, working / 1e6)
                               .c_str()
                         : "");
    EXPECT_NEAR(held / (2 * layer), 1.0, 0.10) << "held " << held / 1e6 << " MB, estimated " << 2 * layer / 1e6;
    // The backward frees each layer's graph as it goes; its peak is in the top layer's MLP, with both graphs whole.
    if (backward) {
      EXPECT_NEAR((peak - held) / working, 1.0, 0.10)
          << "the backward's peak is " << (peak - held) / 1e6 << " MB above the graphs, estimated " << working / 1e6;
    }
  }
}

}  // namespace
}  // namespace rp::model
