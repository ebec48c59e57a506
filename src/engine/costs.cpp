#include "engine/costs.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "schedule/projection.h"

namespace rp::engine {

LayerCosts estimateCosts(const PipelineModel& model, std::int64_t seq, std::int64_t rows, int recomputeAhead) {
  LayerCosts out;
  auto& c = out.layers;
  const int L = model.layerCount();
  const schedule::ModelShape shape = schedule::shapeOf(const_cast<PipelineModel&>(model).model().config());
  const int s = static_cast<int>(seq), r = static_cast<int>(rows);
  for (int l = 0; l < L; ++l) {
    double params = 0.0, trainable = 0.0;  // bytes, in the model dtype
    for (int i : model.tensorsOfLayer(l)) {
      const auto& t = model.tensors()[static_cast<std::size_t>(i)];
      params += static_cast<double>(t.local.nbytes());
      if (t.trainable) trainable += static_cast<double>(t.local.nbytes());
    }
    double forward = 0.0;
    if (l == 0) {
      forward = static_cast<double>(seq * rows) * shape.hidden;  // a lookup: counted per element, never free
    } else if (l == L - 1) {
      forward = schedule::headFlops(shape, s, r);  // LM head (+ loss)
    } else {
      forward = schedule::decoderLayerFlops(shape, s, r);
    }
    c.forward.push_back(forward / 1e9);
    c.backward.push_back(3.0 * forward / 1e9);  // recompute + backward (2x)
    c.bytes.push_back(params);
    // A decoder layer's graph (Note [Activation bytes]): the fused stage holds all of its layers' graphs at
    // once, a stage-grain backward job the recomputed graphs of its stage plus `recomputeAhead` more; layer
    // grain holds one layer's at a time, so this over-counts its backward stages (they are rarely the largest).
    const double graph = l > 0 && l < L - 1 ? schedule::decoderLayerActivationBytes(
                                                  shape, static_cast<double>(seq * rows),
                                                  static_cast<int>(c10::elementSize(model.dtype())), model.sparse(l))
                                            : 0.0;
    c.backwardBytes.push_back(params + trainable + (1.0 + recomputeAhead) * graph);
  }
  return out;
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
