#include <algorithm>
#include <chrono>
#include <ctime>
#include <cstdlib>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "common/backoff.h"
#include "common/env.h"
#include "common/error.h"
#include "common/fault.h"
#include "common/host_cpu.h"
#include "common/mapped_file.h"
#include "common/parallel.h"
#include "support/fixtures.h"

namespace rp {
namespace {

TEST(Env, FallbackWhenUnsetAndParsedWhenSet) {
  constexpr env::Var kVar{"RP_TEST_ONLY_VAR", "7", "test variable"};
  ::unsetenv(kVar.name);
  EXPECT_EQ(env::getInt(kVar), 7);
  ::setenv(kVar.name, "42", 1);
  EXPECT_EQ(env::getInt(kVar), 42);
  ::setenv(kVar.name, "4x2", 1);
  try {
    env::getInt(kVar);
    FAIL() << "expected InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("RP_TEST_ONLY_VAR='4x2'"), std::string::npos) << e.what();
  }
  ::unsetenv(kVar.name);
}

// RP_SLOW_WORKER: each listed rank's speed, 1 for the others; a malformed item is named.
// Note [Polling backoff]: pauses double from 1 us to the floor while a wait is young, then grow with the wait —
// at most a sixteenth of the time waited so far (so a wait overshoots its event by at most 1/16) and 2 ms.
TEST(Backoff, PausesDoubleToTheFloorThenGrowWithTheWaitUpToTwoMilliseconds) {
  using us = std::chrono::microseconds;
  const us floor(200);
  std::vector<long> young;
  us pause(1);
  for (int i = 0; i < 10; ++i) young.push_back((pause = Backoff::next(pause, us(500), floor)).count());
  EXPECT_EQ(young, (std::vector<long>{2, 4, 8, 16, 32, 64, 128, 200, 200, 200}));
  EXPECT_EQ(Backoff::next(us(200), us(8000), floor).count(), 400);    // 8 ms into the wait: 500 us allowed
  EXPECT_EQ(Backoff::next(us(400), us(8000), floor).count(), 500);
  EXPECT_EQ(Backoff::next(us(1600), us(100000), floor).count(), 2000);  // 100 ms: capped at 2 ms
  EXPECT_EQ(Backoff::next(us(2000), us(10000000), floor).count(), 2000);
  EXPECT_EQ(Backoff::next(us(50), us(1000000), us(100)).count(), 100);  // still doubling
}

TEST(Fault, SlowWorkerSpeedsParseAndBadOnesAreNamed) {
  ::setenv(env::kSlowWorker.name, "2:0.5,0:0.25", 1);
  EXPECT_DOUBLE_EQ(fault::slowWorkerSpeed(2), 0.5);
  EXPECT_DOUBLE_EQ(fault::slowWorkerSpeed(0), 0.25);
  EXPECT_DOUBLE_EQ(fault::slowWorkerSpeed(1), 1.0);
  for (const char* bad : {"2", "2:0", "2:1.5", "x:0.5", "2:0.5x", "-1:0.5", "2:0.5,"}) {
    ::setenv(env::kSlowWorker.name, bad, 1);
    try {
      (void)fault::slowWorkerSpeed(1);
      ADD_FAILURE() << bad << ": expected InputError";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(std::string("RP_SLOW_WORKER='") + bad + "'"), std::string::npos) << e.what();
    }
  }
  ::unsetenv(env::kSlowWorker.name);
  EXPECT_DOUBLE_EQ(fault::slowWorkerSpeed(1), 1.0);
}

TEST(Check, InternalErrorNamesConditionAndLocation) {
  try {
    const int workers = 3;
    RP_CHECK(workers == 4, "expected {} workers", 4);
    FAIL() << "expected InternalError";
  } catch (const InternalError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("expected 4 workers"), std::string::npos) << what;
    EXPECT_NE(what.find("workers == 4"), std::string::npos) << what;
    EXPECT_NE(what.find("test_common.cpp"), std::string::npos) << what;
  }
}

// Note [Optimizer priority]: a thread lowers its own priority only, and the threads its passes start afterwards
// run at it (Linux's nice value is per thread and inherited at creation) — the optimizer relies on both.
TEST(Parallel, AThreadLowersItsOwnPriorityAndItsPartsInheritIt) {
  const int caller = parallel::thisThreadsNice();
  int before = 0, after = 0;
  bool lowered = false;
  std::vector<int> parts(3, -100);
  std::thread optimizer([&] {
    before = parallel::thisThreadsNice();
    lowered = parallel::lowerThisThreadsPriority(5);
    after = parallel::thisThreadsNice();
    parallel::forEachPart(3, [&](int p) { parts[static_cast<std::size_t>(p)] = parallel::thisThreadsNice(); });
  });
  optimizer.join();
  ASSERT_TRUE(lowered) << "setpriority refused to raise a thread's own nice value";
  EXPECT_EQ(before, caller) << "a new thread starts at its creator's priority";
  EXPECT_EQ(after, std::min(19, before + 5));
  for (int nice : parts) EXPECT_EQ(nice, after) << "a part's thread (part 0 is the lowered thread itself)";
  EXPECT_EQ(parallel::thisThreadsNice(), caller) << "the other threads of the process keep theirs";
}

TEST(MappedFile, MissingFileIsInputErrorNamingIt) {
  const std::string path = test::scratchDir() + "/absent.bin";
  try {
    MappedFile file(path);
    FAIL() << "expected InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
  }
}

// Note [Host CPU by role]: a thread's work counts for its role, its sleep for nothing, its part threads for its
// role too, an ended thread's time stays, and work on no registered thread is "other".
namespace host_cpu {

// Spins this thread until it has used `seconds` of CPU.
void burn(double seconds) {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  const double start = static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
  volatile double sink = 0;
  while (true) {
    for (int i = 0; i < 10000; ++i) sink = sink + 1.0;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    if (static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec) - start >= seconds) break;
  }
}

TEST(HostCpu, AThreadsWorkCountsForItsRoleAndItsSleepForNothing) {
  const cpu::HostCpu before = cpu::hostCpu();
  std::thread([] {
    const cpu::ThreadRole role(cpu::Role::kCopies);
    EXPECT_EQ(cpu::currentRole(), cpu::Role::kCopies);
    burn(0.08);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }).join();
  std::thread([] {
    const cpu::ThreadRole role(cpu::Role::kControl);
    // Its part threads work for it: two parts of 0.04 s each, one on a part thread.
    parallel::forEachPart(2, [](int) { burn(0.04); });
  }).join();
  std::thread([] { burn(0.05); }).join();  // no role: the process's "other"
  const cpu::HostCpu after = cpu::hostCpu();
  const double copies = after[cpu::Role::kCopies] - before[cpu::Role::kCopies];
  const double control = after[cpu::Role::kControl] - before[cpu::Role::kControl];
  const double other = after[cpu::Role::kOther] - before[cpu::Role::kOther];
  EXPECT_GE(copies, 0.08);
  EXPECT_LT(copies, 0.08 + 0.05) << "the thread's 0.1 s of sleep counted";
  EXPECT_GE(control, 0.08) << "the part thread's work did not count for its caller's role";
  EXPECT_LT(control, 0.08 + 0.05);
  EXPECT_GE(other, 0.05);
  EXPECT_GE(after.process - before.process, copies + control + other - 1e-3);
  EXPECT_EQ(cpu::currentRole(), cpu::Role::kOther);
  EXPECT_STREQ(cpu::roleName(cpu::Role::kOptimizer), "optimizer");
}

}  // namespace host_cpu

}  // namespace
}  // namespace rp
