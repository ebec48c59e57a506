#include "common/parallel.h"

#include <sched.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "common/error.h"

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

// On Linux, PRIO_PROCESS with a thread id addresses that thread alone (setpriority(2), "BUGS").
int thisThreadsNice() {
  errno = 0;
  const int nice = getpriority(PRIO_PROCESS, static_cast<id_t>(syscall(SYS_gettid)));
  return errno == 0 ? nice : 0;
}

bool lowerThisThreadsPriority(int nice) {
  const auto tid = static_cast<id_t>(syscall(SYS_gettid));
  return setpriority(PRIO_PROCESS, tid, std::min(19, thisThreadsNice() + nice)) == 0;
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

// Note [Parallel first touch]
// A run's set-up creates tens of GB of host memory: the node store (weights, float32 masters, gradient slots),
// each rank's float32 gradients and AdamW moments (Qwen3-1.7B: 14 GB and 21 GB). The kernel gives a page its
// physical memory, cleared, when it is first written, and on a virtual machine that costs far more than the
// write: ~1.2 GB/s per thread on our 2-core development VM (2026-11-27, bench_adamw), 20-30x a write to memory
// already present. Touched from one thread, as `std::vector<float>(n, 0.0f)` and the random init's first writes
// did, that is ~30 s at this rate, half of the ~60 s the 1.7B runs on an H100 host spent before their first step
// (that host's rate is not measured). The clearing is per page and scales with the threads that fault (1.6x on
// 2 threads here), so the large buffers are zeroed in parallel parts right after they are allocated: the node
// store by its node's ranks (each its share, on its optimizer threads, before anyone writes it), a rank's
// optimizer state on its optimizer threads. Zeros over fresh memory change no value, and memory that malloc
// hands back from its free lists needs them anyway.
void fillZero(void* data, std::size_t bytes, int threads) {
  constexpr std::size_t kPage = 4096;
  auto* bytesAt = static_cast<unsigned char*>(data);
  const int parts = partsFor(bytes / sizeof(float), threads);
  forEachPart(parts, [&](int part) {
    const auto [begin, end] = partOf(bytes, part, parts, kPage);
    std::memset(bytesAt + begin, 0, end - begin);
  });
}

ZeroedFloats::ZeroedFloats(std::size_t n, int threads) : size_(n) {
  if (n == 0) return;
  data_.reset(static_cast<float*>(std::malloc(n * sizeof(float))));
  if (!data_) {
    RP_THROW(SystemError, "malloc of {} floats ({:.2f} GB) failed: the host is out of memory", n,
             static_cast<double>(n * sizeof(float)) / 1e9);
  }
  fillZero(data_.get(), n * sizeof(float), threads);
}

void ZeroedFloats::Free::operator()(float* p) const {
  std::free(p);
}

}  // namespace rp::parallel
