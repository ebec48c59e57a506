// The optimizer's collectives beyond the node's gradient fences (optimizer_worker.h): the sharded masters'
// all-gather across nodes and every rank's resident peak for the metrics. Part of OptimizerWorker.
#include <cstring>

#include <fmt/format.h>

#include "common/resident_memory.h"
#include "engine/optimizer_worker.h"

namespace rp::engine {

// Note [Sharded optimizer]: with optim.shard_across_nodes every rank's slice is cut once more, into one shard
// per node (ZeRO stage 1 across nodes). The gradient exchange is a reduce-scatter instead of an all-reduce, so
// each rank receives the nodes' sum of its own shard only; the norm's sum of squares is summed over the nodes
// too; AdamW updates the shard, whose moments are the only ones this rank keeps (1/N of the node's); and the
// updated masters are all-gathered, so every node holds W_{t+1} whole — for its uploads (copyMasters), its
// evaluation, sampling and export, exactly as unsharded. A reduce-scatter plus an all-gather of float32 moves
// the bytes an all-reduce moves. Sums are the same additions as the all-reduce's for two nodes (bitwise equal);
// with more, MPI may associate them differently.
void OptimizerWorker::gatherMasters(std::int64_t step) {
  if (options_.activity != nullptr) {
    options_.activity->set(rank_, 1, fmt::format("gather the masters across nodes (step {})", step + 1));
  }
  trace::Timeline::Scope span(options_.timeline, "all-gather masters across nodes", "optimizer", 1);
  std::vector<std::unique_ptr<control::PendingCollective>> gathers;
  for (std::size_t i = 0; i < tensors_.size(); ++i) {
    if (shardCounts_[i].empty()) continue;
    gathers.push_back(
        crossNode_->startAllgather(tensors_[i].master + slices_[i].first, shardCounts_[i], control::Element::kFloat32));
  }
  for (auto& gather : gathers) gather->wait();
}

std::vector<double> OptimizerWorker::gatherPeaks() {
  const double own = static_cast<double>(readResidentMemory().peakBytes) / 1e6;
  std::vector<double> peaks(static_cast<std::size_t>(node_->size()), 0.0);
  const auto parts = node_->gather(&own, sizeof(own), 0);
  for (std::size_t r = 0; r < parts.size(); ++r) std::memcpy(&peaks[r], parts[r].data(), sizeof(double));
  // Every node's rank k holds a zero vector but rank 0's; the max leaves node rank 0s the largest per rank.
  if (crossNode_) crossNode_->allreduce(peaks.data(), peaks.size(), control::Reduce::kMax);
  if (node_->rank() != 0) peaks.clear();
  return peaks;
}

}  // namespace rp::engine
