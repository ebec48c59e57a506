// The automatic partitioner, as the RoundPipe reference describes it (docs/schedule.md, "Partitioner"):
// candidate stage-time limits T are contiguous sums of per-layer forward or backward costs within
// [W, upper·W] (W = the largest single cost); for each T the fused tail is grown from the head while it
// fits, the forward stages are packed greedily from the tail of [0, e) and the backward stages from its
// head; every stage must fit in half the per-worker memory budget (one stage is always prefetched); the
// plan minimising max(#stages, minStages)·T wins (smallest T on ties).
#pragma once

#include <cstdint>
#include <vector>

#include "schedule/plan.h"

namespace rp::schedule {

// Per-layer estimates, indexed like plan layers (0 = embedding .. L-1 = head).
struct LayerCosts {
  std::vector<double> forward;        // forward (= recompute) time or proxy
  std::vector<double> backward;       // recompute + backward time or proxy
  std::vector<double> bytes;          // weights held by a forward stage
  std::vector<double> backwardBytes;  // weights + gradients held by a backward or fused stage
};

struct PartitionOptions {
  int minStages = 1;  // normally the number of workers
  double upperThreshold = 1.1;
  double memoryLimit = 0.0;  // bytes per worker; <= 0 = unlimited
};

struct PartitionResult {
  Plan plan;
  double stageTimeLimit = 0.0;     // the chosen T
  double objective = 0.0;          // max(#stages, minStages) * T
  bool memoryLimitRaised = false;  // the largest layer alone exceeded half the budget
};

PartitionResult partition(const LayerCosts& costs, const PartitionOptions& options);
// Every candidate T's plan, in ascending T (partition() picks the one with the least objective).
std::vector<PartitionResult> partitionCandidates(const LayerCosts& costs, const PartitionOptions& options);

// The partitioner's objective for a given plan: max(#stages, minStages) x its slowest stage (forward stages
// by forward cost, fused and backward stages by backward cost).
double planObjective(const Plan& plan, const LayerCosts& costs, int minStages);

// The split of layers [0, end) into `parts` contiguous non-empty ranges minimising the largest summed `cost`
// (exact dynamic programming), ascending.
std::vector<Range> minMaxSplit(const std::vector<double>& cost, int end, int parts);

// For the baselines (gpipe, 1f1b): `stages` contiguous stages over all layers minimising the largest
// stage's forward + backward cost (exact dynamic programming), as a plan whose forward stages are the
// first stages-1, whose fused stage is the last, and whose backward stages mirror the forward ones.
Plan balancedBoundPlan(const LayerCosts& costs, int stages);

}  // namespace rp::schedule
