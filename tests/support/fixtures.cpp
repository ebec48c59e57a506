#include "support/fixtures.h"

#include <cstdio>
#include <filesystem>
#include <mutex>
#include <string>
#include <vector>

#include <ftw.h>
#include <unistd.h>

#include "common/env.h"

namespace rp::test {
namespace fs = std::filesystem;
namespace {

std::mutex gMutex;
std::vector<fs::path> gScratch;  // guarded by gMutex

// Note [Scratch removal without std::filesystem]: on a GPU machine (torch 2.11 wheel, 2026-11-26) every test
// binary that removed its scratch directories at exit died in a std::filesystem::remove_all that ran the torch
// wheel's statically linked copy (the crash report named libtorch.so), after all its tests had passed. The
// removal is done with libc alone (nftw, depth first, no symlinks followed), so whichever libstdc++ answers
// std::filesystem, the exit path does not depend on it.
int removeEntry(const char* path, const struct stat*, int, struct FTW*) {
  std::remove(path);  // best effort: what cannot go stays, and ends no walk
  return 0;
}

void removeTree(const std::string& dir) {
  ::nftw(dir.c_str(), removeEntry, 16, FTW_DEPTH | FTW_PHYS);
}

class ScratchCleaner : public ::testing::EmptyTestEventListener {
  void OnTestProgramEnd(const ::testing::UnitTest& unitTest) override { removeScratch(unitTest.Passed()); }
};

}  // namespace

std::optional<std::string> fixturesDir() {
  std::string dir = env::get(env::kFixturesDir);
  if (dir.empty()) dir = kDefaultFixturesDir;
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
  removeTree(dir.string());
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
    if (passed) {
      removeTree(dir);
    } else if (::access(dir.c_str(), F_OK) == 0) {
      std::fprintf(stderr, "test output kept for inspection: %s\n", dir.c_str());
    }
  }
  gScratch.clear();
}

}  // namespace rp::test
