#include "engine/fences.h"

#include <chrono>
#include <functional>
#include <thread>

#include <fmt/format.h>

#include "common/error.h"
#include "control/channel.h"
#include "engine/activity.h"

namespace rp::engine {

static_assert(std::atomic<std::int64_t>::is_always_lock_free, "fences need lock-free 64-bit atomics in shared memory");

// Layout: uploads[L] | downloads[L] | copied[L*R] | consumed[L*R] | fusedDone | fusedStarted
std::size_t Fences::regionBytes(int layers, int ranks) {
  return sizeof(std::atomic<std::int64_t>) * static_cast<std::size_t>(2 * layers + 2 * layers * ranks + 2);
}

namespace {
// fusedStarted packs (step, microbatch + 1) so that it only grows; microbatches stay below 2^20.
constexpr int kMicrobatchBits = 20;
std::int64_t packStarted(std::int64_t step, int microbatch) {
  RP_CHECK(microbatch >= -1 && microbatch + 1 < (1 << kMicrobatchBits), "microbatch {} out of range", microbatch);
  return (step << kMicrobatchBits) + microbatch + 1;
}
}  // namespace

Fences::Fences(void* memory, int layers, int ranks, control::StallPolicy stall, const ActivityBoard* board)
    : base_(static_cast<std::atomic<std::int64_t>*>(memory)),
      layers_(layers),
      ranks_(ranks),
      stall_(stall),
      board_(board) {}

std::atomic<std::int64_t>& Fences::at(std::size_t index) const {
  return base_[index];
}

void Fences::addUpload(int l) {
  at(static_cast<std::size_t>(l)).fetch_add(1, std::memory_order_acq_rel);
}
void Fences::addDownload(int l) {
  at(static_cast<std::size_t>(layers_ + l)).fetch_add(1, std::memory_order_acq_rel);
}
void Fences::setCopied(int l, int r, std::int64_t steps) {
  at(static_cast<std::size_t>(2 * layers_ + l * ranks_ + r)).store(steps, std::memory_order_release);
}
void Fences::setConsumed(int l, int r, std::int64_t steps) {
  at(static_cast<std::size_t>(2 * layers_ + layers_ * ranks_ + l * ranks_ + r)).store(steps, std::memory_order_release);
}
void Fences::setFusedDone(std::int64_t iterations) {
  at(static_cast<std::size_t>(2 * layers_ + 2 * layers_ * ranks_)).store(iterations, std::memory_order_release);
}
void Fences::setFusedStarted(std::int64_t step, int microbatch) {
  at(static_cast<std::size_t>(2 * layers_ + 2 * layers_ * ranks_ + 1))
      .store(packStarted(step, microbatch), std::memory_order_release);
}

void Fences::startAt(std::int64_t steps) {
  for (int l = 0; l < layers_; ++l) {
    at(static_cast<std::size_t>(layers_ + l)).store(steps, std::memory_order_release);
    for (int r = 0; r < ranks_; ++r) {
      setCopied(l, r, steps);
      setConsumed(l, r, steps);
    }
  }
  setFusedDone(steps);
  setFusedStarted(steps, -1);
}

void Fences::wait(std::size_t index, std::int64_t atLeast, const std::string& what, int lateRank) const {
  if (at(index).load(std::memory_order_acquire) >= atLeast) return;
  auto pause = std::chrono::microseconds(1);
  control::waitOrStall(
      stall_,
      [&](control::ControlChannel::Deadline deadline) {
        while (at(index).load(std::memory_order_acquire) < atLeast) {
          if (std::chrono::steady_clock::now() > deadline) return false;
          std::this_thread::sleep_for(pause);
          pause = std::min(pause * 2, std::chrono::microseconds(200));
        }
        return true;
      },
      [&] { return fmt::format("{} to reach {} (it is {})", what, atLeast, at(index).load()); },
      board_ == nullptr ? std::function<std::string()>()
                        : [&] { return lateRank >= 0 ? board_->describe(lateRank) : board_->describeAll(); });
}

void Fences::waitUploads(int l, std::int64_t n) const {
  wait(static_cast<std::size_t>(l), n, fmt::format("the uploads of layer {}", l));
}
void Fences::waitDownloads(int l, std::int64_t n) const {
  wait(static_cast<std::size_t>(layers_ + l), n, fmt::format("the gradient downloads of layer {}", l));
}
void Fences::waitCopiedByAll(int l, std::int64_t n) const {
  for (int r = 0; r < ranks_; ++r) {
    wait(static_cast<std::size_t>(2 * layers_ + l * ranks_ + r), n,
         fmt::format("rank {}'s weight copy of layer {}", r, l), r);
  }
}
bool Fences::copiedByAll(int l, std::int64_t n) const {
  for (int r = 0; r < ranks_; ++r) {
    if (at(static_cast<std::size_t>(2 * layers_ + l * ranks_ + r)).load(std::memory_order_acquire) < n) return false;
  }
  return true;
}

void Fences::waitConsumedByAll(int l, std::int64_t n) const {
  for (int r = 0; r < ranks_; ++r) {
    wait(static_cast<std::size_t>(2 * layers_ + layers_ * ranks_ + l * ranks_ + r), n,
         fmt::format("rank {}'s optimizer taking layer {}'s gradients", r, l), r);
  }
}
void Fences::waitFusedDone(std::int64_t n) const {
  wait(static_cast<std::size_t>(2 * layers_ + 2 * layers_ * ranks_), n, "the fused stage");
}
void Fences::waitFusedStarted(std::int64_t step, int microbatch) const {
  wait(static_cast<std::size_t>(2 * layers_ + 2 * layers_ * ranks_ + 1), packStarted(step, microbatch),
       fmt::format("the fused stage starting microbatch {} of step {} (packed)", microbatch, step + 1));
}

}  // namespace rp::engine
