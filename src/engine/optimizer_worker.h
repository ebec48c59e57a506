// The optimizer thread of one rank: steps AdamW over this rank's slice of every trainable tensor in the node
// store, in the order the RoundPipe reference gives (docs/schedule.md, "Optimizer"):
//   async (staleness k >= 1): as iteration t starts, copy master -> weights version t mod V (W_t, for
//          iteration t+k, once the uploads of the iterations that read that version are done); once it has
//          been issued, take its gradients layer by layer in reverse order as each layer's download lands,
//          clip, update the master to W_{t+1};
//   sync:  take the gradients, clip, update layer by layer from the first, publishing each layer's weights
//          (W_{t+1}) as it is done (Note [Update by layer]); on one node without loss scaling the update reads
//          the gradients from their slots (Note [Gradients read in place]).
// Weights and gradient slots are in the model dtype (float32, bfloat16 or float16), masters and moments in
// float32. fp16: the gradients are of the loss times the loss scale; every rank unscales its slices, and a
// step with a non-finite gradient anywhere is skipped on every rank (the ranks agree by an all-reduce) and
// the scale backs off (optim/loss_scaler.h). Any dtype: a step whose loss or global gradient norm is not
// finite (a diverged step) is skipped on every rank alike (both values are all-reduced); run::runLoop warns
// and stops after train.max_consecutive_skips in a row.
// Steps run in order on one thread; the main thread enqueues them and collects results.
// Thread-safety: enqueue/wait/poll from one (the main) thread.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <c10/core/ScalarType.h>

#include "checkpoint/manifest.h"
#include "checkpoint/slices.h"
#include "common/host_cpu.h"
#include "control/channel.h"
#include "engine/activity.h"
#include "engine/fences.h"
#include "optim/adamw.h"
#include "optim/loss_scaler.h"
#include "optim/lr_schedule.h"
#include "run/moments.h"
#include "trace/timeline.h"

namespace rp::engine {

struct OptimTensor {
  std::string name;
  std::vector<int> layers;             // layers that use it
  std::vector<std::uint8_t*> weights;  // what uploads read, in the model dtype: one per version (frozen: one)
  float* master;                       // fp32 master (trainable, not split): weights[0] itself in float32 sync runs
  // Per version, one gradient slot per layer in `layers`, model dtype (trainable only).
  std::vector<std::vector<std::uint8_t*>> slots;
  std::size_t numel;
  bool trainable;
  std::vector<std::int64_t> shape;  // for checkpoints
  std::uint16_t* masterLow = nullptr;  // a split master's low words (Note [Split master]): weights[0] is its rest
};

struct OptimizerOptions {
  optim::AdamWConfig adamw;
  int threads = 0;  // optimizer threads (optim.threads; 0: the rank's share of the cores, common/parallel.h)
  optim::LrSchedule schedule;
  double gradClip = 0.0;
  int staleness = 1;  // 0 = sync; k: V = k versions of weights and slots (Note [Layer fences])
  c10::ScalarType dtype = c10::ScalarType::Float;      // of the weights and gradient slots
  std::optional<optim::LossScalerConfig> lossScaling;  // fp16
  int layers = 0;
  std::vector<const double*> losses;  // V + 1 buffers of per-microbatch loss sums (rank 0 reads them)
  int microbatches = 0;
  trace::Timeline* timeline = nullptr;           // optional: spans on thread 1
  ActivityBoard* activity = nullptr;             // optional: what this thread is doing, for the stall inspector
  control::ControlChannel* crossNode = nullptr;  // multi-node: sums gradients and losses over the nodes
  // Multi-node: this rank keeps the AdamW moments of 1/N of its slice (its shard; Note [Sharded optimizer]).
  bool shardAcrossNodes = false;
  // bfloat16, sync, unsharded: the trainable tensors' masters are split (OptimTensor::masterLow).
  bool splitMaster = false;
};

struct OptimizerResult {
  std::int64_t step = 0;
  double gradNorm = 0.0;
  double lr = 0.0;
  double lossSum = 0.0;                            // the iteration's summed token loss
  bool skipped = false;                            // no update: fp16 overflow, or a non-finite loss or norm
  double lossScale = 0.0;                          // fp16: the scale the iteration's gradients carry
  double lossScaleAfter = 1.0;                     // fp16: the scale after this step's update
  std::chrono::steady_clock::time_point finished;  // when the step completed on this rank
  cpu::HostCpu hostCpu;                            // the rank's CPU time by role then (cumulative)
  // Node rank 0: each node rank's resident peak (MB) when the step completed (several nodes: the largest
  // over them); empty elsewhere.
  std::vector<double> rankPeakMb;
};

// Whether the optimizer reads the gradient of a trainable tensor used by `uses` layers straight from its slots,
// keeping no float32 copy of it (Note [Gradients read in place]): in sync runs on one node without loss scaling,
// from one or two bfloat16 slots or one float32 slot. For the host-memory check too.
bool gradientsInPlace(int staleness, bool crossNode, bool lossScaling, c10::ScalarType dtype, std::size_t uses);

class OptimizerWorker {
 public:
  // Collective over `node` (and options.crossNode): the thread gets duplicates of its own. This rank owns
  // slice node.rank() of node.size() of every tensor.
  OptimizerWorker(std::vector<OptimTensor> tensors, Fences& fences, OptimizerOptions options,
                  control::ControlChannel& node);
  ~OptimizerWorker();

  // Iteration `step` starts; `uploadsAfter[l]`: how many uploads of layer l the iterations up to and including
  // `step` that read its weights version make in all (the count depends on each iteration's plan). Async: queues
  // the copy of W_step into that version, which waits for those uploads (Note [Copy as the iteration starts]).
  void beginIteration(std::int64_t step, std::vector<std::int64_t> uploadsAfter);
  // Queues step `step`'s update; it takes the iteration's gradients as their downloads land.
  void enqueue(std::int64_t step);
  // Blocks until `step` is done; rethrows the thread's error.
  OptimizerResult waitFor(std::int64_t step);
  // Results finished since the last call, in order.
  std::vector<OptimizerResult> poll();
  // Copies this rank's slice of every master into every version of the weights (after the last step, or to
  // resume without saved weights).
  void publishMasters();
  // The loss scale iteration `step` multiplies its loss by: 1 unless fp16; then the scale after step
  // step - 1 - k (the latest every rank knows when the iteration starts: sync step - 1, async step - 2),
  // waiting for that step's gradient check (not its update) if needed.
  double lossScaleFor(std::int64_t step);

  // Checkpoints (docs/checkpoint-format.md): this rank's part of the state after `steps` steps — the masters,
  // the AdamW moments and, when `withWeights`, the weights iterations steps .. steps + V - 1 upload (named
  // checkpoint::weightsAhead) of its slice of every trainable tensor — as float32 slices pointing into the
  // store and the optimizer (bf16/fp16 weights: into a float32 staging copy; after reading a checkpoint into
  // them, restoreStagedWeights() writes them back; once a save has copied them, releaseStagedWeights() frees
  // them; split masters, too, go through float32 staging, and a save takes their tie bits out of the moments until
  // the release). Only while the thread is idle (every enqueued step waited for). Sharded across nodes, a save takes
  // the shard of everything (the nodes together write each element once) and a restore the whole slice of the
  // masters and weights (every node holds them whole) and the shard of the moments. The moments are float32 or
  // 8-bit codes and absmax (run/moments.h); moments `saved` holds in the other width are left out, and
  // restoreStagedWeights() reads and converts them from checkpoint `dir`.
  enum class Purpose { kSave, kRestore };
  std::vector<checkpoint::Slice> stateSlices(std::int64_t steps, bool withWeights, Purpose purpose,
                                             const checkpoint::Manifest* saved = nullptr);
  void restoreStagedWeights(const std::filesystem::path& dir, const checkpoint::Manifest& saved);
  void releaseStagedWeights();
  // Split masters (Note [Split master]): where this rank's slices have their tie bits set, as (tensor index,
  // element of the tensor). Only while the thread is idle.
  std::vector<std::pair<std::uint64_t, std::uint64_t>> tieBits() const;
  // This rank's optimizer state in its own memory: the float32 gradient slices (those not read in place) and the
  // AdamW moments.
  std::size_t stateBytes() const;
  std::int64_t stepCount() const { return adamw_.stepCount(); }
  void restoreStepCount(std::int64_t steps) { adamw_.restoreStepCount(steps); }
  // fp16 (else null): the scaler's state after the last step; restoreScaler sets it for a run resumed at
  // step `start`.
  const optim::LossScaler* scaler() const { return scaler_.get(); }
  void restoreScaler(double scale, std::int64_t goodSteps, std::int64_t skippedSteps, std::int64_t start);

 private:
  void loop();
  struct Work {
    enum class Kind { kCopy, kUpdate } kind;
    std::int64_t step;
    std::vector<std::int64_t> uploadsAfter;  // kCopy
  };
  struct Stopped {};  // thrown out of a fence's wait when the worker is destroyed meanwhile
  OptimizerResult runStep(std::int64_t t);
  // Master -> weights version t mod V, each layer published as it is copied; `uploadsAfter` (async): each
  // tensor first waits for that many uploads of every layer using it from that version.
  void copyMasters(std::int64_t t, const std::vector<std::int64_t>* uploadsAfter);
  // Between a fence's polls: throws Stopped once the destructor has begun.
  void stopPoint() const;
  // Master -> weights version `version` of tensor i's slice, rounded to the model dtype.
  void copyMaster(std::size_t i, int version);
  // Tensor i's gradient read from its slots (Note [Gradients read in place]).
  optim::GradIn slotGradient(std::size_t i) const;
  // Sync: the update of step t layer by layer, each layer's weights published as it is done (Note [Update by
  // layer]).
  void updateByLayer(std::int64_t t, const optim::AdamW::Step& step);
  // Unscales this rank's gradient slices; false if any rank's hold a non-finite value.
  bool unscaleAndCheck(double scale);
  // Sharded: every node's updated shards of the masters, gathered so that every node holds them whole.
  void gatherMasters(std::int64_t step);
  // Collective over the node (and across nodes): OptimizerResult::rankPeakMb.
  std::vector<double> gatherPeaks();
  // The scale after step `step` (< the thread's current step), or the starting scale before the first.
  double scaleAfter(std::int64_t step);

  std::vector<OptimTensor> tensors_;
  Fences& fences_;
  OptimizerOptions options_;
  int rank_, ranks_;
  int versions_;                                             // max(1, staleness)
  std::unique_ptr<control::ControlChannel> node_;            // a duplicate of the node's channel, for this thread
  std::unique_ptr<control::ControlChannel> crossNode_;       // a duplicate of options.crossNode, for this thread
  std::vector<std::pair<std::size_t, std::size_t>> slices_;  // this rank's [begin, end) of each tensor
  // Sharded across nodes: each node's part of every slice, in node order (empty: not sharded), and this rank's
  // (offset in the slice, count) — the whole slice when not sharded.
  std::vector<std::vector<std::size_t>> shardCounts_;
  std::vector<std::pair<std::size_t, std::size_t>> shards_;
  // This rank's slice of each trainable tensor's gradient (sharded: after the exchange, its shard's sum is at
  // the front); empty for a gradient read in place (Note [Gradients read in place]).
  std::vector<parallel::ZeroedFloats> grads_;  // zeroed on the optimizer threads (Note [Parallel first touch])
  std::vector<bool> inPlace_;                  // by tensor: its gradient is read from its slots
  bool anyInPlace_ = false;                    // a layer's slots are consumed after its update, not its widening
  // Note [Norm while widening]: each gradient's blocks' sums of squares, taken at its last widening of the step.
  std::vector<std::vector<double>> blockSums_;
  bool normWhileWidening_ = false;
  struct StagedWeights {  // checkpoints of bf16/fp16 weights, as float32
    std::size_t tensor;
    int version;
    std::size_t begin;  // the first element
    std::vector<float> values;
  };
  std::deque<StagedWeights> stagedWeights_;  // a deque: slices point into its elements
  // Split masters (Note [Split master]) as float32 for a checkpoint, by AdamW parameter index; and, while a save
  // copies the moments, the tie bits taken out of v.
  std::deque<std::pair<std::size_t, std::vector<float>>> stagedMasters_;
  std::vector<std::pair<std::size_t, std::vector<std::size_t>>> takenTies_;
  run::MomentSlices moments_;  // a restore's moments in the other width
  optim::AdamW adamw_;
  int threads_ = 1;         // of every pass over the slices (Note [Optimizer threads])
  bool sharded_ = false;    // options.shardAcrossNodes over more than one node
  bool fusedCopy_ = false;  // sync bf16/fp16: AdamW writes the rounded weights in its pass (one version)
  // Sync, not sharded: the update runs layer by layer (Note [Update by layer]). Group l holds the trainable
  // tensors whose shallowest layer is l, as AdamW parameter indices and as tensor indices: the update by layer
  // and every copy of the masters go group by group (Note [Upload as published]).
  bool byLayer_ = false;
  struct LayerGroup {
    std::vector<std::size_t> params, tensors;
  };
  std::vector<LayerGroup> layerGroups_;
  std::unique_ptr<optim::LossScaler> scaler_;
  std::int64_t scalerStart_ = 0;  // the first step this scaler ran (the resumed step)
  double startScale_ = 1.0;

  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<Work> queue_;
  // fp16: the loss scale after each recent step, as soon as the step has checked its gradients (scaleAfter).
  // Iterations ask for steps at most staleness + 1 <= 9 back.
  static constexpr std::size_t kScalesKept = 16;
  static constexpr int kOptimizerNice = 10;  // Note [Optimizer priority]: a tenth of a nice-0 thread's weight
  std::deque<std::pair<std::int64_t, double>> scales_;
  std::vector<OptimizerResult> done_;
  std::size_t polled_ = 0;
  std::exception_ptr error_;
  bool stop_ = false;
  std::atomic<bool> stopping_{false};  // stop_, for the fence waits of the thread (stopPoint)
  std::thread thread_;
};

}  // namespace rp::engine
