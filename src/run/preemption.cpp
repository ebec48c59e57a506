#include "run/preemption.h"

#include <csignal>
#include <cstdlib>

namespace rp::run {
namespace {

volatile std::sig_atomic_t received = 0;

extern "C" void onPreemption(int signal) {
  received = signal;
}

}  // namespace

void installPreemptionHandlers() {
  struct sigaction action {};
  action.sa_handler = onPreemption;
  sigemptyset(&action.sa_mask);
  sigaction(SIGTERM, &action, nullptr);
  sigaction(SIGINT, &action, nullptr);  // Ctrl-C of a single process (mpirun turns its own SIGINT into SIGTERM)
  sigaction(SIGUSR1, &action, nullptr);
}

int preemptionSignal() {
  return received;
}

std::optional<std::string> killTimeoutWarning(const char* mpirunUri, const char* killTimeout, const char* wrapper) {
  if (mpirunUri == nullptr || *mpirunUri == '\0') return std::nullopt;
  if (wrapper != nullptr && *wrapper != '\0') return std::nullopt;  // launch/roundpipe-mpirun: Ctrl-C is SIGUSR1
  double seconds = 1.0;                                             // Open MPI 4.1's default
  if (killTimeout != nullptr) {
    char* end = nullptr;
    seconds = std::strtod(killTimeout, &end);
    if (end == killTimeout) seconds = 1.0;
  }
  if (seconds >= kMinKillTimeoutSeconds) return std::nullopt;
  return "mpirun gives the ranks " + std::to_string(static_cast<int>(seconds)) +
         " s after a Ctrl-C or a SIGTERM before it kills them (odls_base_sigkill_timeout" +
         (killTimeout == nullptr ? ", Open MPI's default" : "") +
         "): too short to save a checkpoint. Start the job with launch/roundpipe-mpirun (the same arguments), or "
         "give mpirun --mca odls_base_sigkill_timeout 30 (errors then take a minute to return), or send SIGUSR1 "
         "(docs/launch.md, \"Signals\")";
}

std::string describe(const StopCause& cause) {
  const char* name = cause.signal == SIGTERM   ? "SIGTERM"
                     : cause.signal == SIGINT  ? "SIGINT"
                     : cause.signal == SIGUSR1 ? "SIGUSR1"
                                               : nullptr;
  const std::string signal = name != nullptr ? name : "signal " + std::to_string(cause.signal);
  return signal + " received by rank " + std::to_string(cause.rank);
}

}  // namespace rp::run
