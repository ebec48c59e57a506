#include "world/mpi_session.h"

#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <vector>

#include "common/env.h"
#include "common/error.h"
#include "common/log.h"

namespace rp {

void checkMpi(int rc, const char* call) {
  if (rc == MPI_SUCCESS) return;
  std::array<char, MPI_MAX_ERROR_STRING> text{};
  int length = 0;
  MPI_Error_string(rc, text.data(), &length);
  RP_THROW(SystemError, "{} failed: {}", call, std::string(text.data(), static_cast<size_t>(length)));
}

MpiSession::MpiSession(int* argc, char*** argv) {
  // A process started without a launcher (a singleton: the single-process trainer, --help, the tools) has Open MPI
  // 4 fork and start a daemon, orted, for it to spawn through, 0.15-0.3 s of a start that ends in a second;
  // roundpipe never spawns. Under a launcher Open MPI ignores this; a caller's setting wins.
  ::setenv("OMPI_MCA_ess_singleton_isolated", "1", /*overwrite=*/0);
  int provided = MPI_THREAD_SINGLE;
  checkMpi(MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided), "MPI_Init_thread");
  if (provided < MPI_THREAD_MULTIPLE) {
    MPI_Finalize();
    RP_THROW(SystemError, "MPI provides thread level {} but roundpipe needs MPI_THREAD_MULTIPLE ({})", provided,
             MPI_THREAD_MULTIPLE);
  }
  // Errors come back as codes so they become exceptions with context instead of aborting the job.
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  checkMpi(MPI_Comm_rank(MPI_COMM_WORLD, &identity_.rank), "MPI_Comm_rank");
  checkMpi(MPI_Comm_size(MPI_COMM_WORLD, &identity_.size), "MPI_Comm_size");
  log::setRank(identity_.rank);

  const long perNode = env::getInt(env::kRanksPerNode);
  if (perNode > 0) {
    checkMpi(MPI_Comm_split(MPI_COMM_WORLD, static_cast<int>(identity_.rank / perNode), identity_.rank, &nodeComm_),
             "MPI_Comm_split(RP_RANKS_PER_NODE)");
  } else {
    checkMpi(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, identity_.rank, MPI_INFO_NULL, &nodeComm_),
             "MPI_Comm_split_type(SHARED)");
  }
  checkMpi(MPI_Comm_rank(nodeComm_, &identity_.localRank), "MPI_Comm_rank(node)");
  checkMpi(MPI_Comm_size(nodeComm_, &identity_.localSize), "MPI_Comm_size(node)");

  // Node index: number the local leaders in global-rank order and broadcast inside each node.
  MPI_Comm leaders = MPI_COMM_NULL;
  const int color = identity_.localRank == 0 ? 0 : MPI_UNDEFINED;
  checkMpi(MPI_Comm_split(MPI_COMM_WORLD, color, identity_.rank, &leaders), "MPI_Comm_split(leaders)");
  std::array<int, 2> nodeInfo{0, 1};
  if (leaders != MPI_COMM_NULL) {
    checkMpi(MPI_Comm_rank(leaders, &nodeInfo[0]), "MPI_Comm_rank(leaders)");
    checkMpi(MPI_Comm_size(leaders, &nodeInfo[1]), "MPI_Comm_size(leaders)");
    MPI_Comm_free(&leaders);
  }
  checkMpi(MPI_Bcast(nodeInfo.data(), 2, MPI_INT, 0, nodeComm_), "MPI_Bcast(node index)");
  identity_.node = nodeInfo[0];
  identity_.nodeCount = nodeInfo[1];

  std::array<char, 256> host{};
  ::gethostname(host.data(), host.size() - 1);
  identity_.hostname = host.data();

  // Every rank's place, for messages that name where a late or failed rank runs.
  constexpr int kHost = 64;
  std::array<int, 2> mine{identity_.node, identity_.localRank};
  std::vector<int> where(static_cast<std::size_t>(2 * identity_.size));
  checkMpi(MPI_Allgather(mine.data(), 2, MPI_INT, where.data(), 2, MPI_INT, MPI_COMM_WORLD), "MPI_Allgather(places)");
  std::array<char, kHost> myHost{};
  std::copy_n(host.data(), kHost - 1, myHost.data());
  std::vector<char> hosts(static_cast<std::size_t>(kHost * identity_.size));
  checkMpi(MPI_Allgather(myHost.data(), kHost, MPI_CHAR, hosts.data(), kHost, MPI_CHAR, MPI_COMM_WORLD),
           "MPI_Allgather(host names)");
  for (int r = 0; r < identity_.size; ++r) {
    const auto i = static_cast<std::size_t>(r);
    identity_.places.push_back({where[2 * i], where[2 * i + 1], std::string(&hosts[kHost * i])});
  }
  RP_LOG_DEBUG("MPI up: rank {}/{} on {} (node {}/{}, local rank {}/{})", identity_.rank, identity_.size,
               identity_.hostname, identity_.node, identity_.nodeCount, identity_.localRank, identity_.localSize);
}

MpiSession::~MpiSession() {
  if (nodeComm_ != MPI_COMM_NULL) MPI_Comm_free(&nodeComm_);
  MPI_Finalize();
}

}  // namespace rp
