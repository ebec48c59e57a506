#include "common/parallel.h"

#include <sched.h>

#include <algorithm>
#include <thread>
#include <vector>

namespace rp::parallel {

int availableCores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1U, std::thread::hardware_concurrency());
}

int optimizerThreads(int configured, int ranksOnNode) {
  if (configured > 0) return configured;
  return std::max(1, availableCores() / std::max(1, ranksOnNode));
}

std::pair<std::size_t, std::size_t> partOf(std::size_t n, int part, int parts, std::size_t grain) {
  const auto p = static_cast<std::size_t>(std::max(1, parts)), t = static_cast<std::size_t>(part);
  const std::size_t per = (n / p + grain - 1) / grain * grain;
  const std::size_t begin = std::min(n, per * t);
  const std::size_t end = t + 1 == p ? n : std::min(n, begin + per);
  return {begin, std::max(begin, end)};
}

int partsFor(std::size_t elements, int threads) {
  constexpr std::size_t kMinPart = std::size_t{1} << 18;
  const std::size_t parts = std::max<std::size_t>(1, elements / kMinPart);
  return static_cast<int>(std::min<std::size_t>(parts, static_cast<std::size_t>(std::max(1, threads))));
}

void forEachPart(int parts, const std::function<void(int part)>& fn) {
  std::vector<std::thread> others;
  others.reserve(static_cast<std::size_t>(std::max(0, parts - 1)));
  for (int part = 1; part < parts; ++part) others.emplace_back(fn, part);
  if (parts > 0) fn(0);
  for (auto& thread : others) thread.join();
}

}  // namespace rp::parallel
