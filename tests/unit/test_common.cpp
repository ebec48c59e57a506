#include <cstdlib>

#include <gtest/gtest.h>

#include "common/env.h"
#include "common/error.h"
#include "common/fault.h"
#include "common/mapped_file.h"
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

TEST(MappedFile, MissingFileIsInputErrorNamingIt) {
  const std::string path = test::scratchDir() + "/absent.bin";
  try {
    MappedFile file(path);
    FAIL() << "expected InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace rp
