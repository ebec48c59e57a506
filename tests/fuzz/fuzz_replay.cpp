// The deterministic half of fuzzing, in the normal build (no clang, no libFuzzer): each target's own seeds
// (written fresh by its writeSeeds) and its committed findings (tests/fuzz/regressions/<target>/) replayed
// through the same entry point libFuzzer calls. An input ending in anything but a result or an rp::Error fails
// the run naming the input; a crash fails it too (the test sees the signal). Usage:
//   fuzz_replay_<target> <file or directory>...   (directories are read recursively, in name order)
// Exits 1 when no input at all was replayed, so a missing corpus cannot pass as an empty one.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <string>
#include <vector>

#include "fuzz_target.h"

extern "C" int LLVMFuzzerInitialize(int*, char***);
extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size);

namespace {

std::vector<std::string> inputsUnder(const std::string& path) {
  namespace fs = std::filesystem;
  std::vector<std::string> files;
  if (fs::is_directory(path)) {
    for (const auto& e : fs::recursive_directory_iterator(path))
      if (e.is_regular_file()) files.push_back(e.path().string());
  } else if (fs::is_regular_file(path)) {
    files.push_back(path);
  } else {
    std::fprintf(stderr, "fuzz_replay: %s: no such file or directory\n", path.c_str());
    std::exit(2);
  }
  std::sort(files.begin(), files.end());
  return files;
}

}  // namespace

int main(int argc, char** argv) {
  LLVMFuzzerInitialize(&argc, &argv);
  // The seeds, written by the target itself into its scratch directory.
  const std::string seeds = rp::fuzz::scratchDir() + "/seeds";
  std::filesystem::create_directories(seeds);
  rp::fuzz::writeSeeds(seeds);
  std::vector<std::string> roots{seeds};
  for (int i = 1; i < argc; ++i) roots.emplace_back(argv[i]);
  std::size_t replayed = 0;
  for (const auto& root : roots) {
    for (const auto& file : inputsUnder(root)) {
      const std::string data = rp::fuzz::readFile(file);
      try {
        LLVMFuzzerTestOneInput(reinterpret_cast<const std::uint8_t*>(data.data()), data.size());
      } catch (const std::exception& e) {
        std::fprintf(stderr, "fuzz_replay: FAIL: %s ended in an exception that is not an rp::Error: %s\n",
                     file.c_str(), e.what());
        return 1;
      } catch (...) {
        std::fprintf(stderr, "fuzz_replay: FAIL: %s ended in a non-standard exception\n", file.c_str());
        return 1;
      }
      ++replayed;
    }
  }
  if (replayed == 0) {
    std::fprintf(stderr, "fuzz_replay: FAIL: no input replayed (the target wrote no seeds and none were given)\n");
    return 1;
  }
  std::printf("fuzz_replay: %zu input(s) replayed, each ending in a result or an rp::Error\n", replayed);
  return 0;
}
