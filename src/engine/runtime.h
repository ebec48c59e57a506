// The RoundPipe runtime (docs/schedule.md), on each node of the job (nodes are data-parallel replicas): every rank is a
// worker; model state lives in the node store; each iteration's stage jobs are dispatched round-robin and executed on
// the workers' replicas, activations and gradients handed off through the tensor plane (transport/) with one readiness
// message per (job, microbatch) to the next job's worker; the node's ranks then share the AdamW update.
// The optimizer runs on a thread per rank, ordered with the iterations by per-layer fences (fences.h): in sync
// mode (optim.mode = "sync") the next iteration uploads each layer once its update is done (Note [Update by
// layer]); in async mode the next iterations compute on weights optim.staleness steps old.
// It runs under the shared step loop (run/loop.h) as its Executor.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "checkpoint/saver.h"
#include "common/host_cpu.h"
#include "common/resident_memory.h"
#include "config/run_config.h"
#include "control/channel.h"
#include "coordinator/coordinator.h"
#include "data/corpus.h"
#include "data/packer.h"
#include "data/tokenizer.h"
#include "device/host_waits.h"
#include "device/worker.h"
#include "engine/activity.h"
#include "engine/costs.h"
#include "engine/fences.h"
#include "engine/job_executor.h"
#include "engine/optimizer_worker.h"
#include "engine/parts.h"
#include "engine/pipeline_model.h"
#include "engine/stage_slots.h"
#include "memory/node_store.h"
#include "run/checkpointing.h"
#include "run/loop.h"
#include "schedule/dispatch.h"
#include "schedule/plan.h"
#include "trace/metrics.h"
#include "trace/timeline.h"

namespace rp::engine {

class PipelineRuntime : public run::Executor {
 public:
  // Collective over parts.node and parts.world: every rank of the job constructs its runtime together.
  PipelineRuntime(config::RunConfig config, RuntimeParts parts);
  ~PipelineRuntime() override;

  // run::runLoop over this runtime: trains for train.max_steps (from the checkpoint's step when resuming);
  // returns the per-step metrics on rank 0 (empty on other ranks) and writes metrics.jsonl there. Saves
  // checkpoints (checkpoint.*).
  std::vector<trace::StepMetrics> run();
  // A preemption signal (run/preemption.h) stopped run() after saving.
  bool preempted() const { return preempted_; }

  // run::Executor. A preemption is rank 0's decision, sent with its next directive.
  std::int64_t startStep() const override { return startStep_; }
  std::int64_t epoch() const override { return packer_->cursor().epoch; }
  std::int64_t tokensPerEpoch() const override { return static_cast<std::int64_t>(corpus_.tokens.size()); }
  bool reports() const override { return leader_; }
  std::optional<run::CheckpointWriters> checkpointWriters() const override;
  bool step(std::int64_t step, int signal) override;
  run::StopCause stopCause() const override;
  std::vector<trace::StepMetrics> finished() override;
  std::optional<checkpoint::SaveJob> snapshot(std::int64_t steps) override;
  void drain(std::int64_t steps) override;
  void finish() override;
  std::string sample(const std::string& prompt) override;
  std::optional<run::EvalResult> evaluate(std::int64_t steps) override;
  double modelFlopsPerStep() const override;
  double peakFlops() const override;
  std::string deviceLabel() const override { return deviceLabel_; }

  std::optional<double> bubbleRatio() const override { return bubbleRatio_; }
  const schedule::Plan& plan() const { return plan_; }
  // How many times rank 0's directives changed the plan during the run (re-planning, pipeline.replan_every).
  int planChanges() const { return planChanges_; }
  // A tensor's current weights in the store (a copy), by HF/PEFT name: a trainable one's float32 master. Split
  // masters (Note [Split master]) only on local rank 0 after finish(), which gathers the ranks' tie bits.
  torch::Tensor storeWeight(const std::string& name) const;

 private:
  struct StepSize {
    std::int64_t tokens, targets, epoch;
    device::HostWaitCounts waits{};  // this rank's issuing thread's blocking waits in the step (device/host_waits.h)
    std::int64_t jobs = 0;           // the stage jobs this rank ran in the step
    // The device's own account of the iteration (emulated: Note [Emulated device]), in ms; none elsewhere.
    std::optional<double> deviceBusyMs{}, linkUpMs{}, linkDownMs{};
  };
  void placeWorker();
  // The model the stage jobs compute with: the emulated device's meta twin, else the one model.
  PipelineModel& jobModel() { return deviceModel_ ? *deviceModel_ : *model_; }
  void checkEmulatable() const;
  // The device's spans of the iteration (emulated): on the trace's device track, and summed into `size`.
  void recordDeviceSpans(std::int64_t step, StepSize& size);

  // The node store, its fences and the optimizer; returns the tensor plane (for the job executor).
  std::unique_ptr<transport::TensorChannel> buildStore();
  // Stops every rank with a clear error where this node cannot hold the store and the optimizer state.
  void checkHostMemory(double storeBytes);
  // optim.shard_across_nodes over more than one node (Note [Sharded optimizer]).
  bool shardedAcrossNodes() const { return config_.optim.shardAcrossNodes && id_.nodeCount > 1; }
  // Where the trainable tensors' masters live (docs/optimizer.md, "Split masters"). With optim.split_master in a
  // sync, unsharded run, whose update writes the weights the next iteration uploads: bfloat16, split into the
  // weights and a low word (optim/adamw.h, Note [Split master]); float32, the weights themselves. Otherwise a
  // float32 master of their own.
  enum class Masters { kOwn, kSplit, kWeights };
  Masters masters() const {
    if (!config_.optim.splitMaster || config_.optim.async() || shardedAcrossNodes()) return Masters::kOwn;
    if (model_->dtype() == torch::kBFloat16) return Masters::kSplit;
    return model_->dtype() == torch::kFloat ? Masters::kWeights : Masters::kOwn;
  }
  bool splitMasters() const { return masters() == Masters::kSplit; }
  void runStep(std::int64_t step, const coordinator::Directive& directive);
  void publishInitialWeights();
  void bindToStore();               // every tensor of the model onto its weights in the store
  std::size_t tensorBytes() const;  // one activation hand-off
  torch::Tensor storeTensor(const std::string& region, at::IntArrayRef shape, torch::ScalarType dtype) const;
  // Writes this rank's trace, and on rank 0 the merged trace and the bubble report.
  void finishTrace();
  // Checkpoints (runtime_state.cpp): resuming from one.
  void restore(const run::Resume& resume);
  nlohmann::json scalerJson() const;  // fp16: the loss scaler's state for the manifest (else null)
  std::function<std::string(int)> describeWorldRank() const;
  // Rank 0: the measured per-layer times and the last plan, for roundpipe_sim (docs/simulator.md).
  void writeProfile() const;
  control::StallPolicy stallPolicy() const;

  config::RunConfig config_;
  WorldIdentity id_;
  int rank_;  // local rank: the worker index inside this node's pipeline
  int worldRank_;
  bool leader_;  // world rank 0: reports metrics, samples, the trace and the bubble report
  int workers_;  // workers per node
  memory::NodeMemoryFactory nodeMemory_;
  transport::TensorChannelFactory tensorFactory_;
  std::unique_ptr<data::Tokenizer> tokenizer_;
  data::TokenizedCorpus corpus_;
  nlohmann::json identity_;                // the dataset and batch shape, as checkpoints record them (run::runIdentity)
  std::vector<data::PackedRow> evalRows_;  // empty without evaluation data
  std::unique_ptr<data::Packer> packer_;
  std::unique_ptr<PipelineModel> model_;
  std::unique_ptr<PipelineModel> deviceModel_;  // emulated: the meta twin the jobs compute with (jobModel())
  std::unique_ptr<memory::NodeStore> store_;
  std::shared_ptr<void> storePin_;  // the store registered with the worker's device (released before store_)
  std::string storePinned_;         // cuda: whether the pinning held, for the set-up line
  schedule::Plan plan_;             // this iteration's, from rank 0's directive
  int planChanges_ = 0;
  std::optional<double> bubbleRatio_;  // rank 0, after finish(): the bubble report's
  LayerCosts proxyCosts_;              // FLOP-proxy costs: split a backward stage's measured time over its layers
  // Versions of the trainable weights and gradient slots (Note [Layer fences]): max(1, optim.staleness).
  int versions_ = 1;
  // Split masters, on local rank 0 after finish(): the elements whose tie bit is set, by tensor index.
  std::map<std::size_t, std::set<std::uint64_t>> finalTies_;
  // Per version: the uploads of each layer from it, up to the current iteration.
  std::vector<std::vector<std::int64_t>> uploadsAfter_;
  std::int64_t rowsPerMicrobatch_ = 0;
  std::unique_ptr<trace::Timeline> timeline_;
  std::unique_ptr<control::ControlChannel> channel_;         // the node's workers: readiness messages, collectives
  std::unique_ptr<control::ControlChannel> worldChannel_;    // directives and timing reports
  std::unique_ptr<control::ControlChannel> crossNode_;       // same local rank on every node (gradient all-reduce)
  std::unique_ptr<coordinator::Coordination> coordination_;  // plan and dispatch table per iteration
  std::unique_ptr<device::Worker> worker_;                   // the device this rank computes on (its copies)
  torch::Device device_ = torch::kCPU;                       // the worker's, for the tensors a job computes with
  std::string deviceLabel_;  // what metrics rows say it is: cpu, cuda:<name>, emulated:<profile>
  double memoryBudget_ = 0;  // per worker, for the partitioner (0 = unlimited)
  std::unique_ptr<ActivityBoard> activity_;
  std::unique_ptr<Heartbeat> heartbeat_;  // this rank's, on activity_ (Note [Heartbeats])
  std::unique_ptr<Fences> fences_;
  std::unique_ptr<OptimizerWorker> optimizer_;
  std::unique_ptr<JobExecutor> jobs_;             // this rank's stage jobs (after the store: they use its fences)
  std::optional<ResidentMemory> trainingMemory_;  // at the end of training, for the memory report
  std::vector<StepSize> stepSizes_;               // of steps startStep_, startStep_ + 1, ...
  std::int64_t startStep_ = 0;                    // > 0 when resumed
  std::int64_t tokensSeen_ = 0, targetTokensSeen_ = 0;
  std::optional<std::chrono::steady_clock::time_point> lastFinished_;  // the previous step's end (rank 0)
  cpu::HostCpu lastHostCpu_;  // the rank's CPU time by role at the previous step's end
  bool preempted_ = false;
};

}  // namespace rp::engine
