#include "run/loop.h"

#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>

#include "checkpoint/directory.h"
#include "common/error.h"
#include "common/host_cpu.h"
#include "common/log.h"
#include "common/resident_memory.h"
#include "run/evaluation.h"
#include "run/preemption.h"
#include "run/setup.h"
#include "trace/progress.h"
#include "trace/tensorboard.h"

namespace rp::run {
namespace {

// docs/training.md, "Non-finite steps": a skipped step is named (fp16 overflows are routine and are not);
// train.max_consecutive_skips of them in a row stop the run. A step that was not skipped yet has a
// non-finite loss would have poisoned the weights: the run stops at once.
// `lastCheckpoint()`: the newest checkpoint's step, 0 when there is none to go back to.
void countSkips(const config::RunConfig& c, const trace::StepMetrics& m, std::int64_t& skippedInRow,
                const std::function<std::int64_t()>& lastCheckpoint) {
  if (!m.skipped) {
    if (!std::isfinite(m.loss)) {
      RP_THROW(Error, "step {}: loss is {} (diverged); lower optim.lr or check the data", m.step, m.loss);
    }
    skippedInRow = 0;
    return;
  }
  ++skippedInRow;
  if (!m.lossScale) {
    RP_LOG_WARN("step {}: loss {}, gradient norm {}: not finite, the update is skipped on every rank", m.step, m.loss,
                m.gradNorm);
  }
  if (c.train.maxConsecutiveSkips > 0 && skippedInRow >= c.train.maxConsecutiveSkips) {
    const std::int64_t first = m.step - skippedInRow + 1;
    RP_THROW(Error,
             "{}: skipped {} step{} in a row ({}); stopping (train.max_consecutive_skips = {}): lower optim.lr or "
             "check the data, then {}",
             first == m.step ? fmt::format("step {}", first) : fmt::format("steps {}-{}", first, m.step), skippedInRow,
             skippedInRow == 1 ? "" : "s",
             m.lossScale ? "fp16 overflow at every loss scale" : "non-finite loss or gradients",
             c.train.maxConsecutiveSkips,
             lastCheckpoint() > 0 ? fmt::format("--resume from the checkpoint of step {}", lastCheckpoint())
                                  : std::string("start the run again (no checkpoint was saved to resume from)"));
  }
}

// A run that train.epochs ends before train.max_steps: said once at the start, with what it does to a decaying
// learning-rate schedule, which runs over max_steps (docs/training.md).
void sayWhereTheEpochsEnd(const config::RunConfig& c, std::int64_t planned, std::int64_t tokensPerEpoch) {
  if (planned >= c.train.maxSteps) return;
  std::string schedule;
  if (c.optim.schedule != "constant") {
    schedule = fmt::format(
        "; the {} learning-rate schedule runs over train.max_steps and stops at {:.0f}% of its course (set "
        "train.max_steps = {} to run all of it)",
        c.optim.schedule, 100.0 * static_cast<double>(planned) / static_cast<double>(c.train.maxSteps), planned);
  }
  RP_LOG_INFO("train.epochs = {} ends the run after step {} of train.max_steps = {} ({} tokens an epoch, {} a step){}",
              c.train.epochs, planned, c.train.maxSteps, tokensPerEpoch, c.train.globalBatch * c.train.seqLen,
              schedule);
}

}  // namespace

// An epoch ends as its last token is packed (the packer's epoch moves on at once), and every step packs
// global_batch rows of seq_len tokens without padding: after k steps the stream is in epoch
// floor(k * rows * seq_len / tokensPerEpoch), so the loop stops before the first k where that reaches
// train.epochs.
std::int64_t plannedSteps(const config::RunConfig& c, std::int64_t tokensPerEpoch) {
  if (c.train.epochs <= 0 || tokensPerEpoch <= 0) return c.train.maxSteps;
  const std::int64_t perStep = c.train.globalBatch * c.train.seqLen;
  const std::int64_t steps = (c.train.epochs * tokensPerEpoch + perStep - 1) / perStep;
  return std::min(c.train.maxSteps, steps);
}

RunResult runLoop(const config::RunConfig& c, Executor& executor) {
  const cpu::ThreadRole counted(cpu::Role::kEngine);  // the rank's main thread (Note [Host CPU by role])
  RunResult result;
  const bool reports = executor.reports();
  const checkpoint::CheckpointDir checkpoints(c.checkpoint.dir);
  std::unique_ptr<trace::MetricsWriter> metrics;
  std::unique_ptr<trace::TensorBoardWriter> tensorboard;
  std::unique_ptr<trace::Progress> progress;
  // Note [Emulated checkpoints]: an emulated device trains nothing; what the host computes from its weights (the
  // evaluation, the samples) says so.
  const std::string device = executor.deviceLabel();
  const std::string untrained =
      trace::modelledDevice(device) ? fmt::format(" [{}: untrained weights]", device) : std::string();
  if (reports) {
    writeEffectiveConfig(c);
    checkpoints.removeStale();
    metrics = std::make_unique<trace::MetricsWriter>(c.output.dir, executor.startStep());
    if (c.metrics.tensorboard) {
      // An emulated device's scalars go under its own name, never beside a real device's (docs/metrics.md).
      tensorboard = std::make_unique<trace::TensorBoardWriter>(
          (std::filesystem::path(c.output.dir) / "tb").string(), executor.startStep(),
          trace::modelledDevice(device) ? device + "/" : std::string());
    }
    const std::int64_t planned = plannedSteps(c, executor.tokensPerEpoch());
    sayWhereTheEpochsEnd(c, planned, executor.tokensPerEpoch());
    progress = std::make_unique<trace::Progress>(planned, c.output.logEvery);
    if (!c.output.samplePrompt.empty()) {
      std::printf("sample before: %s%s\n", executor.sample(c.output.samplePrompt).c_str(), untrained.c_str());
    }
  }
  std::unique_ptr<checkpoint::Saver> saver;
  if (const auto writers = executor.checkpointWriters()) {
    saver = std::make_unique<checkpoint::Saver>(
        checkpoints,
        checkpoint::SaverOptions{static_cast<int>(c.checkpoint.keep), c.checkpoint.stopOnError, c.checkpoint.async,
                                 writers->worldRank},
        writers->channel);
  }
  std::int64_t skippedInRow = 0;         // fp16 overflow skips count too (a loss scale that never recovers)
  std::int64_t emptySteps = 0;           // steps with no target tokens (docs/training.md, "Steps without targets")
  std::string outputFailed;              // metrics.jsonl or the events file could not be written: stop, after saving
  std::map<std::int64_t, double> evals;  // evaluation losses by step, until the step's metrics are written
  // For advice: the newest checkpoint on disk (a save that failed, or is still being written, is not there), else
  // the step the run resumed from; 0 for none.
  const std::function<std::int64_t()> lastCheckpoint = [&]() -> std::int64_t {
    try {
      if (const auto newest = checkpoints.newest()) {
        return std::stoll(newest->filename().string().substr(std::string("step-").size()));
      }
    } catch (const std::exception&) {  // unreadable: the advice falls back to what the run knows
    }
    return executor.startStep();
  };
  std::int64_t evaluated = -1;  // the last step evaluated
  auto evaluate = [&](std::int64_t steps) {
    evaluated = steps;
    const auto r = executor.evaluate(steps);
    if (!r) return;
    evals[steps] = r->loss;
    RP_LOG_INFO("step {}: eval loss {:.4f} (perplexity {:.2f}) on {} tokens{}", steps, r->loss, std::exp(r->loss),
                r->targetTokens, untrained);
  };
  const double stepFlops = executor.modelFlopsPerStep(), peak = executor.peakFlops();
  auto report = [&] {
    for (trace::StepMetrics& m : executor.finished()) {
      if (!reports) continue;
      m.peakResidentMb = static_cast<double>(readResidentMemory().peakBytes) / 1e6;
      if (stepFlops > 0 && m.stepTimeSeconds > 0) {
        m.modelTflops = stepFlops / m.stepTimeSeconds / 1e12;
        if (peak > 0) m.mfu = stepFlops / m.stepTimeSeconds / peak;
      }
      if (const auto e = evals.find(m.step); e != evals.end()) {
        m.evalLoss = e->second;
        evals.erase(e);
      }
      try {
        if (outputFailed.empty()) metrics->write(m);
        if (tensorboard && outputFailed.empty()) tensorboard->write(m);
      } catch (const SystemError& e) {  // a full disk: the run stops at the next step boundary, saved
        if (outputFailed.empty()) RP_LOG_ERROR("{}: stopping at the next step boundary, with a checkpoint", e.what());
        outputFailed = e.what();
      }
      progress->update(m);
      result.metrics.push_back(m);
      countSkips(c, m, skippedInRow, lastCheckpoint);
      if (m.targetTokens == 0 && ++emptySteps == 1) {
        RP_LOG_WARN(
            "step {} had no target tokens: every row of its batch was prompt (a prompt longer than "
            "train.seq_len fills a row, its reply follows in the next), so its loss is 0 and its gradients "
            "are zero; such steps are marked \"no_targets\" in metrics.jsonl, counted at the end",
            m.step);
      }
    }
  };
  auto save = [&](std::int64_t steps) {
    auto job = executor.snapshot(steps);
    if (saver && job) saver->save(std::move(*job));
  };

  std::int64_t steps = executor.startStep(), saved = steps;
  if (reports && steps >= c.train.maxSteps) {
    RP_LOG_WARN("the run is at step {} and train.max_steps = {}: nothing to train (raise train.max_steps to go on)",
                steps, c.train.maxSteps);
  }
  for (; steps < c.train.maxSteps; ++steps) {
    if (c.train.epochs > 0 && executor.epoch() >= c.train.epochs) {
      if (reports) RP_LOG_INFO("reached train.epochs = {} after {} steps", c.train.epochs, steps);
      break;
    }
    // Slurm and mpirun deliver SIGTERM/SIGUSR1 to every rank; the executor makes the decision the job's. Output
    // that could not be written stops the job the same way: every rank at this step boundary, saved.
    if (!executor.step(steps, outputFailed.empty() ? preemptionSignal() : SIGTERM)) {
      result.outcome = Outcome::kPreempted;
      break;
    }
    if (evalDue(c, steps + 1)) evaluate(steps + 1);
    report();
    if (c.checkpoint.every > 0 && (steps + 1) % c.checkpoint.every == 0) {
      save(steps + 1);
      saved = steps + 1;
      report();
    }
    if (saver) saver->check();
  }
  executor.drain(steps);
  // A run that ended early (train.epochs) is evaluated where it ended; a preempted one is not.
  if (result.outcome == Outcome::kCompleted && steps > executor.startStep() && evaluated != steps) evaluate(steps);
  report();
  // The last step is saved (checkpoint.at_end): it is what roundpipe_export and a later --resume start from. A
  // preempted run saves whatever that says: the signal asked for it; so does one stopped because its metrics
  // could not be written (a full disk): its checkpoint publishes atomically or not at all.
  if (steps > saved && (c.checkpoint.atEnd || result.outcome == Outcome::kPreempted)) save(steps);
  if (saver) saver->finish();
  executor.finish();
  if (tensorboard && outputFailed.empty()) {
    if (const auto bubbles = executor.bubbleRatio()) tensorboard->write(steps, {{"pipeline/bubble_ratio", *bubbles}});
  }
  if (!outputFailed.empty()) {
    RP_THROW(SystemError, "{}; the run stopped after step {} (its checkpoint: the lines above)", outputFailed, steps);
  }
  if (reports) {
    progress.reset();
    if (emptySteps > 0) {
      RP_LOG_WARN(
          "{} of the run's {} steps had no target tokens and trained nothing (\"no_targets\" in {}): raise "
          "train.seq_len above the longest prompts, or shorten them",
          emptySteps, result.metrics.size(), metrics->path());
    }
    RP_LOG_INFO("metrics written to {}", metrics->path());
    if (result.outcome == Outcome::kPreempted) {
      RP_LOG_WARN("{}: saved the checkpoint of step {} and stopping", describe(executor.stopCause()), steps);
    } else if (!c.output.samplePrompt.empty()) {
      std::printf("sample after:  %s%s\n", executor.sample(c.output.samplePrompt).c_str(), untrained.c_str());
    }
  }
  return result;
}

}  // namespace rp::run
