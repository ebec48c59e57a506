// The ControlChannel contract on MPI: real processes.
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

TEST(MpiConformance, DuplicateAndSplit) {
  MpiChannel channel(MPI_COMM_WORLD);
  test::conformanceDuplicateAndSplit(channel);
}

}  // namespace
}  // namespace rp::control
