// Per-layer cost estimates for the partitioner before any timing is measured: matmul FLOPs per
// microbatch (the reference uses weight bytes as its proxy; FLOPs do not mistake the embedding lookup,
// whose table is large but whose compute is nil, for a heavy layer).
#pragma once

#include <cstdint>
#include <string>

#include "engine/pipeline_model.h"
#include "schedule/partitioner.h"

namespace rp::engine {

struct LayerCosts {
  schedule::LayerCosts layers;  // forward/backward in GFLOP per microbatch, bytes of weights (+ grads)
};

LayerCosts estimateCosts(const PipelineModel& model, std::int64_t tokensPerMicrobatch);
std::string describeStageCosts(const schedule::Plan& plan, const LayerCosts& costs);

}  // namespace rp::engine
