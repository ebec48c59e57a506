#include <chrono>
#include <condition_variable>
#include <mutex>

#include "device/host_waits.h"
#include "device/worker.h"

namespace rp::device {

struct Ticket::State {
  std::mutex mutex;
  std::condition_variable cv;
  std::size_t pending = 0;
  std::exception_ptr error;
  std::function<void()> healthCheck;
  std::vector<std::shared_ptr<void>> deviceEvents;
};

Ticket::Ticket() : state_(std::make_shared<State>()) {}

bool Ticket::done() const {
  std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->pending == 0;
}

void Ticket::wait() const {
  countHostWait(HostWait::kCopy);
  std::unique_lock<std::mutex> lock(state_->mutex);
  while (!state_->cv.wait_for(lock, kHealthPeriod, [&] { return state_->pending == 0; })) {
    if (!state_->healthCheck) continue;
    const auto check = state_->healthCheck;
    lock.unlock();
    check();  // throws when the work can no longer complete
    lock.lock();
  }
  if (state_->error) std::rethrow_exception(state_->error);
}

// The health check runs here too, every kHealthPeriod: a meanwhile that never gives up (a sync step's next
// weights, which wait for the very gradients this ticket downloads) would otherwise wait for a faulted device
// forever.
void Ticket::wait(const std::function<bool()>& meanwhile, std::chrono::microseconds period) const {
  auto checked = std::chrono::steady_clock::now();
  for (bool again = true; again;) {
    std::function<void()> check;
    {
      std::unique_lock<std::mutex> lock(state_->mutex);
      if (state_->cv.wait_for(lock, period, [&] { return state_->pending == 0; })) break;
      if (std::chrono::steady_clock::now() - checked >= kHealthPeriod) {
        check = state_->healthCheck;
        checked = std::chrono::steady_clock::now();
      }
    }
    if (check) check();  // throws when the work can no longer complete
    again = meanwhile();
  }
  wait();
}

void Ticket::throwIfFailed() const {
  std::lock_guard<std::mutex> lock(state_->mutex);
  if (state_->error) std::rethrow_exception(state_->error);
}

void Ticket::addDeviceEvent(std::shared_ptr<void> event) const {
  std::lock_guard<std::mutex> lock(state_->mutex);
  state_->deviceEvents.push_back(std::move(event));
}

std::vector<std::shared_ptr<void>> Ticket::deviceEvents() const {
  std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->deviceEvents;
}

void Ticket::setHealthCheck(std::function<void()> check) const {
  std::lock_guard<std::mutex> lock(state_->mutex);
  state_->healthCheck = std::move(check);
}

void Ticket::add() const {
  std::lock_guard<std::mutex> lock(state_->mutex);
  ++state_->pending;
}

void Ticket::complete(std::exception_ptr error) const {
  {
    std::lock_guard<std::mutex> lock(state_->mutex);
    if (error && !state_->error) state_->error = error;
    --state_->pending;
  }
  state_->cv.notify_all();
}

}  // namespace rp::device
