#include "control/channel.h"

#include "common/log.h"

namespace rp::control {
namespace {

ControlChannel::Deadline after(ControlChannel::Deadline start, double seconds) {
  return start +
         std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(seconds));
}

}  // namespace

void waitOrStall(const StallPolicy& policy, const std::function<bool(ControlChannel::Deadline)>& attempt,
                 const std::function<std::string()>& what, const std::function<std::string()>& late) {
  const auto start = std::chrono::steady_clock::now();
  const auto describeLate = [&] { return late ? "\n  " + late() : std::string(); };
  if (policy.warnSeconds < policy.abortSeconds) {
    if (attempt(after(start, policy.warnSeconds))) return;
    RP_LOG_WARN("still waiting after {:.0f} s for {}; the job aborts at {:.0f} s (pipeline.stall_timeout_s){}",
                policy.warnSeconds, what(), policy.abortSeconds, describeLate());
  }
  if (attempt(after(start, policy.abortSeconds))) return;
  RP_THROW(PeerError, "stalled: waited {:.0f} s for {} (pipeline.stall_timeout_s){}", policy.abortSeconds, what(),
           describeLate());
}

void sendReady(ControlChannel& channel, int to, const StageReady& message) {
  channel.send(to, Tag::kStageReady, &message, sizeof(message));
}

void waitReady(ControlChannel& channel, int from, const StageReady& expected, const StallPolicy& policy,
               const std::function<std::string()>& describePeer) {
  StageReady got;
  waitOrStall(
      policy,
      [&](ControlChannel::Deadline deadline) {
        return channel.receive(from, Tag::kStageReady, &got, sizeof(got), deadline);
      },
      [&] {
        return fmt::format("rank {} to finish job {} microbatch {} of step {}", from, expected.job, expected.microbatch,
                           expected.step + 1);
      },
      describePeer);
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
