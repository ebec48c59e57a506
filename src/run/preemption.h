// Preemption (docs/checkpoint-format.md, "Preemption"; docs/launch.md, "Signals"): SIGTERM and SIGUSR1 —
// what Slurm sends before it preempts or times out a job — and SIGINT ask the run to save a checkpoint at the
// next step boundary and exit with cli::kExitPreempted. A signal to any one rank is enough (the pipeline's
// rank 0 makes it every rank's decision). The handler only sets a flag.
#pragma once

#include <optional>
#include <string>

namespace rp::run {

// Which signal stopped the job, and the rank it reached first (as rank 0 learnt it).
struct StopCause {
  int signal = 0;
  int rank = 0;
};
// "SIGTERM received by rank 1" (the signal by name where it is one of ours).
std::string describe(const StopCause& cause);

// A signal to Open MPI's mpirun (Ctrl-C, `timeout`) gives the ranks odls_base_sigkill_timeout seconds before
// it kills them (docs/launch.md, "Signals"); under this many a step and a save rarely fit.
inline constexpr double kMinKillTimeoutSeconds = 10.0;
// Given the environment's OMPI_MCA_orte_hnp_uri (set when mpirun started this rank),
// OMPI_MCA_odls_base_sigkill_timeout (null where unset: Open MPI's default, 1 s) and RP_MPIRUN_WRAPPER (set by
// launch/roundpipe-mpirun, which turns a Ctrl-C or SIGTERM into SIGUSR1 for the ranks): the warning that a
// Ctrl-C would kill the ranks before they save, or nullopt (not under mpirun, under the wrapper, or time enough).
std::optional<std::string> killTimeoutWarning(const char* mpirunUri, const char* killTimeout, const char* wrapper);

// Installs the handlers (idempotent).
void installPreemptionHandlers();
// The signal received since installation, or 0.
int preemptionSignal();

}  // namespace rp::run
