#include <cstdlib>

#include <gtest/gtest.h>

#include "common/env.h"
#include "common/error.h"
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
