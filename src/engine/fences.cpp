#include "engine/fences.h"

#include <chrono>
#include <functional>
#include <thread>

#include <fmt/format.h>

#include "common/backoff.h"
#include "common/error.h"
#include "control/channel.h"
#include "engine/activity.h"

namespace rp::engine {

static_assert(std::atomic<std::int64_t>::is_always_lock_free, "fences need lock-free 64-bit atomics in shared memory");

// Layout: uploads[V][L] | downloads[V][L] | copied[L][R] | consumed[L][R] | fusedDone[V+1] | fusedStarted
std::size_t Fences::regionBytes(int layers, int ranks, int versions) {
  const auto L = static_cast<std::size_t>(layers), R = static_cast<std::size_t>(ranks),
             V = static_cast<std::size_t>(versions);
  return sizeof(std::atomic<std::int64_t>) * (2 * V * L + 2 * L * R + V + 2);
}

namespace {
// fusedStarted packs (step, microbatch + 1) so that it only grows; microbatches stay below 2^20.
constexpr int kMicrobatchBits = 20;
std::int64_t packStarted(std::int64_t step, int microbatch) {
  RP_CHECK(microbatch >= -1 && microbatch + 1 < (1 << kMicrobatchBits), "microbatch {} out of range", microbatch);
  return (step << kMicrobatchBits) + microbatch + 1;
}
// Iterations 0..steps-1 that fall on `slot` of `slots` (slot = iteration mod slots).
std::int64_t countOn(std::int64_t steps, std::int64_t slot, std::int64_t slots) {
  return steps / slots + (slot < steps % slots ? 1 : 0);
}
}  // namespace

Fences::Fences(void* memory, int layers, int ranks, control::StallPolicy stall, const ActivityBoard* board,
               int versions)
    : base_(static_cast<std::atomic<std::int64_t>*>(memory)),
      layers_(layers),
      ranks_(ranks),
      versions_(versions),
      stall_(stall),
      board_(board) {
  RP_CHECK(versions >= 1, "fences need at least one version, got {}", versions);
}

std::atomic<std::int64_t>& Fences::at(std::size_t index) const {
  return base_[index];
}
std::size_t Fences::uploadsAt(int l, std::int64_t step) const {
  return static_cast<std::size_t>((step % versions_) * layers_ + l);
}
std::size_t Fences::downloadsAt(int l, std::int64_t step) const {
  return static_cast<std::size_t>((versions_ + step % versions_) * layers_ + l);
}
std::size_t Fences::copiedAt(int l, int r) const {
  return static_cast<std::size_t>(2 * versions_ * layers_ + l * ranks_ + r);
}
std::size_t Fences::consumedAt(int l, int r) const {
  return static_cast<std::size_t>(2 * versions_ * layers_ + layers_ * ranks_ + l * ranks_ + r);
}
std::size_t Fences::fusedDoneAt(std::int64_t step) const {
  return static_cast<std::size_t>(2 * versions_ * layers_ + 2 * layers_ * ranks_ + step % (versions_ + 1));
}
std::size_t Fences::fusedStartedAt() const {
  return static_cast<std::size_t>(2 * versions_ * layers_ + 2 * layers_ * ranks_ + versions_ + 1);
}

void Fences::addUpload(int l, std::int64_t step) {
  at(uploadsAt(l, step)).fetch_add(1, std::memory_order_acq_rel);
}
void Fences::addDownload(int l, std::int64_t step) {
  at(downloadsAt(l, step)).fetch_add(1, std::memory_order_acq_rel);
}
void Fences::setCopied(int l, int r, std::int64_t steps) {
  at(copiedAt(l, r)).store(steps, std::memory_order_release);
}
void Fences::setConsumed(int l, int r, std::int64_t steps) {
  at(consumedAt(l, r)).store(steps, std::memory_order_release);
}
// Iterations on one loss buffer run in order (iteration t + V + 1's uploads follow step t), so a store suffices.
void Fences::setFusedDone(std::int64_t step) {
  at(fusedDoneAt(step)).store(step / (versions_ + 1) + 1, std::memory_order_release);
}
void Fences::setFusedStarted(std::int64_t step, int microbatch) {
  at(fusedStartedAt()).store(packStarted(step, microbatch), std::memory_order_release);
}

void Fences::startAt(std::int64_t steps) {
  for (int l = 0; l < layers_; ++l) {
    for (int v = 0; v < versions_; ++v) {
      at(downloadsAt(l, v)).store(countOn(steps, v, versions_), std::memory_order_release);
    }
    for (int r = 0; r < ranks_; ++r) {
      setCopied(l, r, steps);
      setConsumed(l, r, steps);
    }
  }
  for (int b = 0; b <= versions_; ++b) at(fusedDoneAt(b)).store(countOn(steps, b, versions_ + 1));
  setFusedStarted(steps, -1);
}

void Fences::wait(std::size_t index, std::int64_t atLeast, const std::string& what, int lateRank,
                  const std::function<void()>& meanwhile) const {
  if (at(index).load(std::memory_order_acquire) >= atLeast) return;
  Backoff backoff(std::chrono::microseconds(200));  // Note [Polling backoff]
  control::waitOrStall(
      stall_,
      [&](control::ControlChannel::Deadline deadline) {
        while (at(index).load(std::memory_order_acquire) < atLeast) {
          if (std::chrono::steady_clock::now() > deadline) return false;
          if (meanwhile) meanwhile();
          backoff.pause();
        }
        return true;
      },
      [&] { return fmt::format("{} to reach {} (it is {})", what, atLeast, at(index).load()); },
      board_ == nullptr
          ? std::function<std::string()>()
          : [&] { return (lateRank >= 0 ? board_->describe(lateRank) : board_->describeAll()) + board_->silentRanks(); });
}

std::string Fences::versionOf(std::int64_t step) const {
  return versions_ == 1 ? "" : fmt::format(" (version {})", step % versions_);
}

void Fences::waitUploads(int l, std::int64_t step, std::int64_t n, const std::function<void()>& meanwhile) const {
  wait(uploadsAt(l, step), n, fmt::format("the uploads of layer {}{}", l, versionOf(step)), -1, meanwhile);
}
void Fences::waitDownloads(int l, std::int64_t step, const std::function<void()>& meanwhile) const {
  wait(downloadsAt(l, step), step / versions_ + 1,
       fmt::format("step {}'s gradient download of layer {}{}", step + 1, l, versionOf(step)), -1, meanwhile);
}
void Fences::waitDownloadsPatiently(int l, std::int64_t step, const std::function<void()>& meanwhile) const {
  const std::size_t index = downloadsAt(l, step);
  Backoff backoff(std::chrono::microseconds(200));  // Note [Polling backoff]
  while (at(index).load(std::memory_order_acquire) < step / versions_ + 1) {
    meanwhile();
    backoff.pause();
  }
}
bool Fences::downloaded(int l, std::int64_t step) const {
  return at(downloadsAt(l, step)).load(std::memory_order_acquire) >= step / versions_ + 1;
}
void Fences::waitCopiedByAll(int l, std::int64_t n) const {
  for (int r = 0; r < ranks_; ++r) wait(copiedAt(l, r), n, fmt::format("rank {}'s weight copy of layer {}", r, l), r);
}
void Fences::forEachCopiedByAll(int begin, int end, std::int64_t n, const std::function<void(int)>& each) const {
  for (int l = begin; l < end; ++l) {
    waitCopiedByAll(l, n);
    each(l);
  }
}
bool Fences::copiedByAll(int l, std::int64_t n) const {
  for (int r = 0; r < ranks_; ++r) {
    if (at(copiedAt(l, r)).load(std::memory_order_acquire) < n) return false;
  }
  return true;
}

void Fences::waitConsumedByAll(int l, std::int64_t n) const {
  for (int r = 0; r < ranks_; ++r) {
    wait(consumedAt(l, r), n, fmt::format("rank {}'s optimizer taking layer {}'s gradients", r, l), r);
  }
}
bool Fences::consumedByAll(int l, std::int64_t n) const {
  for (int r = 0; r < ranks_; ++r) {
    if (at(consumedAt(l, r)).load(std::memory_order_acquire) < n) return false;
  }
  return true;
}
void Fences::waitFusedDone(std::int64_t step) const {
  wait(fusedDoneAt(step), step / (versions_ + 1) + 1, fmt::format("step {}'s fused stage", step + 1));
}
void Fences::waitFusedStarted(std::int64_t step, int microbatch) const {
  wait(fusedStartedAt(), packStarted(step, microbatch),
       fmt::format("the fused stage starting microbatch {} of step {} (packed)", microbatch, step + 1));
}

}  // namespace rp::engine
