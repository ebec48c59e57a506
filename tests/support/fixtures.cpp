#include "support/fixtures.h"

#include <filesystem>

#include "common/env.h"

namespace rp::test {
namespace fs = std::filesystem;

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

std::string scratchDir() {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  std::string name = "rp-test";
  if (info != nullptr) name += std::string("-") + info->test_suite_name() + "-" + info->name();
  for (auto& c : name) {
    if (c == '/') c = '_';
  }
  const fs::path dir = fs::temp_directory_path() / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir.string();
}

}  // namespace rp::test
