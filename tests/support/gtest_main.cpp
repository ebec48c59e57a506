// The gtest main of every rp_gtest binary (cmake/RpTesting.cmake). CTest runs one process per test suite
// (Note [One process per suite]), so the process's exit code is the suite's verdict:
//   0                   every selected case passed, or some passed and the rest skipped (gtest lists those);
//   kSkipExitCode (77)  every selected case skipped: the CTest test reads as skipped (SKIP_RETURN_CODE), not passed;
//   1                   a case failed, or the filter selected no case (a run that tested nothing must not pass).
#include <cstdio>
#include <cstdlib>

#include <gtest/gtest.h>

namespace {
constexpr int kSkipExitCode = 77;

// The verdict, without static destructors (LibTorch's deregistrations: ~0.1 s of CPU a process, as in
// rp::cli::exitProcess); the tests' scratch directories went with RUN_ALL_TESTS (scratchDir, tests/support/fixtures.h).
int verdict(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  const int failed = RUN_ALL_TESTS();
  if (GTEST_FLAG_GET(list_tests)) return failed;
  const auto& run = *::testing::UnitTest::GetInstance();
  if (run.test_to_run_count() == 0) {
    std::fprintf(stderr, "FAIL: no test case ran (--gtest_filter=%s matched none)\n", GTEST_FLAG_GET(filter).c_str());
    return 1;
  }
  if (failed == 0 && run.successful_test_count() == 0 && run.skipped_test_count() > 0) {
    std::fprintf(stderr, "SKIPPED: every one of the %d selected case(s) skipped (exit code %d)\n",
                 run.skipped_test_count(), kSkipExitCode);
    return kSkipExitCode;
  }
  return failed;
}
}  // namespace

int main(int argc, char** argv) {
  const int code = verdict(argc, argv);
  std::fflush(nullptr);
  std::_Exit(code);
}
