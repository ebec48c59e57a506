// Earliest-finish dispatch (docs/schedule.md, "Uneven workers"): round-robin's jobs in round-robin's order,
// each given to the worker predicted to finish it first, from the layer costs and each worker's speed. The
// prediction is the simulator's pipeline model: a job of M microbatches starts when its worker is free and the
// previous job's first microbatch is done, and it cannot finish before one of its microbatches after the
// previous job finished; optionally, no job starts before the iteration's directive can have been sent. Ties go
// to the worker round-robin would pick. Torch-free.
#pragma once

#include <cstdint>
#include <vector>

#include "schedule/dispatch.h"
#include "schedule/plan.h"

namespace rp::schedule {

// What the rule knows: per layer (plan index space), milliseconds per microbatch at speed 1 in a forward job
// and in a fused or backward job (recompute + backward: the partitioner's LayerCosts, and what the coordinator's
// profile measures), and per worker its speed (1 = the costs' pace; 0.5 takes twice as long).
struct DispatchCosts {
  std::vector<double> forward, backward;
  std::vector<double> speed;
  int microbatches = 1;
  // The worker whose jobs of the previous iteration must end before any job of this one starts (-1 = none): in
  // the runtime, rank 0's, which sends the next directive once it has run its own jobs.
  int directiveWorker = -1;
};

// The predicted time each worker is free again, carried from one iteration's dispatch to the next (the
// rule's only state; all zero = every worker idle). Rank 0 keeps it; it is not part of checkpoints.
struct WorkerClocks {
  std::vector<double> freeAt;
};

// Jobs as dispatch() lists them (counterEnd = counterStart + jobs, the tie-break's rotation), workers chosen
// by the rule; advances `clocks`. Throws InputError when the costs do not cover the plan's layers or a speed
// is not positive.
DispatchTable dispatchEarliestFinish(const Plan& plan, const DispatchCosts& costs, std::int64_t counterStart,
                                     WorkerClocks& clocks);

}  // namespace rp::schedule
