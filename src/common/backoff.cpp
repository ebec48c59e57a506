#include "common/backoff.h"

#include <algorithm>
#include <thread>

namespace rp {

std::chrono::microseconds Backoff::next(std::chrono::microseconds pause, std::chrono::microseconds waited,
                                        std::chrono::microseconds floor) {
  const auto cap = std::clamp(waited / 16, floor, std::max(floor, std::chrono::microseconds(2000)));
  return std::min(pause * 2, cap);
}

void Backoff::pause() {
  std::this_thread::sleep_for(pause_);
  pause_ = next(pause_, std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - start_),
                floor_);
}

}  // namespace rp
