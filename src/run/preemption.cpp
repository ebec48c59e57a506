#include "run/preemption.h"

#include <csignal>

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

}  // namespace rp::run
