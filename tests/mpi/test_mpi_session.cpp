// Our MPI session on real processes: who each process is (rank, node group, local rank, every rank's place)
// as MPI itself and the host see it, and how a failing MPI call becomes an error naming the call.
#include <unistd.h>

#include <cstdlib>
#include <string>

#include <gtest/gtest.h>
#include <mpi.h>

#include "common/env.h"
#include "common/error.h"
#include "mpi_test_session.h"
#include "world/mpi_transport.h"

namespace rp {
namespace {

// The run's first line names the PML the job runs on (docs/launch.md, "ob1/TCP or UCX"): from the components Open
// MPI kept loaded, so the one this very job selected; and the wording for each kind from given names.
TEST(MpiTransport, NamesThePmlThisJobRunsOn) {
  const std::string line = rp::describeMpiTransport();
  EXPECT_EQ(line.rfind("Open MPI v", 0), 0u) << line;
  const char* asked = std::getenv("OMPI_MCA_pml");
  if (asked != nullptr && (std::string(asked) == "ob1" || std::string(asked) == "ucx")) {
    EXPECT_NE(line.find(std::string("; PML ") + asked), std::string::npos) << line;
  } else {
    EXPECT_NE(line.find("; PML "), std::string::npos) << line;
  }
  EXPECT_EQ(rp::describeMpiTransport("Open MPI v4.1.4",
                                     {"libc.so.6", "mca_btl_tcp.so", "mca_pml_ob1.so", "mca_btl_self.so"},
                                     {"", "", "eth0"}),
            "Open MPI v4.1.4; PML ob1 over BTLs self, tcp (btl_tcp_if_include eth0)");
  EXPECT_EQ(rp::describeMpiTransport("Open MPI v4.1.4", {"mca_btl_tcp.so", "mca_pml_ucx.so", "libuct_ib.so.0"},
                                     {"tcp", "mlx5_0:1", ""}),
            "Open MPI v4.1.4; PML ucx (UCX_TLS tcp, UCX_NET_DEVICES mlx5_0:1)");
}

TEST(MpiSession, IdentityMatchesMpiAndTheHost) {
  const WorldIdentity& id = test::mpiSession().identity();
  int rank = -1, size = -1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  EXPECT_EQ(id.rank, rank);
  EXPECT_EQ(id.size, size);
  char host[256] = {};
  ::gethostname(host, sizeof(host) - 1);
  EXPECT_EQ(id.hostname, host);
  // Without RP_RANKS_PER_NODE the node group is the ranks sharing memory: every rank of this run.
  ASSERT_EQ(env::getInt(env::kRanksPerNode), 0) << "run without RP_RANKS_PER_NODE";
  EXPECT_EQ(id.nodeCount, 1);
  EXPECT_EQ(id.node, 0);
  EXPECT_EQ(id.localSize, size);
  EXPECT_EQ(id.localRank, rank) << "MPI_Comm_split_type keys by world rank";
}

TEST(MpiSession, EveryRankKnowsEveryRanksPlace) {
  const WorldIdentity& id = test::mpiSession().identity();
  ASSERT_EQ(static_cast<int>(id.places.size()), id.size);
  for (int r = 0; r < id.size; ++r) {
    const RankPlace& p = id.places[static_cast<std::size_t>(r)];
    EXPECT_EQ(p.node, 0) << "rank " << r;
    EXPECT_EQ(p.localRank, r) << "rank " << r;
    EXPECT_EQ(p.host, id.hostname) << "rank " << r;
  }
  EXPECT_EQ(id.places[static_cast<std::size_t>(id.rank)].localRank, id.localRank);
}

// The session sets MPI_ERRORS_RETURN, so a bad call comes back as a code that checkMpi turns into an error
// naming the call and MPI's own reason (instead of MPI aborting the job).
TEST(MpiSession, AFailingCallNamesTheCallAndMpisReason) {
  const WorldIdentity& id = test::mpiSession().identity();
  int value = 0;
  try {
    checkMpi(MPI_Send(&value, 1, MPI_INT, id.size + 5, 0, MPI_COMM_WORLD), "MPI_Send(to a rank that does not exist)");
    FAIL() << "expected a SystemError";
  } catch (const SystemError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("MPI_Send(to a rank that does not exist) failed: "), std::string::npos) << what;
    EXPECT_NE(what.find("MPI_ERR_RANK: invalid rank"), std::string::npos) << what;  // MPI's reason (Open MPI)
  }
}

}  // namespace
}  // namespace rp
