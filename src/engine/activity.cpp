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
  return sizeof(Slot) * static_cast<std::size_t>(ranks * kThreads) +
         sizeof(std::atomic<std::int64_t>) * static_cast<std::size_t>(ranks);
}

ActivityBoard::ActivityBoard(void* memory, int ranks)
    : slots_(static_cast<Slot*>(memory)),
      beats_(reinterpret_cast<std::atomic<std::int64_t>*>(slots_ + static_cast<std::ptrdiff_t>(ranks * kThreads))),
      ranks_(ranks) {}

// Note [Heartbeats]
// A rank whose process does not run (kill -STOP, a debugger's breakpoint, a machine so oversubscribed that it gets no
// CPU) makes its peers wait in whatever they wait on next, often for another rank that waits for it: the stall
// message named the rank waited for, which was running. Every rank beats on a thread of its own every 0.1 s; a wait
// that times out names each rank of its node silent for 2 s or more. A rank stuck inside an operation still beats
// (it runs, it does not progress): the waits name it as they did. Ranks of other nodes share no board; their
// stalls are named by the waits alone.
void ActivityBoard::beat(int rank) {
  beats_[rank].store(nowUs(), std::memory_order_relaxed);
}

std::vector<std::pair<int, double>> ActivityBoard::silent(double seconds) const {
  std::vector<std::pair<int, double>> out;
  const std::int64_t now = nowUs();
  for (int r = 0; r < ranks_; ++r) {
    const std::int64_t last = beats_[r].load(std::memory_order_relaxed);
    const double ago = static_cast<double>(now - last) / 1e6;
    if (last > 0 && ago >= seconds) out.emplace_back(r, ago);  // 0: never beat; -1: ended its run
  }
  return out;
}

std::string ActivityBoard::silentRanks(const std::function<int(int)>& rankName) const {
  std::string out;
  for (const auto& [rank, ago] : silent(kSilentSeconds)) {
    out += fmt::format(
        "\n  rank {} has not run for {:.1f} s (its heartbeat stopped: the process is stopped, by SIGSTOP or a "
        "debugger, gets no CPU, or was killed): the stall starts there",
        rankName ? rankName(rank) : rank, ago);
  }
  return out;
}

void ActivityBoard::ended(int rank) {
  beats_[rank].store(-1, std::memory_order_relaxed);
}

Heartbeat::Heartbeat(ActivityBoard& board, int rank) : board_(board), rank_(rank) {
  board.beat(rank);
  thread_ = std::thread([this] {
    std::unique_lock<std::mutex> lock(mutex_);
    while (!wake_.wait_for(lock, std::chrono::duration<double>(ActivityBoard::kBeatSeconds), [&] { return stop_; })) {
      board_.beat(rank_);
    }
  });
}

Heartbeat::~Heartbeat() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_one();
  thread_.join();
  board_.ended(rank_);  // a rank that ended its run is not reported as stopped
}

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

namespace {

std::string describeLocal(const ActivityBoard& board, const WorldIdentity& id, int worldRank) {
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

}  // namespace

std::string describeWorldRank(const ActivityBoard& board, const WorldIdentity& id, int worldRank) {
  return describeLocal(board, id, worldRank) + board.silentRanks([&](int local) {
    for (std::size_t r = 0; r < id.places.size(); ++r) {
      if (id.places[r].node == id.node && id.places[r].localRank == local) return static_cast<int>(r);
    }
    return local;
  });
}

}  // namespace rp::engine
