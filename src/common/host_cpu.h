// The host's CPU time by role (Note [Host CPU by role]): what each of a rank's threads spent on a core, summed by
// what the thread does, read from the kernel's per-thread clocks — work, never span occupancy, so a bound made of
// it cannot exceed what the host did.
// Thread-safety: everything may be called from any thread.
#pragma once

#include <array>
#include <cstddef>

namespace rp::cpu {

// What a thread does. kOther is never registered: it is the process's time outside every registered thread
// (LibTorch's intra-op pool, MPI's and the driver's own threads, the checkpoint writer).
enum class Role { kEngine, kOptimizer, kCopies, kControl, kOther };
inline constexpr std::size_t kRoles = 5;
const char* roleName(Role role);  // "engine", "optimizer", "copies", "control", "other"

// While alive, the calling thread's CPU time counts for `role` (from its registration; before it, as other);
// threads it starts through common/parallel.h count for the same role. At destruction the thread's time stays in
// the role's total.
class ThreadRole {
 public:
  explicit ThreadRole(Role role);
  ~ThreadRole();
  ThreadRole(const ThreadRole&) = delete;
  ThreadRole& operator=(const ThreadRole&) = delete;

 private:
  bool registered_;
};

// The calling thread's role; kOther where it has none.
Role currentRole();

// Cumulative CPU seconds since the process started: each role's (its live threads' and its ended ones'), and the
// process's in all; `seconds[kOther]` is the process less the registered roles.
struct HostCpu {
  std::array<double, kRoles> seconds{};
  double process = 0.0;
  double operator[](Role role) const { return seconds[static_cast<std::size_t>(role)]; }
};
HostCpu hostCpu();
// One role's cumulative CPU seconds (cheaper than hostCpu: its threads' clocks alone).
double roleSeconds(Role role);

}  // namespace rp::cpu
