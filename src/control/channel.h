// Point-to-point readiness over MPI with a deadline: a wait that outlives it throws PeerError naming the
// peer rank and the message it was waiting for, instead of hanging.
#pragma once

#include <functional>
#include <string>

#include <mpi.h>

#include "common/error.h"
#include "control/messages.h"

namespace rp::control {

// A peer did not answer in time or sent something unexpected; the job cannot continue.
class PeerError : public Error {
 public:
  using Error::Error;
};

void sendReady(MPI_Comm comm, int to, const StageReady& message);
// Receives the next StageReady from `from` and checks it is `expected`; throws PeerError after
// `timeoutSeconds` without one (appending `describePeer()`, e.g. the peer's last operation), or on a mismatch.
void waitReady(MPI_Comm comm, int from, const StageReady& expected, double timeoutSeconds,
               const std::function<std::string()>& describePeer = {});

}  // namespace rp::control
