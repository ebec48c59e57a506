#include "support/fixtures.h"

#include <cstdio>
#include <filesystem>
#include <mutex>
#include <string>
#include <vector>

#include <unistd.h>

#include "common/env.h"

namespace rp::test {
namespace fs = std::filesystem;
namespace {

std::mutex gMutex;
std::vector<fs::path> gScratch;  // guarded by gMutex

class ScratchCleaner : public ::testing::EmptyTestEventListener {
  void OnTestProgramEnd(const ::testing::UnitTest& unitTest) override { removeScratch(unitTest.Passed()); }
};

}  // namespace

std::optional<std::string> fixturesDir() {
  std::string dir = env::get(env::kFixturesDir);
  if (dir.empty()) dir = RP_DEFAULT_FIXTURES_DIR;
  if (!fs::is_directory(dir)) return std::nullopt;
  return fs::canonical(dir).string();
}

std::optional<std::string> goldenDir() {
  const std::string dir = env::get(env::kGoldenDir);
  if (dir.empty() || !fs::is_directory(dir)) return std::nullopt;
  return dir;
}

bool fixturesRequired() {
  return env::get(env::kRequireFixtures) == "1";
}

std::string scratchDir() {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  std::string name = "rp-test";
  if (info != nullptr) name += std::string("-") + info->test_suite_name() + "-" + info->name();
  for (auto& c : name) {
    if (c == '/') c = '_';
  }
  // And after this process: two builds running the same test at once (sanitizer runs beside the main tier)
  // must not share a checkpoint directory.
  name += "-" + std::to_string(::getpid());
  const fs::path dir = fs::temp_directory_path() / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  static const bool listening = [] {
    ::testing::UnitTest::GetInstance()->listeners().Append(new ScratchCleaner);
    return true;
  }();
  (void)listening;
  removeAfterTests(dir.string());
  return dir.string();
}

void removeAfterTests(const std::string& dir) {
  std::lock_guard<std::mutex> lock(gMutex);
  gScratch.emplace_back(dir);
}

void removeScratch(bool passed) {
  std::lock_guard<std::mutex> lock(gMutex);
  for (const auto& dir : gScratch) {
    std::error_code ignored;
    if (passed) {
      fs::remove_all(dir, ignored);
    } else if (fs::exists(dir, ignored)) {
      std::fprintf(stderr, "test output kept for inspection: %s\n", dir.c_str());
    }
  }
  gScratch.clear();
}

}  // namespace rp::test
