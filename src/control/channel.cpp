#include "control/channel.h"

#include <algorithm>

#include "common/log.h"

namespace rp::control {
namespace {

ControlChannel::Deadline after(ControlChannel::Deadline start, double seconds) {
  return start +
         std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(seconds));
}

template <typename T>
void reduceTyped(T* into, const T* from, std::size_t count, Reduce op) {
  for (std::size_t i = 0; i < count; ++i) {
    switch (op) {
      case Reduce::kSum:
        into[i] += from[i];
        break;
      case Reduce::kMin:
        into[i] = std::min(into[i], from[i]);
        break;
      case Reduce::kMax:
        into[i] = std::max(into[i], from[i]);
        break;
    }
  }
}

}  // namespace

std::size_t elementBytes(Element element) {
  switch (element) {
    case Element::kInt32:
    case Element::kFloat32:
      return 4;
    case Element::kInt64:
    case Element::kFloat64:
      return 8;
  }
  return 0;
}

void reduceInto(void* into, const void* from, std::size_t count, Element element, Reduce op) {
  switch (element) {
    case Element::kInt32:
      return reduceTyped(static_cast<std::int32_t*>(into), static_cast<const std::int32_t*>(from), count, op);
    case Element::kInt64:
      return reduceTyped(static_cast<std::int64_t*>(into), static_cast<const std::int64_t*>(from), count, op);
    case Element::kFloat32:
      return reduceTyped(static_cast<float*>(into), static_cast<const float*>(from), count, op);
    case Element::kFloat64:
      return reduceTyped(static_cast<double*>(into), static_cast<const double*>(from), count, op);
  }
}

std::unique_ptr<PendingCollective> finishedCollective() {
  struct Done : PendingCollective {
    bool test() override { return true; }
    void wait() override {}
  };
  return std::make_unique<Done>();
}

std::unique_ptr<PendingCollective> ControlChannel::startAllreduce(void* data, std::size_t count, Element element,
                                                                  Reduce op) {
  allreduce(data, count, element, op);
  return finishedCollective();
}

void ControlChannel::boundCollectives(const StallPolicy& policy, std::function<std::string(int)> describe) {
  bound_ = std::make_shared<const CollectiveBound>(CollectiveBound{policy, std::move(describe)});
}

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
