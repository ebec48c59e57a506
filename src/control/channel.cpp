#include "control/channel.h"

#include <chrono>
#include <thread>

#include "control/tags.h"
#include "world/mpi_session.h"

namespace rp::control {

void sendReady(MPI_Comm comm, int to, const StageReady& message) {
  checkMpi(MPI_Send(&message, sizeof(message), MPI_BYTE, to, mpiTag(Tag::kStageReady), comm),
           "MPI_Send(StageReady)");
}

void waitReady(MPI_Comm comm, int from, const StageReady& expected, double timeoutSeconds,
               const std::function<std::string()>& describePeer) {
  StageReady got;
  MPI_Request request = MPI_REQUEST_NULL;
  checkMpi(MPI_Irecv(&got, sizeof(got), MPI_BYTE, from, mpiTag(Tag::kStageReady), comm, &request),
           "MPI_Irecv(StageReady)");
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeoutSeconds);
  int done = 0;
  auto pause = std::chrono::microseconds(1);
  while (true) {
    checkMpi(MPI_Test(&request, &done, MPI_STATUS_IGNORE), "MPI_Test(StageReady)");
    if (done) break;
    if (std::chrono::steady_clock::now() > deadline) {
      MPI_Cancel(&request);
      MPI_Request_free(&request);
      RP_THROW(PeerError, "stalled: waited {:.0f} s for rank {} to finish job {} microbatch {} of step {} "
               "(pipeline.stall_timeout_s){}", timeoutSeconds, from, expected.job, expected.microbatch, expected.step + 1,
               describePeer ? "\n  " + describePeer() : std::string());
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(200));
  }
  if (got.version != kProtocolVersion || got.step != expected.step || got.job != expected.job ||
      got.microbatch != expected.microbatch) {
    RP_THROW(PeerError, "protocol error: from rank {} expected ready(step {}, job {}, mb {}) v{}, got (step {}, job {}, "
             "mb {}) v{}", from, expected.step, expected.job, expected.microbatch, kProtocolVersion, got.step, got.job,
             got.microbatch, got.version);
  }
}

}  // namespace rp::control
