// The one step loop (docs/training.md, "The step loop"), shared by the single-process trainer and the
// pipeline runtime: the effective config, the refusal of another run's checkpoints, epochs, preemption at a
// step boundary, the checkpoint cadence and the final save, metrics.jsonl, the progress line, the divergence
// message and the samples before and after. Each side provides the primitives of a step through Executor.
// Thread-safety: one thread (the rank's main thread).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "checkpoint/saver.h"
#include "config/run_config.h"
#include "control/channel.h"
#include "run/preemption.h"
#include "trace/metrics.h"

namespace rp::run {

// Who writes checkpoints from this rank: the channel of every writer (collective), or null for a single
// writer; this rank's world rank for messages and fault points.
struct CheckpointWriters {
  control::ControlChannel* channel = nullptr;
  int worldRank = 0;
};

// The evaluation loss of a model (run/evaluation.h).
struct EvalResult {
  double loss = 0.0;  // mean over the target tokens
  std::int64_t targetTokens = 0;
};

class Executor {
 public:
  virtual ~Executor() = default;

  // Steps already done (> 0 when resumed from a checkpoint).
  virtual std::int64_t startStep() const = 0;
  // The data stream's current epoch, and the tokens it emits in one (every document once: the packer's rows
  // carry no padding, so an epoch ends after that many tokens of rows; 0 where unknown).
  virtual std::int64_t epoch() const = 0;
  virtual std::int64_t tokensPerEpoch() const = 0;
  // Whether this rank reports: writes the effective config and metrics.jsonl, prints progress and samples.
  virtual bool reports() const = 0;
  // This rank's place among the checkpoint writers, or nullopt where it writes none.
  virtual std::optional<CheckpointWriters> checkpointWriters() const = 0;

  // Runs iteration `step` and returns true, or returns false when the job stops before it: `signal` (0 =
  // none) is the preemption signal this rank received, and the job decides together (every rank returns the
  // same).
  virtual bool step(std::int64_t step, int signal) = 0;
  // After step() returned false: the signal that stopped the job and the rank it reached (reporting rank).
  virtual StopCause stopCause() const = 0;
  // The metrics of the steps finished since the last call, in order, with their step times (reporting rank;
  // a step may finish after later steps started).
  virtual std::vector<trace::StepMetrics> finished() = 0;
  // The state after `steps` steps, staged for the saver; nullopt on a rank that writes no checkpoint (it
  // still takes part: every rank calls snapshot at the same steps).
  virtual std::optional<checkpoint::SaveJob> snapshot(std::int64_t steps) = 0;
  // After the last iteration (`steps` run in all): returns once every started step has finished.
  virtual void drain(std::int64_t steps) = 0;
  // After the final save: makes the final weights current (for sampling and export), writes traces.
  virtual void finish() = 0;
  // After finish(), on the reporting rank: the run's bubble ratio from its bubble report (pipeline runs).
  virtual std::optional<double> bubbleRatio() const { return std::nullopt; }
  // A greedy sample from the current weights (reporting rank only).
  virtual std::string sample(const std::string& prompt) = 0;
  // The evaluation loss of the weights after `steps` steps (run/evaluation.h), on the reporting rank;
  // nullopt elsewhere and without evaluation data. Every rank calls it at the same steps.
  virtual std::optional<EvalResult> evaluate(std::int64_t steps) = 0;
  // Model FLOPs of one step (run/utilisation.h) and the job's peak FLOP/s; 0 where unknown.
  virtual double modelFlopsPerStep() const = 0;
  virtual double peakFlops() const = 0;
  // What the workers compute on, as metrics rows say it (StepMetrics::device): "emulated:<profile>" marks every
  // output of a run whose device is modelled (docs/emulated.md); empty where rows do not say.
  virtual std::string deviceLabel() const { return {}; }
};

// The step count the run ends at unless stopped: train.max_steps, or fewer where train.epochs ends it first — the
// first step count whose rows reach epoch train.epochs of a stream of `tokensPerEpoch` tokens an epoch (as the
// loop's check of Executor::epoch() finds it; 0 tokens: no such limit known).
std::int64_t plannedSteps(const config::RunConfig& config, std::int64_t tokensPerEpoch);

enum class Outcome { kCompleted, kPreempted };

struct RunResult {
  Outcome outcome = Outcome::kCompleted;
  std::vector<trace::StepMetrics> metrics;  // every reported step (reporting rank; empty elsewhere)
};

// Trains for train.max_steps from executor.startStep() (or until train.epochs), saving checkpoints per
// checkpoint.*. A preemption signal (run/preemption.h) stops the run at the next step boundary after a save.
RunResult runLoop(const config::RunConfig& config, Executor& executor);

}  // namespace rp::run
