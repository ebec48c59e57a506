// The one registry of environment variables roundpipe reads (docs/env.md documents each).
// Reading any other variable, or reading one of these elsewhere with getenv, is a smell.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace rp::env {

struct Var {
  const char* name;
  const char* fallback;  // value when unset
  const char* help;
};

// Where tests find ../shared/fixtures when the checkout is not next to it.
inline constexpr Var kFixturesDir{"RP_FIXTURES_DIR", "", "directory holding the shared test fixtures"};
// Minimum log level: debug, info, warn, error.
inline constexpr Var kLogLevel{"RP_LOG_LEVEL", "info", "minimum log level (debug|info|warn|error)"};
// Intra-op threads per rank for LibTorch CPU compute; 0 = leave LibTorch's default.
inline constexpr Var kNumThreads{"RP_NUM_THREADS", "0", "LibTorch intra-op threads per rank (0 = default)"};
// The AdamW kernel (optim/adamw_simd.h); empty = the fastest the CPU supports.
inline constexpr Var kAdamWKernel{"RP_ADAMW_KERNEL", "", "force the AdamW kernel: scalar|avx2|avx512"};
// Where the golden tests find the files scripts/make_goldens.py wrote.
inline constexpr Var kGoldenDir{"RP_GOLDEN_DIR", "", "directory with golden files from scripts/make_goldens.py"};
// Testing: where a run must test something (the GPU tier on a GPU machine), a missing fixture or golden is a
// failure instead of a skip (tests/support/fixtures.h).
inline constexpr Var kRequireFixtures{"RP_REQUIRE_FIXTURES", "0",
                                      "testing: 1 = a test whose fixtures or goldens are missing fails, not skips"};

// Testing: test binaries report a crash's code and caller (tests/support/crash_report.h).
inline constexpr Var kCrashReport{"RP_CRASH_REPORT", "0", "testing: 1 = test binaries print where they crashed"};

// Set by launch/roundpipe-mpirun for every rank (mpirun -x): a Ctrl-C or SIGTERM reaches the ranks as SIGUSR1,
// so the warning about mpirun's kill timeout does not apply (run/preemption.h).
inline constexpr Var kMpirunWrapper{"RP_MPIRUN_WRAPPER", "", "set by launch/roundpipe-mpirun for its ranks"};

// Testing hook (common/fault.h, Note [Fault injection]); empty = off.
inline constexpr Var kFaultInject{"RP_FAULT_INJECT", "", "testing: kill|throw|hang|nan|oom:<rank>:<step>[:<point>]"};

// Testing and benchmarks (common/fault.h, Note [Slow worker] in device/cpu/cpu_worker.cpp): world ranks whose CPU
// worker computes at a fraction of its pace, "<rank>:<speed>[,<rank>:<speed>...]"; empty = none.
inline constexpr Var kSlowWorker{"RP_SLOW_WORKER", "", "testing: <rank>:<speed in (0,1]>[,...] slows cpu workers"};

// Testing (Note [Hold for prefetch] in engine/job_store_copies.cpp): 1 = a job's last microbatch, and a rank's
// wait for the directive, end only once the weights of the worker's next job are published, where they need no
// gradient of an iteration still to come; 0 = off.
inline constexpr Var kHoldForPrefetch{"RP_HOLD_FOR_PREFETCH", "0",
                                      "testing: 1 = jobs wait for their next job's weights to be published"};

// Testing (Note [Device sanitizer], docs/emulated.md): a stream-ordering mistake put into the engine on purpose,
// which the emulated device must report — activation-without-compute-after, gradient-marks-first-microbatch,
// slot-release-keeps-first-mark, weight-copy-previous-mark, weights-not-awaited; empty = none; only where the
// device sanitizes (the emulated one).
inline constexpr Var kTestMutate{"RP_TEST_MUTATE", "",
                                 "testing: an ordering mistake the emulated device's sanitizer must report"};

// Benchmarks only (docs/benchmarks.md, G1): weights are never copied into the stage slots, so a run measures
// the same compute without its uploads; its losses are meaningless.
inline constexpr Var kBenchNoUploads{"RP_BENCH_NO_UPLOADS", "0",
                                     "benchmarks: 1 = skip weight uploads (losses meaningless)"};

// Node groups: 0 = ranks sharing memory (MPI_Comm_split_type SHARED); N > 0 = consecutive blocks of N
// world ranks, so one host can stand in for several nodes in tests.
inline constexpr Var kRanksPerNode{"RP_RANKS_PER_NODE", "0", "ranks per node group (0 = by shared memory)"};

// Testing (common/resident_memory.h): the host memory a run may use, in MiB, instead of what the host reports;
// 0 = read the host.
inline constexpr Var kHostMemoryMb{"RP_HOST_MEMORY_MB", "0", "testing: pretend this many MiB of host memory are free"};

// The value, or the fallback when unset or empty.
std::string get(const Var& var);
// The value as an integer; throws InputError naming the variable when it is not one.
long getInt(const Var& var);

}  // namespace rp::env
