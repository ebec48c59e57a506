#include "control/channel.h"

namespace rp::control {

void sendReady(ControlChannel& channel, int to, const StageReady& message) {
  channel.send(to, Tag::kStageReady, &message, sizeof(message));
}

void waitReady(ControlChannel& channel, int from, const StageReady& expected, double timeoutSeconds,
               const std::function<std::string()>& describePeer) {
  StageReady got;
  const auto deadline =
      std::chrono::steady_clock::now() +
      std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(timeoutSeconds));
  if (!channel.receive(from, Tag::kStageReady, &got, sizeof(got), deadline)) {
    RP_THROW(PeerError,
             "stalled: waited {:.0f} s for rank {} to finish job {} microbatch {} of step {} "
             "(pipeline.stall_timeout_s){}",
             timeoutSeconds, from, expected.job, expected.microbatch, expected.step + 1,
             describePeer ? "\n  " + describePeer() : std::string());
  }
  if (got.version != kProtocolVersion || got.step != expected.step || got.job != expected.job ||
      got.microbatch != expected.microbatch) {
    RP_THROW(PeerError,
             "protocol error: from rank {} expected ready(step {}, job {}, mb {}) v{}, got (step {}, job {}, "
             "mb {}) v{}",
             from, expected.step + 1, expected.job, expected.microbatch, kProtocolVersion, got.step + 1, got.job,
             got.microbatch, got.version);
  }
}

}  // namespace rp::control
