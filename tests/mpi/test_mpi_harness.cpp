// The MPI gtest main's verdicts (tests/mpi/harness_verdicts.sh selects the cases by filter): a failure on one
// rank fails the job; a case that skips beside one that fails must not read as a skip; every case skipped is
// exit 77; a skip beside a pass is a pass.
#include <gtest/gtest.h>
#include <mpi.h>

namespace {
int rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}
}  // namespace

TEST(MpiHarness, FailsOnOneRankOnly) {
  EXPECT_NE(rank(), 1) << "deliberate failure on rank 1";
}

TEST(MpiHarness, Skips) {
  GTEST_SKIP() << "deliberate skip";
}

TEST(MpiHarness, Passes) {
  EXPECT_GE(rank(), 0);
}

// Ranks 0 and 2 skip every case while rank 1 fails: the worst of per-rank codes (77 > 1) would read as a skip.
TEST(MpiHarness, FailsOnRankOneSkipsElsewhere) {
  if (rank() != 1) GTEST_SKIP() << "deliberate skip";
  ADD_FAILURE() << "deliberate failure on rank 1";
}
