// The test binaries' crash report (tests/support/crash_report.h): a call through a null function pointer —
// where a debugger shows no frames — is reported with the code that made the call; without RP_CRASH_REPORT=1
// nothing is installed and the process dies as before.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "support/crash_report.h"

namespace rp::test {
namespace {

using Function = void (*)();

// This program's file name, which the report names as the object holding the caller.
std::string programName() {
  return std::filesystem::read_symlink("/proc/self/exe").filename().string();
}

// Called through a volatile pointer so the compiler cannot see (and drop) the null call.
[[gnu::noinline]] void callNull() {
  volatile Function f = nullptr;
  f();
}

TEST(CrashReportDeathTest, NamesTheCallerOfANullFunctionPointer) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        setenv("RP_CRASH_REPORT", "1", 1);
        installCrashReport();
        callNull();
      },
      std::string("crash report: signal 11 .*\n.*crash report: pc (0x0|\\(nil\\)|0) .*\n.*") +
          "crash report: called from 0x[0-9a-f]+ = .* in .*/" + programName());
}

TEST(CrashReportDeathTest, StaysOutOfTheWayWhenNotAskedFor) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        unsetenv("RP_CRASH_REPORT");
        installCrashReport();
        callNull();
      },
      "^$");
}

}  // namespace
}  // namespace rp::test
