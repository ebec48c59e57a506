// Where tests find the shared fixtures and the generated goldens; tests skip with a clear message when
// they are absent.
#pragma once

#include <optional>
#include <string>

#include <gtest/gtest.h>

namespace rp::test {

// The paths this build was configured with: the checkout, the project venv's Python, ../shared/fixtures beside
// the checkout. They live in one generated source (build_paths.cpp.in), not in compile definitions of the
// sources that use them: a definition holding the checkout's path made those sources miss the ccache in every
// fresh clone (~43 s each for test_export and test_pipeline), the generated one compiles in well under a second.
extern const char* const kSourceDir;
extern const char* const kPython;
extern const char* const kDefaultFixturesDir;

// $RP_FIXTURES_DIR, else ../shared/fixtures next to the checkout; nullopt if that directory is absent.
std::optional<std::string> fixturesDir();
// $RP_GOLDEN_DIR (set by CTest for golden tests); nullopt if unset or absent.
std::optional<std::string> goldenDir();
// RP_REQUIRE_FIXTURES=1: RP_SKIP_UNLESS fails instead of skipping.
bool fixturesRequired();
// A fresh empty directory under the system temp dir, named after the running test and the process. Removed when the test
// program ends with every test passed; kept (and its path printed) when one failed.
std::string scratchDir();
// Registers `dir` for removal by removeScratch (scratchDir registers its own).
void removeAfterTests(const std::string& dir);
// Removes the registered directories when `passed`, else prints that they were kept. scratchDir's listener
// calls it when the test program ends; a custom main whose ranks share directories calls it once every
// rank is done.
void removeScratch(bool passed);

}  // namespace rp::test

// Skips the current test unless `path` (a std::optional<std::string>) has a value; fails it instead where
// RP_REQUIRE_FIXTURES=1 (the GPU tier on a machine with a GPU, where a skip would be a pass that tested nothing).
#define RP_SKIP_UNLESS(path, what)                                                                        \
  do {                                                                                                    \
    if (!(path)) {                                                                                        \
      if (::rp::test::fixturesRequired()) FAIL() << what << " not found and RP_REQUIRE_FIXTURES=1";       \
      GTEST_SKIP() << what << " not found (set RP_FIXTURES_DIR / RP_GOLDEN_DIR)";                         \
    }                                                                                                     \
  } while (0)
