#include "control/inproc/inproc_channel.h"

#include <cstring>

namespace rp::control {

void InProcHub::post(int from, int to, Tag tag, const void* data, std::size_t bytes) {
  RP_CHECK(to >= 0 && to < size_, "send to rank {} outside a world of {}", to, size_);
  const auto* p = static_cast<const std::uint8_t*>(data);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    mailboxes_[{from, to, mpiTag(tag)}].emplace_back(p, p + bytes);
  }
  arrived_.notify_all();
}

bool InProcHub::take(int from, int to, Tag tag, void* data, std::size_t bytes, ControlChannel::Deadline deadline) {
  std::unique_lock<std::mutex> lock(mutex_);
  auto& box = mailboxes_[{from, to, mpiTag(tag)}];
  if (!arrived_.wait_until(lock, deadline, [&] { return !box.empty(); })) return false;
  const auto& message = box.front();
  RP_CHECK(message.size() == bytes, "message of {} bytes received into {}", message.size(), bytes);
  std::memcpy(data, message.data(), bytes);
  box.pop_front();
  return true;
}

void InProcChannel::send(int to, Tag tag, const void* data, std::size_t bytes) {
  hub_.post(rank_, to, tag, data, bytes);
}

bool InProcChannel::receive(int from, Tag tag, void* data, std::size_t bytes, Deadline deadline) {
  return hub_.take(from, rank_, tag, data, bytes, deadline);
}

}  // namespace rp::control
