#include "engine/activity.h"

#include <chrono>
#include <cstring>
#include <iterator>

#include <fmt/format.h>

namespace rp::engine {
namespace {

std::int64_t nowUs() {
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

std::size_t ActivityBoard::regionBytes(int ranks) {
  return sizeof(Slot) * static_cast<std::size_t>(ranks * kThreads);
}

ActivityBoard::ActivityBoard(void* memory, int ranks) : slots_(static_cast<Slot*>(memory)), ranks_(ranks) {}

ActivityBoard::Slot& ActivityBoard::slot(int rank, int thread) const {
  return slots_[static_cast<std::size_t>(rank * kThreads + thread)];
}

// The sequence lock with atomic data (Boehm, "Can seqlocks get along with programming language memory
// models?", 2012): the writer makes the sequence odd, fences, stores the words relaxed, and makes it even
// with release; the reader loads the sequence with acquire, the words relaxed, fences, and checks it again.
void ActivityBoard::set(int rank, int thread, const std::string& text) {
  Slot& s = slot(rank, thread);
  constexpr std::size_t kBytes = sizeof(s.text);
  char bytes[kBytes] = {};
  std::memcpy(bytes, text.data(), std::min(text.size(), kBytes - 1));
  const std::uint64_t seq = s.sequence.load(std::memory_order_relaxed);
  s.sequence.store(seq + 1, std::memory_order_relaxed);  // odd: writing
  std::atomic_thread_fence(std::memory_order_release);
  for (std::size_t w = 0; w < std::size(s.text); ++w) {
    std::uint64_t word = 0;
    std::memcpy(&word, bytes + w * sizeof(word), sizeof(word));
    s.text[w].store(word, std::memory_order_relaxed);
  }
  s.sinceUs.store(nowUs(), std::memory_order_relaxed);
  s.sequence.store(seq + 2, std::memory_order_release);  // even: stable
}

std::string ActivityBoard::describe(int rank) const {
  std::string out = fmt::format("rank {}:", rank);
  for (int thread = 0; thread < kThreads; ++thread) {
    const Slot& s = slot(rank, thread);
    char text[sizeof(s.text)];
    std::int64_t since = 0;
    for (int attempt = 0; attempt < 10000; ++attempt) {
      const auto before = s.sequence.load(std::memory_order_acquire);
      for (std::size_t w = 0; w < std::size(s.text); ++w) {
        const std::uint64_t word = s.text[w].load(std::memory_order_relaxed);
        std::memcpy(text + w * sizeof(word), &word, sizeof(word));
      }
      since = s.sinceUs.load(std::memory_order_relaxed);
      std::atomic_thread_fence(std::memory_order_acquire);
      if (before % 2 == 0 && s.sequence.load(std::memory_order_relaxed) == before) break;
    }
    text[sizeof(text) - 1] = '\0';
    const char* name = thread == 0 ? "worker" : "optimizer";
    if (since == 0) {
      out += fmt::format(" {}: (nothing yet)", name);
    } else {
      out += fmt::format(" {}: {} ({:.1f} s ago)", name, text, static_cast<double>(nowUs() - since) / 1e6);
    }
    if (thread + 1 < kThreads) out += ";";
  }
  return out;
}

std::string ActivityBoard::describeAll() const {
  std::string out;
  for (int r = 0; r < ranks_; ++r) out += (r ? "\n  " : "") + describe(r);
  return out;
}

std::string describeWorldRank(const ActivityBoard& board, const WorldIdentity& id, int worldRank) {
  if (worldRank < 0 || worldRank >= static_cast<int>(id.places.size())) return fmt::format("rank {}", worldRank);
  const RankPlace& p = id.places[static_cast<std::size_t>(worldRank)];
  if (p.node == id.node) {
    std::string text = board.describe(p.localRank);
    // The board numbers the node's ranks locally; the reader knows world ranks.
    if (p.localRank != worldRank) text.replace(0, text.find(':'), fmt::format("rank {}", worldRank));
    return text;
  }
  return fmt::format("rank {} runs on node {} ({})", worldRank, p.node, p.host);
}

}  // namespace rp::engine
