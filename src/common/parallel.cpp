#include "common/parallel.h"

#include <sched.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "common/error.h"
#include "common/host_cpu.h"

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

// Note [Part threads]: forEachPart's helper threads live as long as the thread that calls it — a pool per calling
// thread, started by it, so they run at its scheduling priority (Note [Optimizer priority]; started anew when
// that changed) — and wait on a condition variable for the next pass, instead of being created and joined by
// every call: an optimizer step makes hundreds of passes (the async copy one per tensor, the widening one per
// layer), each of which started parts - 1 threads (15 a pass with 16 threads). A pass started while the caller's
// pool is busy (a part 0 that makes a pass of its own) or from a pool's thread runs on threads of its own.
namespace {

class PartThreads {
 public:
  ~PartThreads() { stopAll(); }
  bool busy() const { return busy_; }
  void run(int parts, const std::function<void(int part)>& fn) {
    busy_ = true;
    const int nice = thisThreadsNice();
    const cpu::Role role = cpu::currentRole();
    if (nice != nice_ || role != role_) {  // the threads started before run at the old priority, or count for
      stopAll();                           // the old role (Note [Host CPU by role])
      nice_ = nice;
      role_ = role;
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      while (static_cast<int>(threads_.size()) < parts - 1) {
        const int part = static_cast<int>(threads_.size()) + 1;
        threads_.emplace_back([this, part, role = role_] {
          const cpu::ThreadRole counted(role);  // the caller's (Note [Host CPU by role])
          loop(part);
        });
      }
      fn_ = &fn;
      parts_ = parts;
      running_ = parts - 1;
      ++generation_;
    }
    start_.notify_all();
    fn(0);
    std::unique_lock<std::mutex> lock(mutex_);
    done_.wait(lock, [&] { return running_ == 0; });
    fn_ = nullptr;
    busy_ = false;
  }
  static bool inPoolThread() { return inPool_; }

 private:
  void loop(int part) {
    inPool_ = true;
    std::uint64_t seen = 0;
    std::unique_lock<std::mutex> lock(mutex_);
    while (true) {
      start_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      if (part >= parts_) continue;  // not needed by this pass
      const auto* fn = fn_;
      lock.unlock();
      (*fn)(part);
      lock.lock();
      if (--running_ == 0) done_.notify_one();
    }
  }
  void stopAll() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    start_.notify_all();
    for (auto& t : threads_) t.join();
    threads_.clear();
    stop_ = false;
  }

  std::mutex mutex_;
  std::condition_variable start_, done_;
  std::vector<std::thread> threads_;  // threads_[i] runs part i + 1
  const std::function<void(int part)>* fn_ = nullptr;
  int parts_ = 0, running_ = 0;
  std::uint64_t generation_ = 0;
  bool stop_ = false;
  bool busy_ = false;  // the owning thread's alone
  int nice_ = 0;
  cpu::Role role_ = cpu::Role::kOther;
  static thread_local bool inPool_;
};

thread_local bool PartThreads::inPool_ = false;

}  // namespace

void forEachPart(int parts, const std::function<void(int part)>& fn) {
  if (parts <= 1) {
    if (parts == 1) fn(0);
    return;
  }
  thread_local PartThreads pool;
  if (!pool.busy() && !PartThreads::inPoolThread()) return pool.run(parts, fn);
  std::vector<std::thread> others;  // re-entered: threads of its own
  others.reserve(static_cast<std::size_t>(parts - 1));
  for (int part = 1; part < parts; ++part) {
    others.emplace_back([&fn, part, role = cpu::currentRole()] {
      const cpu::ThreadRole counted(role);
      fn(part);
    });
  }
  fn(0);
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

template <typename T>
void* Zeroed<T>::allocateZeroed(std::size_t bytes, int threads) {
  void* data = std::malloc(bytes);
  if (data == nullptr) {
    RP_THROW(SystemError, "malloc of {} bytes ({:.2f} GB) failed: the host is out of memory", bytes,
             static_cast<double>(bytes) / 1e9);
  }
  fillZero(data, bytes, threads);
  return data;
}
template class Zeroed<float>;
template class Zeroed<std::uint8_t>;

}  // namespace rp::parallel
