// ControlChannel over MPI point-to-point on a communicator (one process per rank).
#pragma once

#include <mpi.h>

#include "control/channel.h"

namespace rp::control {

class MpiChannel : public ControlChannel {
 public:
  explicit MpiChannel(MPI_Comm comm);
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void send(int to, Tag tag, const void* data, std::size_t bytes) override;
  bool receive(int from, Tag tag, void* data, std::size_t bytes, Deadline deadline) override;

 private:
  MPI_Comm comm_;
  int rank_ = 0, size_ = 1;
};

}  // namespace rp::control
