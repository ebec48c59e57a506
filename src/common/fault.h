// Note [Fault injection]: RP_FAULT_INJECT = "<action>:<rank>:<step>[:<point>]" makes world rank <rank> (or
// any rank: "*") fail at <point> of (0-based) step <step>: action "kill" SIGKILLs the process, "throw" throws,
// "hang" stops forever, "nan" returns true so that the caller makes its value non-finite (point "loss": the
// step's loss, and so its gradients, as in a diverged run), "oom" returns true so that the caller fails as out
// of memory (point "job": each stage job of the step, as LibTorch would in an allocation).
// Points: "step" (the default: the start of a training step), "save-shard" (a writer's shard is on disk,
// before rank 0 learns of it), "save-manifest" (rank 0: the manifest is written, the directory not yet
// renamed), "save-rename" (rank 0: renamed, the `latest` pointer not yet updated), "open-ring" (the
// device-direct tensor channel's set-up opening a peer's ring; <rank> is the node rank, <step> 0). For the
// failure tests.
#pragma once

#include <cstdint>

namespace rp::fault {

bool maybeInject(int rank, std::int64_t step, const char* point = "step");

// RP_SLOW_WORKER = "<rank>:<speed>[,<rank>:<speed>...]": the compute speed world rank `rank`'s worker is slowed
// to (1 = not slowed); an InputError naming the variable when it does not parse or a speed is outside (0, 1].
double slowWorkerSpeed(int rank);

}  // namespace rp::fault
