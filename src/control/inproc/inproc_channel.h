// ControlChannel between threads of one process (threads as ranks), for fast tests of the protocol and of
// the whole pipeline. The hub owns every mailbox and the collectives' rounds; each rank's thread uses its
// own channel. Thread-safety: the hub is thread-safe; a channel is used by its rank's thread.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
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
  // Collective number `seq` (each rank counts its own): every rank contributes `bytes`; each gets every
  // contribution in rank order. A PeerError when the others do not all arrive within 10 minutes.
  std::vector<std::vector<std::uint8_t>> exchange(std::uint64_t seq, int rank, const void* data, std::size_t bytes);
  // The hub of the sub-group `color` (of `size` ranks) made by collective `seq`; the first caller creates it.
  std::shared_ptr<InProcHub> child(std::uint64_t seq, int color, int size);
  // Rank `rank` failed (`why`) and leaves, as MPI_Abort ends the other processes: every wait on this hub and its
  // sub-groups, now or later, ends in a PeerError naming it, instead of waiting out its deadline.
  void abandon(int rank, const std::string& why);
  // How many threads are blocked in a receive or a collective on this hub now (tests wait for it to know
  // their ranks are waiting).
  int waiting();

 private:
  using Key = std::tuple<int, int, int>;  // from, to, tag
  struct Round {
    std::vector<std::vector<std::uint8_t>> parts;
    int arrived = 0, left = 0;
  };
  int size_;
  std::mutex mutex_;
  std::condition_variable arrived_;
  std::map<Key, std::deque<std::vector<std::uint8_t>>> mailboxes_;
  std::map<std::uint64_t, Round> rounds_;
  std::map<std::pair<std::uint64_t, int>, std::shared_ptr<InProcHub>> children_;
  std::string abandoned_;  // why a rank left; empty while all are here
  int waiting_ = 0;        // threads in arrived_.wait
  void throwIfAbandoned() const;
};

class InProcChannel : public ControlChannel {
 public:
  InProcChannel(InProcHub& hub, int rank) : hub_(hub), rank_(rank) {}
  InProcChannel(std::shared_ptr<InProcHub> hub, int rank) : owned_(std::move(hub)), hub_(*owned_), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return hub_.size(); }
  void send(int to, Tag tag, const void* data, std::size_t bytes) override;
  bool receive(int from, Tag tag, void* data, std::size_t bytes, Deadline deadline) override;
  void barrier() override;
  void broadcast(void* data, std::size_t bytes, int root) override;
  void allreduce(void* data, std::size_t count, Element element, Reduce op) override;
  std::unique_ptr<PendingCollective> startReduceScatter(void* data, const std::vector<std::size_t>& counts,
                                                        Element element, Reduce op) override;
  std::unique_ptr<PendingCollective> startAllgather(void* data, const std::vector<std::size_t>& counts,
                                                    Element element) override;
  std::vector<std::vector<std::uint8_t>> gather(const void* data, std::size_t bytes, int root) override;
  std::unique_ptr<ControlChannel> duplicate() override;
  std::unique_ptr<ControlChannel> split(int color, int key) override;
  using ControlChannel::allreduce;

 private:
  std::vector<std::vector<std::uint8_t>> exchange(const void* data, std::size_t bytes) {
    return hub_.exchange(seq_++, rank_, data, bytes);
  }

  std::shared_ptr<InProcHub> owned_;  // a duplicate's or a split's hub
  InProcHub& hub_;
  int rank_;
  std::uint64_t seq_ = 0;  // collectives made on this channel
};

}  // namespace rp::control
