// Note [Layer fences]: per-layer sequence counters in the node store that order the workers' uploads and
// downloads against the optimizer, across processes (docs/schedule.md, "Fences"). Each counter only grows;
// a waiter spins (with backoff) until it reaches a value, under the stall policy (a warning, then PeerError).
// With staleness k >= 2 the store keeps V = k versions of the trainable weights and gradient slots; iteration
// t reads and writes version t mod V (V = 1 otherwise), and the upload and download counters are per version:
//   uploads[v][l]   uploads of layer l's weights from version v finished (once or twice per iteration)
//   downloads[v][l] gradient downloads of layer l into version v finished (one per iteration)
//   copied[l][r]    optimizer steps whose master->weights copy of layer l rank r's slice has finished
//   consumed[l][r]  optimizer steps that took layer l's gradients out of the slots (rank r's slice)
//   fusedDone[b]    fused stages that finished every microbatch (losses written) into loss buffer b:
//                   iteration t writes buffer t mod (V + 1)
//   fusedStarted    (step, microbatch) the fused stage last started, packed to grow: every stage input of that
//                   microbatch a forward stage saves is in place (Note [Recompute ahead])
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>

#include "control/channel.h"

namespace rp::engine {

class Fences {
 public:
  // `memory` points at regionBytes(layers, ranks, versions) zero-initialised bytes in the node store.
  // `board` (optional) names the late rank's last operation in stall messages.
  Fences(void* memory, int layers, int ranks, control::StallPolicy stall, const class ActivityBoard* board = nullptr,
         int versions = 1);
  static std::size_t regionBytes(int layers, int ranks, int versions = 1);

  // Iteration `step` uploaded layer l (from version step mod V) / downloaded its gradients (into that version).
  void addUpload(int layer, std::int64_t step);
  void addDownload(int layer, std::int64_t step);
  void setCopied(int layer, int rank, std::int64_t steps);
  void setConsumed(int layer, int rank, std::int64_t steps);
  void setFusedDone(std::int64_t step);  // iteration `step`'s fused stage finished
  void setFusedStarted(std::int64_t step, int microbatch);
  // A run resumed after `steps` iterations: the per-iteration counters (copies, downloads, consumption, fused
  // stage) start there, as if those iterations had run; uploads count from 0 (the runtime's counts are
  // relative to the start). Before any rank starts.
  void startAt(std::int64_t steps);

  // At least `atLeast` uploads of layer l from the version iteration `step` reads; `meanwhile` (optional) runs
  // between polls.
  void waitUploads(int layer, std::int64_t step, std::int64_t atLeast,
                   const std::function<void()>& meanwhile = {}) const;
  // Iteration `step`'s download of layer l landed; `meanwhile` (optional) runs between polls: the optimizer
  // lets its cross-node gradient exchanges progress there. The optimizer's wait is over a whole iteration (Note
  // [Gradients taken during the backward]): it waits without the stall policy (a late peer is the jobs' waits'
  // to name), and its `meanwhile` ends it when the run stops.
  void waitDownloads(int layer, std::int64_t step, const std::function<void()>& meanwhile = {}) const;
  void waitDownloadsPatiently(int layer, std::int64_t step, const std::function<void()>& meanwhile) const;
  bool downloaded(int layer, std::int64_t step) const;          // waitDownloads without waiting
  void waitCopiedByAll(int layer, std::int64_t atLeast) const;  // every rank's slice
  bool copiedByAll(int layer, std::int64_t atLeast) const;      // the same, without waiting
  // Calls each(l) for the layers [begin, end) in order, each as soon as every rank's copy of it reached
  // `atLeast`, not after the last one's (Note [Upload as published]).
  void forEachCopiedByAll(int begin, int end, std::int64_t atLeast, const std::function<void(int)>& each) const;
  void waitConsumedByAll(int layer, std::int64_t atLeast) const;  // every rank's slice
  bool consumedByAll(int layer, std::int64_t atLeast) const;      // the same, without waiting
  void waitFusedDone(std::int64_t step) const;                    // iteration `step`'s fused stage finished
  void waitFusedStarted(std::int64_t step, int microbatch) const;

 private:
  std::atomic<std::int64_t>& at(std::size_t index) const;
  std::size_t uploadsAt(int layer, std::int64_t step) const;
  std::size_t downloadsAt(int layer, std::int64_t step) const;
  std::size_t copiedAt(int layer, int rank) const;
  std::size_t consumedAt(int layer, int rank) const;
  std::size_t fusedDoneAt(std::int64_t step) const;
  std::size_t fusedStartedAt() const;
  std::string versionOf(std::int64_t step) const;  // " (version v)" in messages when there are several
  // `lateRank` >= 0: the rank whose counter this is (named in the stall message).
  void wait(std::size_t index, std::int64_t atLeast, const std::string& what, int lateRank = -1,
            const std::function<void()>& meanwhile = {}) const;

  std::atomic<std::int64_t>* base_;
  int layers_, ranks_, versions_;
  control::StallPolicy stall_;
  const ActivityBoard* board_;
};

}  // namespace rp::engine
