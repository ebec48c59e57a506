// Note [Shm lifetime]: a segment name left by a creator killed before its node barrier is removed by the next
// create() on the node — only a name of this project's, whose process is gone, older than any set-up.
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <ctime>
#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>

#include "memory/shm_segment.h"
#include "support/fixtures.h"

namespace rp::memory {
namespace {

pid_t deadPid() {
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  ::waitpid(child, nullptr, 0);
  return child;
}

void touch(const std::string& path, std::time_t age) {
  std::ofstream(path) << "x";
  const std::time_t at = std::time(nullptr) - age;
  const struct timespec times[2] = {{at, 0}, {at, 0}};
  ASSERT_EQ(::utimensat(AT_FDCWD, path.c_str(), times, 0), 0) << path;
}

TEST(ShmSegment, RemovesOnlyOldNamesOfThisProjectWhoseCreatorIsGone) {
  const std::string dir = test::scratchDir();
  const pid_t gone = deadPid(), alive = ::getpid();
  const std::time_t old = ShmSegment::kStaleAfterSeconds + 60, fresh = 5;
  const std::string leaked[] = {"rp-ring-" + std::to_string(gone) + "-3",
                                "roundpipe-" + std::to_string(gone) + "-store"};
  const std::string kept[] = {"rp-ring-" + std::to_string(gone) + "-4",         // young: its creator may be starting
                              "roundpipe-" + std::to_string(alive) + "-store",  // its creator runs
                              "other-" + std::to_string(gone) + "-1",           // not ours
                              "rp-ring-x-1"};                                   // no pid
  for (const auto& n : leaked) touch(dir + "/" + n, old);
  touch(dir + "/" + kept[0], fresh);
  for (std::size_t i = 1; i < std::size(kept); ++i) touch(dir + "/" + kept[i], old);
  EXPECT_EQ(ShmSegment::removeStale(dir), 2);
  for (const auto& n : leaked) EXPECT_FALSE(std::filesystem::exists(dir + "/" + n)) << n;
  for (const auto& n : kept) EXPECT_TRUE(std::filesystem::exists(dir + "/" + n)) << n;
}

}  // namespace
}  // namespace rp::memory
