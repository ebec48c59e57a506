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

// What an automatic plan is chosen for.
struct PlanTarget {
  int workers = 1;
  int microbatches = 1;      // per round (iteration)
  double memoryLimit = 0.0;  // bytes per worker: every stage fits half of it, as in the partitioner; <= 0 = unlimited
  int recomputeAhead = 0;    // pipeline.recompute_ahead: backward stages recompute before their gradient arrives
};

// `costs` as the partitioner takes them (backward = recompute + backward).
SearchResult searchPlan(const LayerCosts& costs, const PlanTarget& target);

// How an automatic plan is chosen (pipeline.planner, roundpipe_sim --planner).
enum class PlannerKind { kReference, kSearch };
// "reference" | "search"; anything else is an InputError naming `what` (the option).
PlannerKind parsePlannerKind(const std::string& name, const std::string& what);

// The automatic plan for `costs`: the reference partitioner's, or the plan search's best.
Plan choosePlan(PlannerKind planner, const LayerCosts& costs, const PlanTarget& target);

// The simulated step time (two rounds) of one plan on these costs.
double simulatedStep(const LayerCosts& costs, const Plan& plan, const PlanTarget& target);

}  // namespace rp::schedule
