// The stage-job executor of one rank (docs/schedule.md, "Runtime"): everything that happens to this worker's
// jobs of an iteration and to each of their microbatches — the stage's weights uploaded from the node store
// into a stage slot (or prefetched while the previous job runs), the microbatches' inputs awaited and their
// outputs handed on over the tensor plane, the compute, the recompute ahead of a backward's gradient, the
// gradients downloaded into the store at each layer's mark, and the bookkeeping of the compute marks
// (per-layer timings, read once per iteration) and of the fused stage's losses (read once per job). It owns
// the stage slots, the tensor channel and that bookkeeping; it computes on the rank's worker, which
// PipelineRuntime creates first (the memory budget and the store's pinning come from it). PipelineRuntime is
// the step glue around it: directives, the step's data, the optimizer, checkpoints, traces.
// Thread-safety: the rank's main thread.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "config/run_config.h"
#include "device/worker.h"
#include "engine/activity.h"
#include "engine/costs.h"
#include "engine/emulation.h"
#include "engine/fences.h"
#include "engine/gradient_marks.h"
#include "engine/pipeline_model.h"
#include "engine/router_board.h"
#include "engine/routing_tape.h"
#include "engine/stage_slots.h"
#include "memory/node_store.h"
#include "model/batch.h"
#include "model/libtorch.h"
#include "schedule/dispatch.h"
#include "schedule/plan.h"
#include "trace/timeline.h"
#include "transport/tensor_channel.h"

namespace rp::engine {

// The rows of one step, as microbatches with their attention contexts (every rank builds the same).
struct StepData {
  std::vector<model::Batch> batches;
  std::vector<model::AttentionContext> contexts;
  std::int64_t targets = 0;
  std::int64_t tokens = 0;
};

// What the executor uses and does not own: the run, the model, the node store, its fences and activity board,
// the timeline (may be null), the rank's worker; and the shape of the run.
struct JobContext {
  const config::RunConfig& config;
  PipelineModel& model;
  memory::NodeStore& store;
  Fences& fences;
  ActivityBoard& activity;
  trace::Timeline* timeline;
  device::Worker& worker;
  // Spreads a backward stage's measured time over its layers by cost; its recomputeAhead is how many graphs a
  // backward job recomputes ahead (Note [Recompute ahead within the budget]).
  const LayerCosts& proxyCosts;
  int rank;                      // local rank: the worker index in the node's pipeline
  int worldRank;
  int nodeCount;
  int versions;  // of the trainable weights and gradient slots (Note [Layer fences])
  std::int64_t rowsPerMicrobatch;
};

class JobExecutor {
 public:
  JobExecutor(JobContext context, std::unique_ptr<StageSlots> slots, std::unique_ptr<transport::TensorChannel> tensors);
  ~JobExecutor();  // waits for a prefetch or an upload still in flight (their copies write into the slots)

  // The activation hand-off's shape: [rows per microbatch, seq_len, hidden].
  static std::vector<std::int64_t> activationShape(const config::RunConfig& config, const PipelineModel& model,
                                                   std::int64_t rowsPerMicrobatch);

  // A plan from a directive: the stage slots fit its stages, and forward stages save the input of every
  // backward stage (layer grain: of every layer).
  void setPlan(const schedule::Plan& plan);
  // This worker's jobs of iteration `step` in `table` (roundpipe, gpipe: one after another; 1F1B: its stage's
  // microbatches interleaved), `lossScale` the iteration's (fp16; else 1). `next` (optional): the next
  // iteration's table as it will be unless the plan changes, whose first job of this worker's is prefetched
  // during this iteration's last (Note [Prefetch across iterations]). Returns the number of jobs run.
  std::int64_t runIteration(std::int64_t step, const schedule::DispatchTable& table, const StepData& data,
                            double lossScale, const schedule::DispatchTable* next = nullptr);
  // Waits for a prefetch in flight and forgets it: before anything rewrites the store's weights outside the
  // fences (the final publication), and before the slots are re-sized.
  void dropPrefetch();
  // Tries the prefetch of this worker's next job (Note [Prefetch while waiting for the directive]); false once
  // there is nothing left to try (issued, or no next job known).
  bool tryPrefetchMeanwhile();
  // Testing (RP_HOLD_FOR_PREFETCH): waits until the weights of this worker's next job are published, where they
  // need no gradient of iteration `from` or later (Note [Hold for prefetch]).
  void holdForPrefetch(std::int64_t from) const;
  // This rank's per-layer forward and backward milliseconds in the last iteration, summed over its
  // microbatches (kNotMeasured where it ran none of the layer).
  const std::vector<double>& forwardMs() const { return forwardMs_; }
  const std::vector<double>& backwardMs() const { return backwardMs_; }
  // The most device memory one job's compute held (cuda; for the memory report).
  std::size_t deviceJobPeak() const { return deviceJobPeak_; }
  std::size_t uploadedBytes() const { return uploadedBytes_; }  // weight bytes queued for upload, over the run
  const StageSlots& slots() const { return *slots_; }

 private:
  // A backward job's microbatch recomputed from its saved input: the stage (layer grain: its deepest layer)
  // forward with its graph, ready for the gradient (Note [Recompute ahead]).
  struct Recomputed {
    torch::Tensor input;        // the saved input, requiring its gradient (undefined for layer 0)
    torch::Tensor output;       // the recomputed output
    model::RouterStats router;  // MoE load-balancing loss: the recomputed layers' statistics, in the graph
  };
  void runJob(std::int64_t step, std::int64_t k, const schedule::DispatchTable& table, const StepData& data);
  void runOneFOneB(std::int64_t step, const schedule::DispatchTable& table, const StepData& data);
  // `ahead`: a backward job's microbatch already recomputed (else it is recomputed after the gradient arrives).
  void runMicrobatch(std::int64_t step, std::int64_t k, const schedule::DispatchTable& table, const StepData& data,
                     int mb, Recomputed* ahead = nullptr);
  Recomputed recompute(std::int64_t step, int from, int to, const StepData& data, int mb);
  Recomputed recomputeAhead(std::int64_t step, const schedule::Job& job, const StepData& data, int mb);
  // Runs `run` (`what`: the job, for the message); LibTorch's out-of-memory becomes an InputError naming the job,
  // the step and what to change (Note [Out of worker memory]).
  void namingOutOfMemory(std::int64_t step, const std::string& what, const std::function<void()>& run);
  // Back-propagates `grad` through a recomputed stage, with its layers' share of the load-balancing loss.
  void backPropagate(std::int64_t step, int mb, const Recomputed& r, const torch::Tensor& grad);
  // The MoE router statistics of iteration `step` (Note [Router statistics]); only when auxLoss_.
  RouterBoard routerBoard(std::int64_t step) const;
  // The MoE routing of iteration `step`'s forward stages (Note [Routing tape]); only when moe_.
  RoutingTape routingTape(std::int64_t step) const;
  // The weight of one microbatch's load-balancing loss in the step's objective: 1 / all microbatches.
  double auxWeight() const;
  void upload(std::int64_t step, const schedule::Range& layers);
  // `marks` (optional): each layer's copies wait only for the compute up to its mark (Note [Gradient marks]).
  void download(std::int64_t step, const schedule::Range& layers, const GradientMarks* marks = nullptr);
  // Per tensor of the model, the layer of `layers` its gradient goes with — its first user in the job — or -1
  // (frozen, or not used by these layers).
  std::vector<int> gradientOwners(const schedule::Range& layers) const;
  // Hooks on the layers' owned tensors that mark where each layer's gradients become final.
  std::unique_ptr<GradientMarks> gradientMarks(const schedule::Range& layers);
  // Iteration `step`'s weights of tensor i, into `dst` (its place in stage slot `slot`), after the compute that
  // last read that slot (Note [Slot release]).
  void queueWeight(device::Ticket& ticket, int i, std::int64_t step, void* dst, int slot);
  // The store region of tensor i's weights that iteration `step` reads (frozen tensors have one version).
  std::string weightsOf(int tensor, std::int64_t step) const;
  // A tensor of the tensor plane into worker memory / out of it.
  torch::Tensor fetch(const transport::TensorId& id, at::IntArrayRef shape, int writer);
  void put(const transport::TensorId& id, const torch::Tensor& tensor, const transport::Readers& readers);
  void landPuts(const transport::TensorId* only = nullptr);
  // Note [Prefetch]: which job of this worker comes after job k of `table` (in `next` if none in `table`); its
  // weights are prefetched as soon as they are published (tryPrefetch, after each microbatch).
  void prefetchNext(std::int64_t step, std::int64_t k, const schedule::DispatchTable& table,
                    const schedule::DispatchTable* next);
  void tryPrefetch();
  // Waits for `copy`, trying the prefetch meanwhile (Note [Prefetch while the device computes]).
  void waitPrefetching(const device::Ticket& copy);
  // Whether iteration `step` may upload layers [begin, end) without waiting (upload()'s fences).
  bool publishedFor(std::int64_t step, const schedule::Range& layers) const;
  void resolveTimings();
  void writeLosses(std::int64_t step);
  // Note [Emulated device]: layer l's backward is submitted once `output`'s gradient is ready (a hook on it).
  void expectBackwardAt(const torch::Tensor& output, int l, const model::AttentionContext& ctx);

  const config::RunConfig& config_;
  PipelineModel* model_;
  memory::NodeStore* store_;
  Fences* fences_;
  ActivityBoard* activity_;
  trace::Timeline* timeline_;
  device::Worker* worker_;
  const LayerCosts& proxyCosts_;
  EmulatedCompute emulated_;  // the compute a modelled device is told of (Note [Emulated device])
  int rank_, worldRank_, nodeCount_, versions_;
  std::int64_t rowsPerMicrobatch_;
  torch::Device device_;
  bool auxLoss_;                       // a MoE model trained with its load-balancing loss (docs/moe.md)
  bool moe_;                           // a MoE model: forward stages record their routing (Note [Routing tape])
  bool skipUploads_;                   // RP_BENCH_NO_UPLOADS: benchmarks of the compute without uploads
  bool holdForPrefetch_;               // RP_HOLD_FOR_PREFETCH: Note [Hold for prefetch]
  // RP_TEST_MUTATE (testing): an ordering mistake the emulated device's sanitizer must report (Note [Device
  // sanitizer]); kNone in every run but those tests'.
  enum class TestMutation {
    kNone,
    kActivationWithoutComputeAfter,
    kGradientMarksFirstMicrobatch,
    kSlotReleaseKeepsFirstMark,
    kWeightCopyPreviousMark,
    kWeightsNotAwaited
  };
  static TestMutation testMutation();
  TestMutation mutation_;
  std::int64_t fetches_ = 0;  // Note [Device sanitizer]: fetched inputs, named by their serial
  std::shared_ptr<device::ComputeMark> releasedLast_, releasedBefore_;  // the last two jobs' end marks
  std::unique_ptr<StageSlots> slots_;  // the worker memory its stages are bound to
  int slot_ = 0;                       // the slot of the job running now
  std::unique_ptr<transport::TensorChannel> tensors_;  // activations and gradients between stage jobs
  struct NextJob {
    std::int64_t step, job;
    schedule::Range layers;
  };
  std::optional<NextJob> awaited_;  // this worker's next job, whose weights are not yet published
  struct Prefetch {
    NextJob of;
    int slot;
    device::Ticket ticket;
  };
  std::optional<Prefetch> prefetch_;               // weights of this worker's next job, in flight (not bound yet)
  const schedule::DispatchTable* next_ = nullptr;  // runIteration's `next`, during the iteration
  device::Ticket uploading_;                    // weights of the job starting now, queued as they are published
  std::vector<bool> checkpoint_;                // layers whose input a forward stage saves (backward-stage starts)
  double lossScale_ = 1.0;                      // the loss scale of this iteration (fp16)
  std::int64_t stepTargets_ = 0;                // the iteration's target tokens, over every node (synthetic losses)
  std::vector<double> forwardMs_, backwardMs_;  // this rank's per-layer times in the current iteration
  // A span of compute between two marks on the worker: one layer's forward and/or backward time, or (several
  // layers) a backward time spread over them by cost. Resolved once per iteration (resolveTimings).
  struct Timing {
    std::shared_ptr<device::ComputeMark> from, to;
    int begin, end;
    bool forward, backward;
  };
  std::vector<Timing> timings_;
  // The fused stage's loss sums (float64, on the device) of the current job, by microbatch (writeLosses).
  std::vector<std::pair<int, torch::Tensor>> pendingLosses_;
  // Note [Stream-ordered hand-offs]: this rank's puts in flight with their source tensors, and those of the
  // microbatch running now (its readiness message goes out once they are done).
  struct PutInFlight {
    transport::TensorId id;
    device::Ticket copy;
    torch::Tensor source;
  };
  std::deque<PutInFlight> puts_;
  std::vector<device::Ticket> microbatchPuts_;
  bool downloadsPerLayer_ = false;  // this job downloads each layer in its last microbatch (layer grain)
  std::size_t deviceJobPeak_ = 0;   // the most device memory one job's compute held
  std::size_t uploadedBytes_ = 0;
};

}  // namespace rp::engine
