// Per-layer cost estimates for the partitioner before any timing is measured: FLOPs per microbatch from the
// one FLOP model (schedule/projection.h) — the reference uses weight bytes as its proxy; FLOPs do not mistake
// the embedding lookup, whose table is large but whose compute is nil, for a heavy layer — and the bytes of
// the replica's own tensors.
#pragma once

#include <cstdint>
#include <string>

#include "engine/pipeline_model.h"
#include "schedule/partitioner.h"

namespace rp::engine {

struct LayerCosts {
  schedule::LayerCosts layers;  // forward/backward in GFLOP per microbatch, bytes of weights (+ grads)
};

// A microbatch of `rows` sequences of `seq` tokens; `recomputeAhead` graphs a backward stage may hold beside
// the one it back-propagates (pipeline.recompute_ahead) count in its memory.
LayerCosts estimateCosts(const PipelineModel& model, std::int64_t seq, std::int64_t rows, int recomputeAhead);
std::string describeStageCosts(const schedule::Plan& plan, const LayerCosts& costs);

}  // namespace rp::engine
