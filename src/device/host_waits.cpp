#include "device/host_waits.h"

namespace rp::device {
namespace {
thread_local CountHostWaits* current = nullptr;
}  // namespace

const char* hostWaitName(HostWait reason) {
  switch (reason) {
    case HostWait::kCopy:
      return "copy";
    case HostWait::kReadiness:
      return "readiness";
    case HostWait::kPeer:
      return "peer";
    case HostWait::kLossRead:
      return "loss_read";
    case HostWait::kTiming:
      return "timing";
  }
  return "?";
}

void countHostWait(HostWait reason) {
  if (current != nullptr) ++current->counts_[static_cast<std::size_t>(reason)];
}

CountHostWaits::CountHostWaits() : previous_(current) {
  current = this;
}

CountHostWaits::~CountHostWaits() {
  current = previous_;
}

}  // namespace rp::device
