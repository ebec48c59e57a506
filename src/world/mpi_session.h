// Process identity and the MPI session (RAII). One MpiSession per process, created first in main().
// Thread-safety: construct and destroy on the main thread; identity() is immutable afterwards.
#pragma once

#include <string>
#include <vector>

#include <mpi.h>

namespace rp {

// Where one world rank runs.
struct RankPlace {
  int node = 0;       // node group index
  int localRank = 0;  // rank inside that node group
  std::string host;   // host name
};

// Who this process is: global rank/size, and its place inside its node group (ranks sharing memory).
struct WorldIdentity {
  int rank = 0;
  int size = 1;
  int localRank = 0;  // rank inside the node group
  int localSize = 1;  // ranks on this node
  int node = 0;       // index of the node group (rank of its local rank 0 among all local ranks 0)
  int nodeCount = 1;
  std::string hostname;
  std::vector<RankPlace> places;  // every world rank's place, indexed by world rank (launchers may interleave
                                  // nodes: world rank r is not necessarily on node r / localSize)
};

class MpiSession {
 public:
  // Initialises MPI with MPI_THREAD_MULTIPLE (throws SystemError if the library cannot provide it),
  // splits the node group with MPI_Comm_split_type(SHARED) (or RP_RANKS_PER_NODE), and tags log lines
  // with the rank, and gathers every rank's place.
  MpiSession(int* argc, char*** argv);
  ~MpiSession();
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;

  const WorldIdentity& identity() const { return identity_; }
  MPI_Comm world() const { return MPI_COMM_WORLD; }
  MPI_Comm node() const { return nodeComm_; }

 private:
  WorldIdentity identity_;
  MPI_Comm nodeComm_ = MPI_COMM_NULL;
};

// Throws SystemError naming `call` and MPI's own message when `rc` is not MPI_SUCCESS.
void checkMpi(int rc, const char* call);

}  // namespace rp
