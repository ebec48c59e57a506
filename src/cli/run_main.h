// The one catch-all of every roundpipe executable: runs `body`, maps exceptions to exit codes and
// prints them as one error line. Exit codes: 0 ok, 1 internal/system error, 2 bad input, 3 preempted after
// saving (run/preemption.h) (docs/errors.md).
#pragma once

#include <functional>

namespace rp {
class MpiSession;
}

namespace rp::cli {

inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;
inline constexpr int kExitBadInput = 2;
inline constexpr int kExitPreempted = 3;  // a preemption signal stopped the run after it saved a checkpoint

int runMain(const std::function<int()>& body);

// For executables that run under mpirun: starts the MPI session, runs `body`, and on an exception on any
// rank prints it (with the rank) and exits that process at once with its code; the launcher ends the whole
// job on it (mpirun's default; srun --kill-on-bad-exit=1), so no rank hangs waiting for the failed one.
// The job's exit code is the failing rank's.
int runMpiMain(int* argc, char*** argv, const std::function<int(const MpiSession&)>& body);

// Ends the process with `code` once stdio is flushed, without static destructors: LibTorch's alone (its operators'
// deregistration) cost every process ~0.1 s of CPU (docs/testing.md, "Process starts"). Every main ends with it;
// by then what must reach a file has been closed (RAII inside `body`) and MPI finalized (runMpiMain).
[[noreturn]] void exitProcess(int code);

}  // namespace rp::cli
