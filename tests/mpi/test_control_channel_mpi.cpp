// The ControlChannel contract on MPI: real processes.
#include <chrono>
#include <string>

#include <gtest/gtest.h>
#include <mpi.h>

#include "control/mpi/mpi_channel.h"
#include "support/channel_conformance.h"

namespace rp::control {
namespace {

TEST(MpiConformance, RingInOrder) {
  MpiChannel channel(MPI_COMM_WORLD);
  test::conformanceRingInOrder(channel);
}

TEST(MpiConformance, TimeoutNamesThePeer) {
  MpiChannel channel(MPI_COMM_WORLD);
  test::conformanceTimeoutNamesThePeer(channel);
  MPI_Barrier(MPI_COMM_WORLD);
}

TEST(MpiConformance, MismatchIsProtocolError) {
  MpiChannel channel(MPI_COMM_WORLD);
  test::conformanceMismatchIsProtocolError(channel);
}

TEST(MpiConformance, ShortDeadlinesLoseNothing) {
  MpiChannel channel(MPI_COMM_WORLD);
  test::conformanceShortDeadlinesLoseNothing(channel);
}

TEST(MpiConformance, Collectives) {
  MpiChannel channel(MPI_COMM_WORLD);
  test::conformanceCollectives(channel);
}

TEST(MpiConformance, StartedAllreduce) {
  MpiChannel channel(MPI_COMM_WORLD);
  test::conformanceStartedAllreduce(channel);
}

TEST(MpiConformance, ReduceScatterAndAllgather) {
  MpiChannel channel(MPI_COMM_WORLD);
  test::conformanceReduceScatterAndAllgather(channel);
}

TEST(MpiConformance, DuplicateAndSplit) {
  MpiChannel channel(MPI_COMM_WORLD);
  test::conformanceDuplicateAndSplit(channel);
}

TEST(MpiConformance, OneMoreSender) {
  MpiChannel channel(MPI_COMM_WORLD);
  test::conformanceOneMoreSender(channel);
}

// A collective a peer never joins ends at the bound naming the peers; the peers' later join completes it.
TEST(MpiChannelBound, ACollectiveAPeerNeverJoinsStallsNamingThePeers) {
  MpiChannel world(MPI_COMM_WORLD);
  auto channel = world.duplicate();  // the unmatched barrier stays on a communicator of its own
  channel->boundCollectives({0.2, 0.5}, [](int r) { return "peer " + std::to_string(r); });
  if (world.rank() == 0) {
    const auto start = std::chrono::steady_clock::now();
    try {
      channel->barrier();
      ADD_FAILURE() << "a barrier the peers never joined returned";
    } catch (const PeerError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find(" s for MPI_Barrier over " + std::to_string(world.size()) +
                          " ranks to complete; the others: peer 1"),
                std::string::npos)
          << what;
    }
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  }
  world.barrier();
  if (world.rank() != 0) channel->barrier();  // matches rank 0's pending one
  world.barrier();
}

// A started all-reduce a peer never joins: wait() ends at the bound as the blocking collectives do.
TEST(MpiChannelBound, AStartedAllReduceAPeerNeverJoinsStallsNamingThePeers) {
  MpiChannel world(MPI_COMM_WORLD);
  auto channel = world.duplicate();
  channel->boundCollectives({0.2, 0.5}, [](int r) { return "peer " + std::to_string(r); });
  float value = 1.0f;
  if (world.rank() == 0) {
    auto pending = channel->startAllreduce(&value, 1, Element::kFloat32, Reduce::kSum);
    EXPECT_FALSE(pending->test());
    try {
      pending->wait();
      ADD_FAILURE() << "an all-reduce the peers never joined finished";
    } catch (const PeerError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find(" s for MPI_Iallreduce over " + std::to_string(world.size()) +
                          " ranks to complete; the others: peer 1"),
                std::string::npos)
          << what;
    }
  }
  world.barrier();
  if (world.rank() != 0) channel->allreduce(&value, 1, Reduce::kSum);  // matches rank 0's pending one
  world.barrier();
}

}  // namespace
}  // namespace rp::control
