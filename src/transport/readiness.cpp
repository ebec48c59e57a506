#include "transport/readiness.h"

#include <fmt/format.h>

#include "common/error.h"
#include "common/host_cpu.h"

namespace rp::transport {

ControlReadiness::~ControlReadiness() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  queued_.notify_all();
  if (sender_.joinable()) sender_.join();
}

void ControlReadiness::signal(int to, const control::StageReady& ready, std::vector<device::Ticket> after) {
  throwIfFailed();
  Message message{to, ready, std::move(after)};
  {
    std::lock_guard<std::mutex> lock(mutex_);
    bool done = queue_.empty();
    for (const auto& ticket : message.after) done = done && ticket.done();
    if (!done) {
      queue_.push_back(std::move(message));
      if (!sender_.joinable()) {
        sender_ = std::thread([this] {
          const cpu::ThreadRole counted(cpu::Role::kControl);  // Note [Host CPU by role]
          run();
        });
      }
      queued_.notify_all();
      return;
    }
  }
  send(message);  // nothing queued before it, and its copies have landed: no need for the sender thread
}

void ControlReadiness::await(int from, const control::StageReady& expected,
                             const std::function<std::string()>& describePeer) {
  throwIfFailed();
  control::waitReady(node_, from, expected, stall_, describePeer);
}

void ControlReadiness::send(const Message& message) {
  for (const auto& ticket : message.after) ticket.throwIfFailed();
  control::sendReady(node_, message.to, message.ready);
}

void ControlReadiness::run() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (true) {
    queued_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping, and everything was sent
    const Message& message = queue_.front();
    lock.unlock();
    try {
      for (const auto& ticket : message.after) ticket.wait();
      send(message);
    } catch (...) {
      lock.lock();
      error_ = std::current_exception();
      queue_.clear();
      return;
    }
    lock.lock();
    queue_.pop_front();
  }
}

void ControlReadiness::throwIfFailed() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!error_) return;
  try {
    std::rethrow_exception(error_);
  } catch (const std::exception& e) {
    RP_THROW(SystemError, "a hand-off's copy failed before its readiness message was sent: {}", e.what());
  }
}

}  // namespace rp::transport
