// Per-layer cost estimates for the partitioner before any timing is measured: FLOPs per microbatch from the
// one FLOP model (schedule/projection.h) — the reference uses weight bytes as its proxy; FLOPs do not mistake
// the embedding lookup, whose table is large but whose compute is nil, for a heavy layer — and the bytes of
// the replica's own tensors.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/pipeline_model.h"
#include "schedule/partitioner.h"

namespace rp::engine {

struct LayerCosts {
  schedule::LayerCosts layers;  // forward/backward in GFLOP per microbatch, bytes of weights (+ grads)
  // Note [Recompute ahead within the budget]: the recomputed graphs a backward job holds beside the one it
  // back-propagates (pipeline.recompute_ahead, lowered where the budget needs it), counted in
  // layers.backwardBytes, and the worker memory one decoder layer's backward then needs (0 without a budget).
  int recomputeAhead = 0;
  double layerBackwardPeak = 0.0;
};

// One layer's worker memory in a backward job, bytes: its weights and their gradients, one microbatch's autograd
// graph and what its backward allocates beside it (Note [Activation bytes]; both 0 outside decoder layers).
struct LayerMemory {
  double weights = 0.0, gradients = 0.0, graph = 0.0, working = 0.0;
};

// Note [Recompute ahead within the budget]: the deepest recompute ahead, at most `wanted`, at which one decoder
// layer's backward beside two stage slots needs at most nine tenths of the worker's `budget` (bytes; <= 0:
// unlimited), else 0, and what it then needs (above the budget where even 0 does not fit).
struct RecomputeDepth {
  int ahead = 0;
  double need = 0.0;
};
RecomputeDepth recomputeAheadWithin(const std::vector<LayerMemory>& layers, int wanted, double budget);

// A microbatch of `rows` sequences of `seq` tokens, on a worker of `budget` bytes (<= 0: unlimited), with
// pipeline.recompute_ahead = `wanted` (recomputeAheadWithin decides what of it the budget allows).
LayerCosts estimateCosts(const PipelineModel& model, std::int64_t seq, std::int64_t rows, int wanted, double budget);
// Rank 0's log: where the budget lowered the recompute ahead, and where one layer's backward exceeds it.
void reportRecomputeDepth(const LayerCosts& costs, int wanted, double budget, std::int64_t tokens);
std::string describeStageCosts(const schedule::Plan& plan, const LayerCosts& costs);

}  // namespace rp::engine
