#include "common/host_cpu.h"

#include <pthread.h>
#include <time.h>

#include <mutex>
#include <vector>

namespace rp::cpu {

// Note [Host CPU by role]: the emulated device's bounds were spans' occupancy — the union of the optimizer's
// spans on rank 0 — which stretch whenever a thread waits or is pre-empted (the node-wide norm's allreduce inside
// "AdamW step", the nice +10 optimizer behind the ranks' main threads on 2 cores), and so came out below the
// steps they bound. What a thread did on a core is its CPU clock (CLOCK_THREAD_CPUTIME_ID, read from another
// thread through pthread_getcpuclockid): the runtime's threads register under what they do — the rank's main
// thread (op dispatch, the engine's bookkeeping, the coordinator) as engine, the optimizer's thread and its part
// threads as optimizer, the copy queue's and the emulated device's completion threads as copies, the readiness
// sender as control — and the process's clock less theirs is everything else (LibTorch's intra-op threads: the
// compute itself on the CPU backend; MPI's and the driver's threads). A wait that spins counts as the work of
// the thread that spins, which is what it costs the host. Each step's difference goes to the trace (a counter per
// rank) and to metrics.jsonl; benchmarks/emulated_gpu.sh makes its host bound from them.
namespace {

struct Entry {
  pthread_t thread;
  clockid_t clock;
  Role role;
  double base;  // its clock when it registered: what it spent before counts as other
};

struct Registry {
  std::mutex mutex;
  std::vector<Entry> live;
  std::array<double, kRoles> ended{};
};

Registry& registry() {
  static Registry* r = new Registry;  // never destroyed: threads may unregister during static destruction
  return *r;
}

thread_local Role tlsRole = Role::kOther;

double secondsOf(clockid_t clock) {
  timespec t{};
  if (clock_gettime(clock, &t) != 0) return 0.0;
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

}  // namespace

const char* roleName(Role role) {
  switch (role) {
    case Role::kEngine:
      return "engine";
    case Role::kOptimizer:
      return "optimizer";
    case Role::kCopies:
      return "copies";
    case Role::kControl:
      return "control";
    case Role::kOther:
      break;
  }
  return "other";
}

ThreadRole::ThreadRole(Role role) : registered_(tlsRole == Role::kOther && role != Role::kOther) {
  if (!registered_) return;
  clockid_t clock{};
  if (pthread_getcpuclockid(pthread_self(), &clock) != 0) clock = CLOCK_THREAD_CPUTIME_ID;
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  r.live.push_back({pthread_self(), clock, role, secondsOf(CLOCK_THREAD_CPUTIME_ID)});
  tlsRole = role;
}

ThreadRole::~ThreadRole() {
  if (!registered_) return;
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  const double own = secondsOf(CLOCK_THREAD_CPUTIME_ID);  // under the lock: a reader never sees it go back
  for (auto it = r.live.begin(); it != r.live.end(); ++it) {
    if (pthread_equal(it->thread, pthread_self())) {
      r.ended[static_cast<std::size_t>(it->role)] += own - it->base;
      r.live.erase(it);
      break;
    }
  }
  tlsRole = Role::kOther;
}

Role currentRole() {
  return tlsRole;
}

HostCpu hostCpu() {
  HostCpu out;
  Registry& r = registry();
  {
    std::lock_guard<std::mutex> lock(r.mutex);
    out.seconds = r.ended;
    for (const Entry& e : r.live) out.seconds[static_cast<std::size_t>(e.role)] += secondsOf(e.clock) - e.base;
  }
  out.process = secondsOf(CLOCK_PROCESS_CPUTIME_ID);
  double registered = 0.0;
  for (std::size_t i = 0; i < kRoles; ++i) {
    if (i != static_cast<std::size_t>(Role::kOther)) registered += out.seconds[i];
  }
  out.seconds[static_cast<std::size_t>(Role::kOther)] = out.process > registered ? out.process - registered : 0.0;
  return out;
}

double roleSeconds(Role role) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  double s = r.ended[static_cast<std::size_t>(role)];
  for (const Entry& e : r.live) {
    if (e.role == role) s += secondsOf(e.clock) - e.base;
  }
  return s;
}

}  // namespace rp::cpu
