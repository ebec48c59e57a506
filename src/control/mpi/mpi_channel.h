// ControlChannel over MPI point-to-point and collectives on a communicator (one process per rank).
#pragma once

#include <mpi.h>

#include "control/channel.h"

namespace rp::control {

class MpiChannel : public ControlChannel {
 public:
  // Uses `comm` (not owned).
  explicit MpiChannel(MPI_Comm comm);
  ~MpiChannel() override;
  MpiChannel(const MpiChannel&) = delete;
  MpiChannel& operator=(const MpiChannel&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void send(int to, Tag tag, const void* data, std::size_t bytes) override;
  bool receive(int from, Tag tag, void* data, std::size_t bytes, Deadline deadline) override;
  void barrier() override;
  void broadcast(void* data, std::size_t bytes, int root) override;
  void allreduce(void* data, std::size_t count, Element element, Reduce op) override;
  std::unique_ptr<PendingCollective> startAllreduce(void* data, std::size_t count, Element element, Reduce op) override;
  std::unique_ptr<PendingCollective> startReduceScatter(void* data, const std::vector<std::size_t>& counts,
                                                        Element element, Reduce op) override;
  std::unique_ptr<PendingCollective> startAllgather(void* data, const std::vector<std::size_t>& counts,
                                                    Element element) override;
  std::vector<std::vector<std::uint8_t>> gather(const void* data, std::size_t bytes, int root) override;
  std::unique_ptr<ControlChannel> duplicate() override;
  std::unique_ptr<ControlChannel> split(int color, int key) override;
  using ControlChannel::allreduce;

 private:
  struct Owned {};
  MpiChannel(MPI_Comm comm, Owned);  // takes ownership of `comm` (freed on destruction)

  class Pending;
  // Waits for a collective's `request`, under the bound when there is one (boundCollectives).
  void complete(MPI_Request& request, const char* op);
  // "rank 2 on node 1 (host-b); ..." for this communicator's other ranks, by their world ranks.
  std::string otherRanks() const;

  MPI_Comm comm_;
  bool owned_ = false;
  int rank_ = 0, size_ = 1;
};

}  // namespace rp::control
