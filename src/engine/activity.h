// What every rank's threads are doing now, in the node store, for the stall inspector: when a wait times
// out, the message names the late rank and its last operation (docs/protocol.md, "Failure semantics"), and any rank
// of the node whose heartbeat stopped (a process stopped by SIGSTOP or a debugger, or starved of CPU).
// Each (rank, thread) slot is written by one thread and read by any, under a sequence lock whose text is
// itself atomic words (relaxed), so a read that overlaps a write is a retry, not a data race.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "world/mpi_session.h"

namespace rp::engine {

class ActivityBoard {
 public:
  static constexpr int kThreads = 2;  // 0 = worker, 1 = optimizer
  static std::size_t regionBytes(int ranks);
  ActivityBoard(void* memory, int ranks);

  void set(int rank, int thread, const std::string& text);
  // "rank 1: worker: fwd 0-2 mb 1 (step 3), 12.0 s ago; optimizer: idle"
  std::string describe(int rank) const;
  std::string describeAll() const;

  // Rank `rank`'s process is running (its Heartbeat thread calls this every kBeatSeconds).
  void beat(int rank);
  // Rank `rank` ended its run (its Heartbeat went): never reported silent.
  void ended(int rank);
  // The ranks that beat once and not for `seconds` since, with how long ago they last did.
  std::vector<std::pair<int, double>> silent(double seconds) const;
  // For stall messages: a line per rank silent kSilentSeconds or more, naming it as `rankName` maps its number on
  // this board (default: as is); "" when every rank runs.
  std::string silentRanks(const std::function<int(int)>& rankName = {}) const;
  static constexpr double kBeatSeconds = 0.1;
  // A rank silent this long is reported as not running (Note [Heartbeats]).
  static constexpr double kSilentSeconds = 2.0;

 private:
  struct Slot {
    std::atomic<std::uint64_t> sequence;
    std::atomic<std::int64_t> sinceUs;
    std::atomic<std::uint64_t> text[14];  // 112 bytes of text, NUL-terminated
  };
  static_assert(std::atomic<std::uint64_t>::is_always_lock_free, "the board lives in shared memory");
  Slot& slot(int rank, int thread) const;
  Slot* slots_;
  std::atomic<std::int64_t>* beats_;  // after the slots: each rank's last beat (steady clock, µs; 0: never)
  int ranks_;
};

// Beats for `rank` every ActivityBoard::kBeatSeconds on a thread of its own, from construction to destruction.
class Heartbeat {
 public:
  Heartbeat(ActivityBoard& board, int rank);
  ~Heartbeat();
  Heartbeat(const Heartbeat&) = delete;
  Heartbeat& operator=(const Heartbeat&) = delete;

 private:
  ActivityBoard& board_;
  int rank_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stop_ = false;
  std::thread thread_;
};

// A world rank for a stall or failure message: its last operations where it shares this node's board, else
// where it runs ("rank 5 runs on node 1 (host b)"); then every rank of this node that is not running (silent).
std::string describeWorldRank(const ActivityBoard& board, const WorldIdentity& id, int worldRank);

}  // namespace rp::engine
