// Plan search beyond the reference partitioner (docs/simulator.md, "Plan search"): candidate plans — every
// plan the reference partitioner considers, plus exact contiguous splits of the forward and backward ranges
// into every stage count (minimising each direction's slowest stage) for every fused-tail boundary — are
// replayed by the simulator on the same costs, and the one with the shortest simulated step wins.
#pragma once

#include <string>

#include "schedule/partitioner.h"
#include "schedule/plan.h"

namespace rp::schedule {

struct SearchResult {
  Plan plan;                     // the best simulated plan
  double makespan = 0;           // its simulated step time (cost units)
  Plan reference;                // the reference partitioner's choice
  double referenceMakespan = 0;  // and its simulated step time
  int candidates = 0;            // plans simulated
};

// `costs` as the partitioner takes them (backward = recompute + backward); microbatches per round; stages
// must fit half of `memoryLimit` bytes (<= 0: unlimited), as in the partitioner.
SearchResult searchPlan(const LayerCosts& costs, int workers, int microbatches, double memoryLimit);

// How an automatic plan is chosen (pipeline.planner, roundpipe_sim --planner).
enum class PlannerKind { kReference, kSearch };
// "reference" | "search"; anything else is an InputError naming `what` (the option).
PlannerKind parsePlannerKind(const std::string& name, const std::string& what);

// The automatic plan for `costs`: the reference partitioner's, or the plan search's best. Arguments as
// searchPlan's.
Plan choosePlan(PlannerKind planner, const LayerCosts& costs, int workers, int microbatches, double memoryLimit);

// The simulated step time (two rounds) of one plan on these costs.
double simulatedStep(const LayerCosts& costs, const Plan& plan, int workers, int microbatches);

}  // namespace rp::schedule
