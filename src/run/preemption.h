// Preemption (docs/checkpoint-format.md, "Preemption"; docs/launch.md, "Signals"): SIGTERM and SIGUSR1 —
// what Slurm sends before it preempts or times out a job — and SIGINT ask the run to save a checkpoint at the
// next step boundary and exit with cli::kExitPreempted. A signal to any one rank is enough (the pipeline's
// rank 0 makes it every rank's decision). The handler only sets a flag.
#pragma once

namespace rp::run {

// Installs the handlers (idempotent).
void installPreemptionHandlers();
// The signal received since installation, or 0.
int preemptionSignal();

}  // namespace rp::run
