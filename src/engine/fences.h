// Note [Layer fences]: per-layer sequence counters in the node store that order the workers' uploads and
// downloads against the optimizer, across processes (docs/schedule.md, "Fences"). Each counter only grows;
// a waiter spins (with backoff) until it reaches a value, under the stall policy (a warning, then PeerError).
//   uploads[l]      uploads of layer l's weights finished (a layer is uploaded once or twice per iteration)
//   downloads[l]    gradient downloads of layer l finished (one per iteration)
//   copied[l][r]    optimizer steps whose master->weights copy of layer l rank r's slice has finished
//   consumed[l][r]  optimizer steps that took layer l's gradients out of the slots (rank r's slice)
//   fusedDone       iterations whose fused stage finished every microbatch (losses written)
//   fusedStarted    (step, microbatch) the fused stage last started, packed to grow: every stage input of that
//                   microbatch a forward stage saves is in place (Note [Recompute ahead])
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

#include "control/channel.h"

namespace rp::engine {

class Fences {
 public:
  // `memory` points at regionBytes(layers, ranks) zero-initialised bytes in the node store.
  // `board` (optional) names the late rank's last operation in stall messages.
  Fences(void* memory, int layers, int ranks, control::StallPolicy stall, const class ActivityBoard* board = nullptr);
  static std::size_t regionBytes(int layers, int ranks);

  void addUpload(int layer);
  void addDownload(int layer);
  void setCopied(int layer, int rank, std::int64_t steps);
  void setConsumed(int layer, int rank, std::int64_t steps);
  void setFusedDone(std::int64_t iterations);
  void setFusedStarted(std::int64_t step, int microbatch);
  // A run resumed after `steps` iterations: the per-iteration counters (copies, downloads, consumption, fused
  // stage) start there, as if those iterations had run; uploads count from 0 (the runtime's counts are
  // relative to the start). Before any rank starts.
  void startAt(std::int64_t steps);

  void waitUploads(int layer, std::int64_t atLeast) const;
  void waitDownloads(int layer, std::int64_t atLeast) const;
  void waitCopiedByAll(int layer, std::int64_t atLeast) const;    // every rank's slice
  bool copiedByAll(int layer, std::int64_t atLeast) const;        // the same, without waiting
  void waitConsumedByAll(int layer, std::int64_t atLeast) const;  // every rank's slice
  void waitFusedDone(std::int64_t atLeast) const;
  void waitFusedStarted(std::int64_t step, int microbatch) const;

 private:
  std::atomic<std::int64_t>& at(std::size_t index) const;
  // `lateRank` >= 0: the rank whose counter this is (named in the stall message).
  void wait(std::size_t index, std::int64_t atLeast, const std::string& what, int lateRank = -1) const;

  std::atomic<std::int64_t>* base_;
  int layers_, ranks_;
  control::StallPolicy stall_;
  const ActivityBoard* board_;
};

}  // namespace rp::engine
