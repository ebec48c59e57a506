// Replaying a run in the simulator: the costs and plan a RoundPipe run's Chrome trace describes
// (`roundpipe_sim --trace`, docs/simulator.md). Torch-free.
#pragma once

#include <string>

#include "schedule/plan.h"
#include "schedule/sim.h"

namespace rp::schedule {

// A run's Chrome trace (<output.dir>/trace.json): the compute spans "fwd|fused|bwd a-b mb k (step s)" of
// steps >= 3 give every stage's mean time per microbatch and, with their layer ranges, the plan. A stage's
// time is spread evenly over its layers; a backward stage's recompute is taken from the forward stages. A
// recompute run ahead of the gradient ("recompute a-b", pipeline.recompute_ahead) is a span of its own, added
// back to its backward stage's.
struct TraceInput {
  SimCosts costs;
  Plan plan;
  int workers = 0, microbatches = 0;
};

// Reads <path>; every problem (unreadable, not JSON, no usable spans, an inconsistent plan) is an InputError
// naming the file.
TraceInput loadTrace(const std::string& path, double hop);

}  // namespace rp::schedule
