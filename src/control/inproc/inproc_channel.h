// ControlChannel between threads of one process (threads as ranks), for fast tests of the protocol.
// The hub owns every mailbox; each rank's thread uses its own channel. Thread-safety: the hub is
// thread-safe; a channel is used by its rank's thread.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>
#include <vector>

#include "control/channel.h"

namespace rp::control {

class InProcHub {
 public:
  explicit InProcHub(int size) : size_(size) {}
  int size() const { return size_; }
  void post(int from, int to, Tag tag, const void* data, std::size_t bytes);
  bool take(int from, int to, Tag tag, void* data, std::size_t bytes, ControlChannel::Deadline deadline);

 private:
  using Key = std::tuple<int, int, int>;  // from, to, tag
  int size_;
  std::mutex mutex_;
  std::condition_variable arrived_;
  std::map<Key, std::deque<std::vector<std::uint8_t>>> mailboxes_;
};

class InProcChannel : public ControlChannel {
 public:
  InProcChannel(InProcHub& hub, int rank) : hub_(hub), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return hub_.size(); }
  void send(int to, Tag tag, const void* data, std::size_t bytes) override;
  bool receive(int from, Tag tag, void* data, std::size_t bytes, Deadline deadline) override;

 private:
  InProcHub& hub_;
  int rank_;
};

}  // namespace rp::control
