// The shared step loop (run/loop.h) over a scripted executor: checkpoint cadence and the final save,
// preemption, epochs, late-finishing steps, the divergence message.
#include <cmath>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "common/error.h"
#include "config/run_config.h"
#include "data/packer.h"
#include "run/evaluation.h"
#include "run/loop.h"
#include "support/fixtures.h"

namespace rp::run {
namespace {

class ScriptedExecutor : public Executor {
 public:
  std::int64_t start = 0;
  std::int64_t stopAt = -1;        // step() returns false at this step (the job decided to stop)
  std::int64_t stepsPerEpoch = 0;  // 0: one endless epoch
  std::int64_t epochTokens = 0;    // what tokensPerEpoch() says (0: unknown)
  bool lateByOne = false;          // a step's metrics come after the next step ran (async optimizer)
  double lossAt3 = 1.0;
  std::int64_t skipFrom = -1;        // steps from here on diverge: NaN loss, skipped (the executor's verdict)
  std::int64_t skipTo = -1;          // ... up to here (exclusive; -1: to the end)
  std::vector<double> rankPeaks;     // a pipeline's per-rank resident peaks (MB)
  std::set<std::int64_t> noTargets;  // steps whose rows were all prompt: no target tokens
  std::string device;                // what the workers compute on (deviceLabel)

  std::vector<std::int64_t> ran, snapshots;
  std::vector<std::int64_t> drained;
  int finishes = 0;

  std::int64_t startStep() const override { return start; }
  std::int64_t epoch() const override {
    const std::int64_t done = start + static_cast<std::int64_t>(ran.size());
    return stepsPerEpoch > 0 ? done / stepsPerEpoch : 0;
  }
  std::int64_t tokensPerEpoch() const override { return epochTokens; }
  std::string deviceLabel() const override { return device; }
  bool reports() const override { return true; }
  std::optional<CheckpointWriters> checkpointWriters() const override { return std::nullopt; }
  StopCause stopCause() const override { return {SIGTERM, 1}; }  // as a pipeline's rank 0 learns it
  bool step(std::int64_t step, int signal) override {
    if (step == stopAt || signal != 0) return false;  // a signal stops the job at this boundary, as the real ones
    ran.push_back(step);
    trace::StepMetrics m;
    m.step = step + 1;
    m.loss = step == 3 ? lossAt3 : 1.0;
    if (skipFrom >= 0 && step >= skipFrom && (skipTo < 0 || step < skipTo)) {
      m.loss = std::numeric_limits<double>::quiet_NaN();
      m.skipped = true;
    }
    m.tokens = 10;
    m.targetTokens = noTargets.count(step) ? 0 : 6;
    m.stepTimeSeconds = 0.5;
    m.rankPeakResidentMb = rankPeaks;
    pending_.push_back(m);
    return true;
  }
  std::vector<trace::StepMetrics> finished() override {
    std::vector<trace::StepMetrics> out;
    const std::size_t keep = lateByOne && drained.empty() ? 1 : 0;
    while (pending_.size() > keep) {
      out.push_back(pending_.front());
      pending_.erase(pending_.begin());
    }
    return out;
  }
  std::optional<checkpoint::SaveJob> snapshot(std::int64_t steps) override {
    snapshots.push_back(steps);
    return std::nullopt;
  }
  void drain(std::int64_t steps) override { drained.push_back(steps); }
  void finish() override { ++finishes; }
  std::string sample(const std::string& prompt) override { return prompt; }
  std::optional<EvalResult> evaluate(std::int64_t steps) override {
    evaluatedAt.push_back(steps);
    return EvalResult{0.5 + 0.01 * static_cast<double>(steps), 100};
  }
  std::vector<std::int64_t> evaluatedAt;
  double modelFlopsPerStep() const override { return 2e12; }  // 0.5 s per step: 4 TFLOP/s
  double peakFlops() const override { return 16e12; }         // MFU 25%

 private:
  std::vector<trace::StepMetrics> pending_;
};

config::RunConfig configWith(const std::string& out, std::vector<std::string> extra) {
  std::vector<std::string> sets{"model.path=unused", "data.path=unused", "train.max_steps=7", "output.dir=" + out};
  sets.insert(sets.end(), extra.begin(), extra.end());
  return config::loadRunConfig("", sets);
}

int metricLines(const std::string& out) {
  std::ifstream in(out + "/metrics.jsonl");
  int n = 0;
  for (std::string line; std::getline(in, line);) ++n;
  return n;
}

// The evaluation rows score every token of the set once: the tokens a last row holds past the set's end (the start
// of the packer's reshuffled second pass) have no target (a user counted 15 of 264 target tokens twice).
TEST(Evaluation, RowsScoreEachTokenOnce) {
  config::RunConfig c;
  c.train.seqLen = 8;
  c.train.seed = 3;
  c.eval.maxRows = 100;
  data::TokenizedCorpus eval;
  eval.add({1, 2, 3, 4, 5}, {});
  eval.add({6, 7, 8}, {});
  eval.add({9, 10, 11, 12, 13, 14, 15}, {});  // 15 tokens in two rows; each document's last token has no target
  const auto rows = evalRows(c, eval);
  ASSERT_EQ(rows.size(), 2u);
  std::int64_t targets = 0;
  for (const auto& row : rows) targets += row.targetCount();
  EXPECT_EQ(targets, (5 - 1) + (3 - 1) + (7 - 1));
  EXPECT_EQ(rows[1].targets.back(), data::kNoTarget);
}

TEST(RunLoop, SavesEveryNStepsAndTheLastStep) {
  const std::string out = test::scratchDir();
  ScriptedExecutor e;
  const RunResult r = runLoop(configWith(out, {"checkpoint.every=3"}), e);
  EXPECT_EQ(r.outcome, Outcome::kCompleted);
  EXPECT_EQ(e.ran, (std::vector<std::int64_t>{0, 1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(e.snapshots, (std::vector<std::int64_t>{3, 6, 7}));
  EXPECT_EQ(e.drained, (std::vector<std::int64_t>{7}));
  EXPECT_EQ(e.finishes, 1);
  ASSERT_EQ(r.metrics.size(), 7u);
  EXPECT_EQ(metricLines(out), 7);
  EXPECT_TRUE(std::ifstream(out + "/config.effective.toml").good());
}

TEST(RunLoop, ALastStepOnTheCadenceIsSavedOnce) {
  ScriptedExecutor e;
  runLoop(configWith(test::scratchDir(), {"checkpoint.every=7"}), e);
  EXPECT_EQ(e.snapshots, (std::vector<std::int64_t>{7}));
}

TEST(RunLoop, APreemptedRunSavesWhereItStoppedAndSaysSo) {
  ScriptedExecutor e;
  e.stopAt = 4;
  testing::internal::CaptureStderr();
  const RunResult r = runLoop(configWith(test::scratchDir(), {"checkpoint.every=3"}), e);
  const std::string log = testing::internal::GetCapturedStderr();
  EXPECT_NE(log.find("SIGTERM received by rank 1: saved the checkpoint of step 4 and stopping"), std::string::npos)
      << log;
  EXPECT_EQ(r.outcome, Outcome::kPreempted);
  EXPECT_EQ(e.ran, (std::vector<std::int64_t>{0, 1, 2, 3}));
  EXPECT_EQ(e.snapshots, (std::vector<std::int64_t>{3, 4}));
  EXPECT_EQ(e.drained, (std::vector<std::int64_t>{4}));
}

TEST(RunLoop, AResumedRunContinuesFromItsStep) {
  const std::string out = test::scratchDir();
  ScriptedExecutor e;
  e.start = 5;
  runLoop(configWith(out, {}), e);
  EXPECT_EQ(e.ran, (std::vector<std::int64_t>{5, 6}));
  EXPECT_EQ(e.snapshots, (std::vector<std::int64_t>{7}));
}

// The ETA of a resumed run: the time per step of the steps this run ran, times the steps left (not the time
// since the resume spread over every step since 0).
TEST(RunLoop, AResumedRunsEtaCountsItsOwnSteps) {
  ScriptedExecutor e;
  e.start = 10;  // 0.5 s per step; 119 steps left after step 11
  testing::internal::CaptureStderr();
  runLoop(configWith(test::scratchDir(), {"train.max_steps=130", "output.log_every=1"}), e);
  const std::string log = testing::internal::GetCapturedStderr();
  EXPECT_NE(log.find("step 11/130 "), std::string::npos) << log;
  EXPECT_NE(log.find("ETA 0:59"), std::string::npos) << log;
}

// A metrics file that cannot be written (a full disk: /dev/full) stops the run at the next step boundary, as a
// signal would, with the checkpoint of the steps done saved first, and the error names the file and the reason.
TEST(RunLoop, AMetricsWriteThatFailsStopsTheRunAfterSavingItsCheckpoint) {
  ScriptedExecutor e;
  const std::string out = test::scratchDir();
  std::filesystem::create_directories(out);
  std::filesystem::create_symlink("/dev/full", out + "/metrics.jsonl");
  testing::internal::CaptureStderr();
  try {
    runLoop(configWith(out, {"metrics.tensorboard=false"}), e);
    FAIL() << "expected an error";
  } catch (const SystemError& error) {
    EXPECT_NE(std::string(error.what()).find(out + "/metrics.jsonl: write failed at step 1: No space left on device"),
              std::string::npos)
        << error.what();
    EXPECT_NE(std::string(error.what()).find("the run stopped after step 1"), std::string::npos) << error.what();
  }
  const std::string log = testing::internal::GetCapturedStderr();
  EXPECT_EQ(e.ran, (std::vector<std::int64_t>{0}));        // stopped at the next boundary
  EXPECT_EQ(e.snapshots, (std::vector<std::int64_t>{1}));  // step 1's checkpoint taken
  EXPECT_NE(log.find("stopping at the next step boundary, with a checkpoint"), std::string::npos) << log;
}

// Note [Emulated checkpoints]: an emulated device trains nothing, so the evaluation and the samples, which the host
// computes from the weights, say the weights are untrained.
TEST(RunLoop, AnEmulatedRunsEvaluationAndSamplesSayTheWeightsAreUntrained) {
  ScriptedExecutor e;
  e.device = "emulated:rtx4090x8";
  testing::internal::CaptureStderr();
  testing::internal::CaptureStdout();
  runLoop(configWith(test::scratchDir(), {"train.max_steps=2", "output.sample_prompt=Hi"}), e);
  const std::string out = testing::internal::GetCapturedStdout();
  const std::string log = testing::internal::GetCapturedStderr();
  EXPECT_NE(
      log.find("step 2: eval loss 0.5200 (perplexity 1.68) on 100 tokens [emulated:rtx4090x8: untrained weights]"),
      std::string::npos)
      << log;
  EXPECT_NE(out.find("sample after:  Hi [emulated:rtx4090x8: untrained weights]"), std::string::npos) << out;
}

// The ETA past an hour reads h:mm:ss, and one no run will reach says so (train.max_steps = 2^63 - 1 once printed
// "-35791394:-8").
TEST(RunLoop, AnEtaOfHoursOrBeyondAHundredDaysReadsAsSuch) {
  ScriptedExecutor e;
  e.stopAt = 2;  // 0.5 s per step
  testing::internal::CaptureStderr();
  runLoop(configWith(test::scratchDir(), {"train.max_steps=10001", "output.log_every=1"}), e);
  std::string log = testing::internal::GetCapturedStderr();
  EXPECT_NE(log.find("step 1/10001 "), std::string::npos) << log;
  EXPECT_NE(log.find("ETA 1:23:20"), std::string::npos) << log;  // 10,000 steps x 0.5 s
  ScriptedExecutor forever;
  forever.stopAt = 1;
  testing::internal::CaptureStderr();
  runLoop(configWith(test::scratchDir(), {"train.max_steps=9223372036854775807", "output.log_every=1"}), forever);
  log = testing::internal::GetCapturedStderr();
  EXPECT_NE(log.find("ETA > 100 days"), std::string::npos) << log;
}

TEST(RunLoop, AResumeAtMaxStepsSaysThereIsNothingToTrain) {
  ScriptedExecutor e;
  e.start = 7;
  testing::internal::CaptureStderr();
  runLoop(configWith(test::scratchDir(), {}), e);
  const std::string log = testing::internal::GetCapturedStderr();
  EXPECT_TRUE(e.ran.empty());
  EXPECT_TRUE(e.snapshots.empty()) << "the checkpoint it resumed from is the last one";
  EXPECT_NE(log.find("the run is at step 7 and train.max_steps = 7: nothing to train"), std::string::npos) << log;
}

// Evaluation every eval.every steps and at the last step; the loss goes into that step's metrics record
// (eval_loss, eval_ppl) and its progress line, also when the step's metrics arrive a step late (async).
TEST(RunLoop, EvaluatesEveryNStepsAndAtTheEnd) {
  for (bool late : {false, true}) {
    const std::string out = test::scratchDir();
    ScriptedExecutor e;
    e.lateByOne = late;
    testing::internal::CaptureStderr();
    runLoop(configWith(out, {"eval.every=3"}), e);
    const std::string log = testing::internal::GetCapturedStderr();
    EXPECT_EQ(e.evaluatedAt, (std::vector<std::int64_t>{3, 6, 7}));
    std::ifstream in(out + "/metrics.jsonl");
    std::vector<std::int64_t> withEval;
    for (std::string line; std::getline(in, line);) {
      const auto j = nlohmann::json::parse(line);
      if (!j.contains("eval_loss")) continue;
      const auto step = j.at("step").get<std::int64_t>();
      withEval.push_back(step);
      EXPECT_DOUBLE_EQ(j.at("eval_loss").get<double>(), 0.5 + 0.01 * static_cast<double>(step));
      EXPECT_NEAR(j.at("eval_ppl").get<double>(), std::exp(0.5 + 0.01 * static_cast<double>(step)), 1e-12);
    }
    EXPECT_EQ(withEval, (std::vector<std::int64_t>{3, 6, 7})) << "late=" << late;
    EXPECT_NE(log.find("step 6: eval loss 0.5600 (perplexity 1.75) on 100 tokens"), std::string::npos) << log;
    EXPECT_NE(log.find("| eval 0.5300"), std::string::npos) << log;
  }
}

// Model FLOPs per step over the step time, and over the job's peak: in every record and the progress line.
TEST(RunLoop, ReportsModelFlopsAndMfu) {
  const std::string out = test::scratchDir();
  ScriptedExecutor e;
  testing::internal::CaptureStderr();
  runLoop(configWith(out, {}), e);
  const std::string log = testing::internal::GetCapturedStderr();
  std::ifstream in(out + "/metrics.jsonl");
  int lines = 0;
  for (std::string line; std::getline(in, line); ++lines) {
    const auto j = nlohmann::json::parse(line);
    EXPECT_DOUBLE_EQ(j.at("model_tflops").get<double>(), 4.0) << line;
    EXPECT_DOUBLE_EQ(j.at("mfu").get<double>(), 0.25) << line;
  }
  EXPECT_EQ(lines, 7);
  EXPECT_NE(log.find("| 4 TFLOP/s | MFU 25.0%"), std::string::npos) << log;
}

// Per-rank resident peaks go to metrics.jsonl as they came; the progress line names the largest and its rank.
TEST(RunLoop, ReportsEveryRanksPeakMemory) {
  const std::string out = test::scratchDir();
  ScriptedExecutor e;
  e.rankPeaks = {100.0, 2500.0, 200.0};
  testing::internal::CaptureStderr();
  runLoop(configWith(out, {}), e);
  const std::string log = testing::internal::GetCapturedStderr();
  std::ifstream in(out + "/metrics.jsonl");
  for (std::string line; std::getline(in, line);) {
    const auto j = nlohmann::json::parse(line);
    EXPECT_EQ(j.at("rank_peak_rss_mb").get<std::vector<double>>(), e.rankPeaks) << line;
    EXPECT_GT(j.at("peak_rss_mb").get<double>(), 0.0) << line;  // this process's own
  }
  EXPECT_NE(log.find("| peak 2.5 GB (rank 1)"), std::string::npos) << log;
}

// It also says so as it starts: where the epochs end the run, and what that does to the decaying learning rate.
TEST(RunLoop, StopsAtTheEpochLimit) {
  const config::RunConfig c = configWith(test::scratchDir(), {"train.epochs=2"});
  ScriptedExecutor e;
  e.stepsPerEpoch = 2;
  e.epochTokens = 2 * c.train.globalBatch * c.train.seqLen;
  testing::internal::CaptureStderr();
  runLoop(c, e);
  const std::string log = testing::internal::GetCapturedStderr();
  EXPECT_EQ(e.ran, (std::vector<std::int64_t>{0, 1, 2, 3}));
  EXPECT_EQ(e.snapshots, (std::vector<std::int64_t>{4}));
  EXPECT_EQ(e.evaluatedAt, (std::vector<std::int64_t>{4})) << "evaluated where the run ended";
  EXPECT_NE(log.find("train.epochs = 2 ends the run after step 4 of train.max_steps = 7"), std::string::npos) << log;
  EXPECT_NE(log.find("the cosine learning-rate schedule runs over train.max_steps and stops at 57% of its course "
                     "(set train.max_steps = 4"),
            std::string::npos)
      << log;
  EXPECT_NE(log.find("step 4/4"), std::string::npos) << "the progress counts to where the run ends\n" << log;
}

// plannedSteps against the packer itself: over documents of assorted lengths, the first step count whose rows
// reach epoch E, for row lengths and batches that end an epoch mid-row, mid-step and exactly at a step's end.
TEST(RunLoop, PlannedStepsAreWhereThePackerReachesTheEpochLimit) {
  data::TokenizedCorpus corpus;
  for (int length : {7, 1, 12, 3, 9, 4, 14, 10}) corpus.add(std::vector<std::int32_t>(length, 5), {});  // 60 tokens
  for (const int seqLen : {5, 8, 60}) {
    for (const int rows : {1, 3, 4}) {
      for (const int epochs : {1, 2, 3}) {
        data::Packer packer(corpus, seqLen, 7);
        std::int64_t steps = 0;
        while (packer.cursor().epoch < epochs) {
          packer.next(rows);
          ++steps;
        }
        const config::RunConfig c = configWith(
            "unused", {fmt::format("train.seq_len={}", seqLen), fmt::format("train.global_batch={}", rows),
                       "train.microbatches=1", fmt::format("train.epochs={}", epochs), "train.max_steps=1000"});
        EXPECT_EQ(plannedSteps(c, 60), steps) << seqLen << " tokens x " << rows << " rows, " << epochs << " epochs";
      }
    }
  }
  EXPECT_EQ(plannedSteps(configWith("unused", {"train.epochs=2"}), 0), 7) << "no epoch size known: max_steps";
  EXPECT_EQ(plannedSteps(configWith("unused", {"train.epochs=0"}), 60), 7) << "no epoch limit: max_steps";
}

TEST(RunLoop, StepsThatFinishLateAreAllReported) {
  const std::string out = test::scratchDir();
  ScriptedExecutor e;
  e.lateByOne = true;
  const RunResult r = runLoop(configWith(out, {}), e);
  ASSERT_EQ(r.metrics.size(), 7u);
  for (std::size_t i = 0; i < r.metrics.size(); ++i) EXPECT_EQ(r.metrics[i].step, static_cast<std::int64_t>(i) + 1);
  EXPECT_EQ(metricLines(out), 7);
}

// A diverged step the executor skipped is reported with a warning naming it, and the run goes on; a run of
// train.max_consecutive_skips of them stops with the steps and what to do.
TEST(RunLoop, SkippedStepsAreNamedAndTooManyInARowStopTheRun) {
  ScriptedExecutor e;
  e.skipFrom = 2;
  e.skipTo = 4;
  testing::internal::CaptureStderr();
  const RunResult r = runLoop(configWith(test::scratchDir(), {"train.max_consecutive_skips=3"}), e);
  const std::string log = testing::internal::GetCapturedStderr();
  EXPECT_EQ(r.outcome, Outcome::kCompleted);
  ASSERT_EQ(r.metrics.size(), 7u);
  EXPECT_TRUE(r.metrics[2].skipped && r.metrics[3].skipped && !r.metrics[4].skipped);
  EXPECT_NE(log.find("step 3: loss nan, gradient norm 0: not finite, the update is skipped on every rank"),
            std::string::npos)
      << log;
  EXPECT_NE(log.find("step 4: loss nan"), std::string::npos) << log;

  ScriptedExecutor diverged;
  diverged.skipFrom = 1;
  try {
    runLoop(configWith(test::scratchDir(), {"train.max_consecutive_skips=3"}), diverged);
    FAIL() << "three skipped steps in a row must stop the run";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what())
                  .find("steps 2-4: skipped 3 steps in a row (non-finite loss or gradients); stopping "
                        "(train.max_consecutive_skips = 3): lower optim.lr or check the data, then start the run "
                        "again (no checkpoint was saved to resume from)"),
              std::string::npos)
        << error.what();
  }
  EXPECT_EQ(diverged.ran, (std::vector<std::int64_t>{0, 1, 2, 3}));
  // With a checkpoint behind it (here the one the run resumed from) the advice names it; it advised --resume when
  // there was none.
  ScriptedExecutor resumed;
  resumed.start = 2;
  resumed.skipFrom = 3;
  try {
    runLoop(configWith(test::scratchDir(), {"train.max_consecutive_skips=2", "train.max_steps=9"}), resumed);
    FAIL() << "two skipped steps in a row must stop the run";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("then --resume from the checkpoint of step 2"), std::string::npos)
        << error.what();
  }
}

// docs/training.md, "Steps without targets": a step whose rows were all prompt trains nothing; it is marked in
// metrics.jsonl and on the progress line, the first is warned of, and the count is given at the end.
TEST(RunLoop, StepsWithoutTargetTokensAreMarkedWarnedOnceAndCounted) {
  ScriptedExecutor e;
  e.noTargets = {1, 2, 5};
  const std::string out = test::scratchDir();
  testing::internal::CaptureStderr();
  const RunResult r = runLoop(configWith(out, {"output.log_every=1"}), e);
  const std::string log = testing::internal::GetCapturedStderr();
  ASSERT_EQ(r.metrics.size(), 7u);
  std::ifstream in(out + "/metrics.jsonl");
  std::vector<std::int64_t> marked;
  for (std::string line; std::getline(in, line);) {
    const auto j = nlohmann::json::parse(line);
    if (j.value("no_targets", false)) marked.push_back(j.at("step").get<std::int64_t>());
  }
  EXPECT_EQ(marked, (std::vector<std::int64_t>{2, 3, 6}));
  EXPECT_NE(log.find("step 2 had no target tokens: every row of its batch was prompt"), std::string::npos) << log;
  EXPECT_EQ(log.find("step 3 had no target tokens"), std::string::npos) << log;  // once
  EXPECT_NE(log.find("step 3/7 | loss"), std::string::npos) << log;
  EXPECT_NE(log.find("(no target tokens)"), std::string::npos) << log;
  EXPECT_NE(log.find("3 of the run's 7 steps had no target tokens and trained nothing"), std::string::npos) << log;
}

TEST(RunLoop, ANonFiniteLossStopsTheRunWithTheStep) {
  ScriptedExecutor e;
  e.lossAt3 = std::numeric_limits<double>::quiet_NaN();
  try {
    runLoop(configWith(test::scratchDir(), {}), e);
    FAIL() << "a NaN loss must stop the run";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("step 4: loss is nan (diverged)"), std::string::npos) << error.what();
  }
}

}  // namespace
}  // namespace rp::run
