// gtest main for tests run under mpiexec. Every rank runs every test; rank 0 prints the usual output,
// the others print only their failures, prefixed with their rank. The exit code is the worst over ranks.
#include <unistd.h>

#include <cstdio>

#include <gtest/gtest.h>

#include "mpi_test_session.h"
#include "support/crash_report.h"
#include "support/fixtures.h"
#include "world/mpi_session.h"

namespace {

const rp::MpiSession* gSession = nullptr;
long gJobTag = 0;

class RankFailurePrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit RankFailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const ::testing::TestPartResult& result) override {
    if (!result.failed()) return;
    std::fprintf(stderr, "[rank %d] %s:%d: failure\n%s\n", rank_, result.file_name() ? result.file_name() : "?",
                 result.line_number(), result.summary());
  }

 private:
  int rank_;
};

}  // namespace

namespace rp::test {
const MpiSession& mpiSession() {
  return *gSession;
}

long jobTag() {
  return gJobTag;
}
}  // namespace rp::test

int main(int argc, char** argv) {
  rp::MpiSession session(&argc, &argv);
  gSession = &session;
  rp::test::installCrashReport();  // after MPI_Init: Open MPI installs its own handlers there
  ::testing::InitGoogleTest(&argc, argv);
  const int rank = session.identity().rank;
  gJobTag = static_cast<long>(::getpid());
  rp::checkMpi(MPI_Bcast(&gJobTag, 1, MPI_LONG, 0, MPI_COMM_WORLD), "MPI_Bcast(job tag)");
  if (rank != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new RankFailurePrinter(rank));
  }
  int local = RUN_ALL_TESTS();
  // A --gtest_filter that matches no case would otherwise pass, having tested nothing.
  if (::testing::UnitTest::GetInstance()->test_to_run_count() == 0) {
    std::fprintf(stderr, "[rank %d] FAIL: no test case ran (--gtest_filter=%s matched none)\n", rank,
                 GTEST_FLAG_GET(filter).c_str());
    local = 1;
  }
  int worst = local;
  rp::checkMpi(MPI_Allreduce(&local, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD), "MPI_Allreduce(test result)");
  if (rank == 0 && worst != local) std::fprintf(stderr, "[rank 0] another rank failed\n");
  // Every rank is done with the directories the tests shared: rank 0 removes them (keeps them on failure).
  if (rank == 0) rp::test::removeScratch(worst == 0);
  return worst;
}
