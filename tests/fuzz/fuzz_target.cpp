#include "fuzz_target.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "common/error.h"

namespace rp::fuzz {

std::vector<std::string_view> split(std::string_view data) {
  std::vector<std::string_view> parts;
  for (;;) {
    const auto at = data.find(kSeparator);
    parts.push_back(data.substr(0, at));
    if (at == std::string_view::npos) return parts;
    data.remove_prefix(at + kSeparator.size());
  }
}

std::string join(const std::vector<std::string>& parts) {
  std::string out;
  for (std::size_t i = 0; i < parts.size(); ++i) out += (i ? std::string(kSeparator) : "") + parts[i];
  return out;
}

const std::string& scratchDir() {
  // Never destroyed: the exit handler that removes the directory runs after static destructors would have.
  static const std::string* dir = [] {
    const char* tmp = std::getenv("TMPDIR");
    const auto path = std::filesystem::path(tmp && *tmp ? tmp : "/tmp") / ("rp-fuzz-" + std::to_string(::getpid()));
    std::filesystem::create_directories(path);
    std::atexit([] { std::filesystem::remove_all(scratchDir()); });
    return new std::string(path.string());
  }();
  return *dir;
}

std::string writeScratch(const std::string& name, std::string_view data) {
  const std::string path = scratchDir() + "/" + name;
  std::ofstream(path, std::ios::binary | std::ios::trunc).write(data.data(), static_cast<std::streamsize>(data.size()));
  return path;
}

void writeSeed(const std::string& dir, const std::string& name, std::string_view data) {
  std::ofstream(dir + "/" + name, std::ios::binary).write(data.data(), static_cast<std::streamsize>(data.size()));
}

std::string readFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

std::string fixturesDir() {
  const char* env = std::getenv("RP_FIXTURES_DIR");
  const std::string dir = env && *env ? env : RP_DEFAULT_FIXTURES_DIR;
  return std::filesystem::is_directory(dir) ? dir : "";
}

}  // namespace rp::fuzz

// RP_FUZZ_SEEDS=<dir>: write the target's seeds there and exit (scripts/fuzz.sh builds each corpus so).
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  ::setenv("RP_LOG_LEVEL", "error", 0);  // warnings about odd inputs come by the thousand
  if (const char* seeds = std::getenv("RP_FUZZ_SEEDS")) {
    std::filesystem::create_directories(seeds);
    rp::fuzz::writeSeeds(seeds);
    std::exit(0);
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
    rp::fuzz::fuzzOne(std::string_view(reinterpret_cast<const char*>(data), size));
  } catch (const rp::Error&) {
    // A clear error: what bad input must end in.
  }
  return 0;
}
