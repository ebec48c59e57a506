// gtest main for tests run under mpiexec. Every rank runs every test; rank 0 prints the usual output,
// the others print only their failures, prefixed with their rank. Every rank exits with the job's verdict, as
// tests/support/gtest_main.cpp gives one process's (mpiexec passes it on):
//   1                   a case failed on any rank, or the filter selected no case;
//   kSkipExitCode (77)  on every rank every selected case skipped: the CTest test reads as skipped
//                       (SKIP_RETURN_CODE), never a pass, and never a skip that hides a failure next to it;
//   0                   otherwise: every case passed, or some passed and the rest skipped (rank 0 counts those).
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
constexpr int kSkipExitCode = 77;

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
  const bool failedHere = RUN_ALL_TESTS() != 0;
  const auto& run = *::testing::UnitTest::GetInstance();
  // A --gtest_filter that matches no case would otherwise pass, having tested nothing.
  if (run.test_to_run_count() == 0) {
    std::fprintf(stderr, "[rank %d] FAIL: no test case ran (--gtest_filter=%s matched none)\n", rank,
                 GTEST_FLAG_GET(filter).c_str());
  }
  int failed = failedHere || run.test_to_run_count() == 0 ? 1 : 0;
  int skippedAll = run.successful_test_count() == 0 && run.skipped_test_count() > 0 ? 1 : 0;
  int anyFailed = failed, everySkipped = skippedAll;
  rp::checkMpi(MPI_Allreduce(&failed, &anyFailed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD), "MPI_Allreduce(failures)");
  rp::checkMpi(MPI_Allreduce(&skippedAll, &everySkipped, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD),
               "MPI_Allreduce(skips)");
  const int worst = anyFailed ? 1 : everySkipped ? kSkipExitCode : 0;
  if (rank == 0 && anyFailed && !failed) std::fprintf(stderr, "[rank 0] another rank failed\n");
  if (rank == 0 && worst == 0 && run.skipped_test_count() > 0) {
    std::fprintf(stderr, "[rank 0] %d case(s) passed, %d skipped\n", run.successful_test_count(),
                 run.skipped_test_count());
  }
  if (rank == 0 && worst == kSkipExitCode) {
    std::fprintf(stderr, "SKIPPED: every one of the %d selected case(s) skipped (exit code %d)\n",
                 run.skipped_test_count(), kSkipExitCode);
  }
  // Every rank is done with the directories the tests shared: rank 0 removes them (keeps them on failure).
  if (rank == 0) rp::test::removeScratch(!anyFailed);
  return worst;
}
