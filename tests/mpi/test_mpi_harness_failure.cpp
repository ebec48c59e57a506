// Registered with WILL_FAIL: rank 1 fails, ranks 0 and 2 pass; the harness must fail the run anyway.
#include <gtest/gtest.h>
#include <mpi.h>

TEST(MpiHarness, FailsOnOneRankOnly) {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  EXPECT_NE(rank, 1) << "deliberate failure on rank 1";
}
