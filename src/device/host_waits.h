// The blocking waits of a rank's issuing thread — the one that submits its stage jobs — by reason
// (docs/gpu.md, "Host waits"). On a GPU every such wait drains the device's queue of work the host could have
// kept full, so the per-microbatch path must have none but those another rank makes necessary. Counted where
// the thread blocks, or would on a GPU: Ticket::wait (copy), and the engine's waits for a compute mark
// (timing), for a loss on the device (loss read), for the optimizer's fences (readiness) and for another rank's
// word that a microbatch's input exists (peer). The CPU
// backend passes through the same calls, so the CPU tiers count what a GPU run would. Torch-free.
#pragma once

#include <array>
#include <cstdint>

namespace rp::device {

enum class HostWait : int { kCopy, kReadiness, kPeer, kLossRead, kTiming };
inline constexpr int kHostWaitReasons = 5;
using HostWaitCounts = std::array<std::int64_t, kHostWaitReasons>;

const char* hostWaitName(HostWait reason);  // "copy", "readiness", "peer", "loss_read", "timing"

// Counts one wait of `reason` on the calling thread, where a CountHostWaits is alive on it.
void countHostWait(HostWait reason);

// While alive, counts the calling thread's waits (nested: the innermost counts).
class CountHostWaits {
 public:
  CountHostWaits();
  ~CountHostWaits();
  CountHostWaits(const CountHostWaits&) = delete;
  CountHostWaits& operator=(const CountHostWaits&) = delete;
  const HostWaitCounts& counts() const { return counts_; }

 private:
  friend void countHostWait(HostWait reason);
  HostWaitCounts counts_{};
  CountHostWaits* previous_;
};

}  // namespace rp::device
