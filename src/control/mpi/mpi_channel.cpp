#include "control/mpi/mpi_channel.h"

#include <thread>

#include "world/mpi_session.h"

namespace rp::control {

MpiChannel::MpiChannel(MPI_Comm comm) : comm_(comm) {
  checkMpi(MPI_Comm_rank(comm_, &rank_), "MPI_Comm_rank(control)");
  checkMpi(MPI_Comm_size(comm_, &size_), "MPI_Comm_size(control)");
}

void MpiChannel::send(int to, Tag tag, const void* data, std::size_t bytes) {
  checkMpi(MPI_Send(data, static_cast<int>(bytes), MPI_BYTE, to, mpiTag(tag), comm_), "MPI_Send(control)");
}

bool MpiChannel::receive(int from, Tag tag, void* data, std::size_t bytes, Deadline deadline) {
  MPI_Request request = MPI_REQUEST_NULL;
  checkMpi(MPI_Irecv(data, static_cast<int>(bytes), MPI_BYTE, from, mpiTag(tag), comm_, &request),
           "MPI_Irecv(control)");
  auto pause = std::chrono::microseconds(1);
  while (true) {
    int done = 0;
    checkMpi(MPI_Test(&request, &done, MPI_STATUS_IGNORE), "MPI_Test(control)");
    if (done) return true;
    if (std::chrono::steady_clock::now() > deadline) {
      MPI_Cancel(&request);
      MPI_Request_free(&request);
      return false;
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(200));
  }
}

}  // namespace rp::control
