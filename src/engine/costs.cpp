#include "engine/costs.h"

#include <algorithm>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "common/log.h"
#include "schedule/projection.h"

namespace rp::engine {

// Note [Recompute ahead within the budget]
// Recompute ahead (Note [Recompute ahead], job_executor.cpp) holds R recomputed graphs beside the one a backward
// job back-propagates: at layer grain, one decoder layer's each. At long sequences one layer's graph is most of a
// worker's memory (Qwen3-1.7B in bfloat16: 114 KB per token, 9.3 GB at 81,920 tokens), and the default R = 1
// doubles it: a run that fits a 24 GB card at R = 0 would run out of memory at R = 1, and no plan helps, since
// the smallest backward stage is one layer. So before planning, R is lowered, down to 0, while one decoder
// layer's backward (its gradients, 1 + R graphs, its working memory: the MLP's gradients and the job's input and
// gradients in and out) beside two stage slots of at least the largest layer's weights exceeds nine tenths of the
// worker budget; the run says so (reportRecomputeDepth), and warns where even R = 0 exceeds the whole budget.
// The tenth is the estimate's own tolerance (Note [Activation bytes]: within 10% of what the CPU measures; a
// GPU's caching allocator adds its own slack): R > 0 spends memory on overlap, and at the lengths where it is
// in question a layer's compute is long beside the wait it hides, so R = 0 costs little there. Losses and
// weights do not depend on R (the same computation in another order). The planner packs stages by the same
// graphs.
namespace {
// Recompute ahead is kept where its estimate leaves this share of the budget's bytes unused (Note [Recompute
// ahead within the budget]).
constexpr double kRecomputeAheadShare = 0.9;
}  // namespace

RecomputeDepth recomputeAheadWithin(const std::vector<LayerMemory>& layers, int wanted, double budget) {
  double slot = 0.0;
  for (const auto& m : layers) slot = std::max(slot, m.weights);
  auto need = [&](int ahead) {
    double worst = 0.0;
    for (const auto& m : layers) worst = std::max(worst, m.gradients + (1.0 + ahead) * m.graph + m.working);
    return 2.0 * slot + worst;
  };
  RecomputeDepth out{std::max(wanted, 0), need(std::max(wanted, 0))};
  if (budget <= 0) return out;
  while (out.ahead > 0 && out.need > kRecomputeAheadShare * budget) out.need = need(--out.ahead);
  return out;
}

LayerCosts estimateCosts(const PipelineModel& model, std::int64_t seq, std::int64_t rows, int wanted, double budget) {
  LayerCosts out;
  auto& c = out.layers;
  const int L = model.layerCount();
  const schedule::ModelShape shape = schedule::shapeOf(const_cast<PipelineModel&>(model).model().config());
  const int s = static_cast<int>(seq), r = static_cast<int>(rows);
  const auto tokens = static_cast<double>(seq * rows);
  const int elementBytes = static_cast<int>(c10::elementSize(model.dtype()));
  std::vector<LayerMemory> memory(static_cast<std::size_t>(L));
  for (int l = 0; l < L; ++l) {
    LayerMemory& m = memory[static_cast<std::size_t>(l)];
    for (int i : model.tensorsOfLayer(l)) {  // bytes, in the model dtype
      const auto& t = model.tensors()[static_cast<std::size_t>(i)];
      m.weights += static_cast<double>(t.local.nbytes());
      if (t.trainable) m.gradients += static_cast<double>(t.local.nbytes());
    }
    double forward = 0.0;
    if (l == 0) {
      forward = tokens * shape.hidden;  // a lookup: counted per element, never free
    } else if (l == L - 1) {
      forward = schedule::headFlops(shape, s, r);  // LM head (+ loss)
    } else {
      forward = schedule::decoderLayerFlops(shape, s, r, shape.window(l - 1));
      m.graph = schedule::decoderLayerActivationBytes(shape, tokens, elementBytes, model.sparse(l));
      m.working = schedule::decoderLayerJobWorkingBytes(shape, tokens, elementBytes, model.sparse(l));
    }
    c.forward.push_back(forward / 1e9);
    c.backward.push_back(3.0 * forward / 1e9);  // recompute + backward (2x)
    c.bytes.push_back(m.weights);
  }
  const RecomputeDepth depth = recomputeAheadWithin(memory, wanted, budget);
  out.recomputeAhead = depth.ahead;
  out.layerBackwardPeak = budget > 0 ? depth.need : 0.0;
  // A decoder layer's graph: the fused stage holds all of its layers' graphs at once, a stage-grain backward job
  // the recomputed graphs of its stage plus `recomputeAhead` more; layer grain holds one layer's at a time, so
  // this over-counts its backward stages (they are rarely the largest), as it does the fused stage, which never
  // recomputes. A backward's working memory, once per job, is left out: the half of the budget the partitioner
  // keeps for the prefetched stage, which holds only weights, covers it, and where one layer needs more than
  // half, recomputeAheadWithin counts it.
  for (const auto& m : memory) c.backwardBytes.push_back(m.weights + m.gradients + (1.0 + depth.ahead) * m.graph);
  return out;
}

void reportRecomputeDepth(const LayerCosts& costs, int wanted, double budget, std::int64_t tokens) {
  if (budget <= 0) return;
  const double need = costs.layerBackwardPeak / 1e9;
  if (costs.layerBackwardPeak > budget) {
    RP_LOG_WARN(
        "pipeline: at {} tokens per microbatch one decoder layer's backward needs about {:.2f} GB of worker memory "
        "(its activations, gradients and working memory, beside two stage slots; recompute ahead {}{}), more than "
        "the {:.2f} GB budget (pipeline.memory_limit_gb, or the GPU's free memory less "
        "pipeline.memory_reserve_gb): expect to run out of memory; shorten train.seq_len or put fewer rows in a "
        "microbatch (train.global_batch / train.microbatches)",
        tokens, need, costs.recomputeAhead,
        costs.recomputeAhead < wanted ? fmt::format(", lowered from {}", wanted) : std::string(), budget / 1e9);
  } else if (costs.recomputeAhead < wanted) {
    RP_LOG_WARN(
        "pipeline: recompute ahead lowered from {} to {} to fit the {:.2f} GB worker budget at {} tokens per "
        "microbatch: one decoder layer's backward then needs about {:.2f} GB (Note [Recompute ahead within the "
        "budget])",
        wanted, costs.recomputeAhead, budget / 1e9, tokens, need);
  }
}

std::string describeStageCosts(const schedule::Plan& plan, const LayerCosts& costs) {
  auto sum = [&](const schedule::Range& r, const std::vector<double>& v) {
    double s = 0.0;
    for (int l = r.begin; l < r.end; ++l) s += v[static_cast<std::size_t>(l)];
    return s;
  };
  std::vector<std::string> fwd, bwd;
  for (const auto& r : plan.forward) fwd.push_back(fmt::format("{:.3f}", sum(r, costs.layers.forward)));
  for (const auto& r : plan.backward) bwd.push_back(fmt::format("{:.3f}", sum(r, costs.layers.backward)));
  return fmt::format("fwd [{}] | fused {:.3f} | bwd [{}]", fmt::join(fwd, ", "), sum(plan.fused, costs.layers.backward),
                     fmt::join(bwd, ", "));
}

}  // namespace rp::engine
