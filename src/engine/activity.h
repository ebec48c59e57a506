// What every rank's threads are doing now, in the node store, for the stall inspector: when a wait times
// out, the message names the late rank and its last operation (docs/protocol.md, "Failure semantics").
// Each (rank, thread) slot is written by one thread and read by any, under a sequence lock whose text is
// itself atomic words (relaxed), so a read that overlaps a write is a retry, not a data race.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

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

 private:
  struct Slot {
    std::atomic<std::uint64_t> sequence;
    std::atomic<std::int64_t> sinceUs;
    std::atomic<std::uint64_t> text[14];  // 112 bytes of text, NUL-terminated
  };
  static_assert(std::atomic<std::uint64_t>::is_always_lock_free, "the board lives in shared memory");
  Slot& slot(int rank, int thread) const;
  Slot* slots_;
  int ranks_;
};

// A world rank for a stall or failure message: its last operations where it shares this node's board, else
// where it runs ("rank 5 runs on node 1 (host b)").
std::string describeWorldRank(const ActivityBoard& board, const WorldIdentity& id, int worldRank);

}  // namespace rp::engine
