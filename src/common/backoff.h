// How a thread that polls for an event waits between polls (Note [Polling backoff]).
#pragma once

#include <chrono>

namespace rp {

// Note [Polling backoff]: the runtime's waits on another process (a fence in node memory, an MPI request) poll.
// A poll's pause doubles from 1 us up to `floor` (100-200 us: the waits between microbatches end within
// milliseconds, and their latency is on the pipeline's critical path), and beyond that grows with the wait
// itself, to a sixteenth of the time waited so far and at most 2 ms: a wait of a whole update (sync's next
// iteration waiting for its weights, ~1 s at the 0.6B shape) wakes a few hundred times instead of thousands, and
// overshoots its event by at most 1/16 of its length. Each wake of a nice-0 thread pre-empts the nice +10
// optimizer on its core (docs/benchmarks.md, "The emulated GPU host": 3,400 wakes a second per rank).
class Backoff {
 public:
  explicit Backoff(std::chrono::microseconds floor) : floor_(floor) {}
  void pause();  // sleeps, then lengthens the next pause
  // The pause after `pause`, `waited` into the wait.
  static std::chrono::microseconds next(std::chrono::microseconds pause, std::chrono::microseconds waited,
                                        std::chrono::microseconds floor);

 private:
  const std::chrono::microseconds floor_;
  const std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  std::chrono::microseconds pause_{1};
};

}  // namespace rp
