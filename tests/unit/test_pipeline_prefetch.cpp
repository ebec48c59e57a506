// The prefetch of a worker's next job across iterations (Note [Prefetch across iterations], Note [Prefetch while
// waiting for the directive], Note [One stage for one worker]), with threads as ranks: which jobs find their
// weights prefetched, read from the run's trace, and the run equal to the delayed-update reference. The runs
// hold each job's end and each directive wait until the next job's weights are published (Note [Hold for
// prefetch]), so which jobs find them prefetched does not depend on who was ahead on a loaded machine.
#include <algorithm>
#include <fstream>
#include <regex>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "support/fixtures.h"
#include "support/pipeline_reference.h"
#include "support/thread_ranks.h"
#include "train/trainer.h"

namespace rp::engine {
namespace {

using test::TensorPlane;
using test::ThreadRun;

// The runs of Note [Prefetch across iterations]: `workers` workers holding for their prefetch
// (RP_HOLD_FOR_PREFETCH); async (k = 1), 6 steps, no re-planning, `extra` settings. Checks the losses and weights against the delayed-update reference; returns the run's trace spans
// (complete events) and the model's decoder-layer count.
std::pair<std::vector<nlohmann::json>, int> slowedAsyncRun(const std::string& fixtures,
                                                           const std::vector<std::string>& extra, int workers = 1) {
  const std::string model = fixtures + "/models/tinystories-656k", scratch = test::scratchDir();
  const int layers = nlohmann::json::parse(std::ifstream(model + "/config.json")).at("num_hidden_layers").get<int>();
  auto configAt = [&](const std::string& out) {
    std::vector<std::string> sets = test::equivalenceSettings(model, model, fixtures, out);
    sets.insert(sets.end(), {"optim.staleness=1", "train.max_steps=6", "pipeline.replan_every=0"});
    for (const auto& e : extra) sets.push_back(fmt::format(fmt::runtime(e), layers, layers + 1));
    return config::loadRunConfig("", sets);
  };
  std::vector<std::string> names;
  {
    train::Trainer probe(configAt(scratch + "/reference"));
    for (const auto& [name, param] : probe.trainable()) names.push_back(name);
  }
  ::setenv("RP_HOLD_FOR_PREFETCH", "1", 1);
  const ThreadRun run = test::runOnThreads(configAt(scratch + "/pipeline"), workers, TensorPlane::kHostStaged, names);
  ::unsetenv("RP_HOLD_FOR_PREFETCH");
  EXPECT_EQ(run.metrics.size(), 6u);
  test::expectEqualsDelayedUpdate(configAt(scratch + "/reference"),
                                  {run.metrics, [&](const std::string& n) { return run.weights.at(n); }}, 1e-5);
  const auto trace = nlohmann::json::parse(std::ifstream(scratch + "/pipeline/trace.json"));
  std::vector<nlohmann::json> spans;
  for (const auto& e : trace.at("traceEvents")) {
    if (e.value("ph", "") == "X") spans.push_back(e);
  }
  return {spans, layers};
}

// How many of `jobs` ([ts, ts + dur)) took prefetched weights within them.
int prefetchedWithin(const std::vector<std::pair<double, double>>& jobs, const std::vector<nlohmann::json>& spans) {
  int found = 0;
  for (const auto& [begin, end] : jobs) {
    found += std::any_of(spans.begin(), spans.end(), [&](const nlohmann::json& e) {
      const double t = e.at("ts").get<double>();
      return e.value("name", "") == "wait: prefetched weights" && t >= begin && t < end;
    });
  }
  return found;
}

// Note [Prefetch across iterations] and Note [Copy as the iteration starts]: in async mode the weights of a
// worker's first job of iteration t + 1 are published while iteration t computes, and reach the worker's other
// stage slot during its last job of t. One worker, three jobs an iteration (fwd 0, fused, bwd 0: the fused and
// bwd jobs are prefetched within the iteration); the first job of each of iterations 2..6 finds its weights
// prefetched.
TEST(InProcPipeline, AsyncPrefetchesTheNextIterationsFirstJob) {
  const auto fixtures = test::fixturesDir();
  RP_SKIP_UNLESS(fixtures, "shared fixtures");
  const auto [spans, layers] = slowedAsyncRun(*fixtures, {"pipeline.plan=1 | {} | 1"});
  std::vector<std::pair<double, double>> firstJobs;  // each iteration's job 0 from step 2 on
  int prefetched = 0;
  const std::regex firstJob(R"(job 0: .* \(step ([0-9]+)\))");
  for (const auto& e : spans) {
    const std::string name = e.value("name", "");
    std::smatch m;
    if (std::regex_match(name, m, firstJob) && std::stoi(m[1]) >= 2) {
      firstJobs.emplace_back(e.at("ts").get<double>(), e.at("ts").get<double>() + e.at("dur").get<double>());
    }
    prefetched += name == "wait: prefetched weights" ? 1 : 0;
  }
  ASSERT_EQ(firstJobs.size(), 5u);
  EXPECT_EQ(prefetched, 2 * 6 + 5) << "every job but the first finds its weights prefetched";
  EXPECT_EQ(prefetchedWithin(firstJobs, spans), 5)
      << "an iteration's first job did not find its weights prefetched during the previous iteration";
}

// Note [One stage for one worker]: one worker's automatic plan is one fused stage over every layer, one job an
// iteration, and in async mode each iteration's job finds its weights prefetched during the previous one (Note
// [Prefetch across iterations]; on the CPU the prefetch is tried after each microbatch).
TEST(InProcPipeline, OneWorkerTrainsTheWholeModelAsOneStagePrefetchedAcrossIterations) {
  const auto fixtures = test::fixturesDir();
  RP_SKIP_UNLESS(fixtures, "shared fixtures");
  const auto [spans, layers] = slowedAsyncRun(*fixtures, {});
  const std::regex jobName(R"(job ([0-9]+): (\w+) ([0-9]+)-([0-9]+) \(step ([0-9]+)\))");
  std::vector<std::pair<double, double>> jobs;  // each step's job from step 2 on
  int allJobs = 0;
  for (const auto& e : spans) {
    const std::string name = e.value("name", "");
    std::smatch m;
    if (!std::regex_match(name, m, jobName)) continue;
    ++allJobs;
    EXPECT_EQ(fmt::format("{} {} {}-{}", m[1].str(), m[2].str(), m[3].str(), m[4].str()),
              fmt::format("0 fused 0-{}", layers + 1))
        << "every iteration is one fused job over the embedding, the decoder layers and the head";
    if (std::stoi(m[5]) >= 2) {
      jobs.emplace_back(e.at("ts").get<double>(), e.at("ts").get<double>() + e.at("dur").get<double>());
    }
  }
  EXPECT_EQ(allJobs, 6);
  EXPECT_EQ(prefetchedWithin(jobs, spans), 5)
      << "of the 5 iterations from step 2 on, some did not find their job's weights prefetched";
}

// Note [Prefetch while waiting for the directive]: two workers and one fused stage, so each worker has a job
// every other iteration. Rank 1, idle in iteration t, waits for rank 0's directive of t + 1 while rank 0
// computes t; the weights of its next job (W_t, async) are published meanwhile and must be in its slot when
// the job starts. (Rank 0 decides the directives and does not wait for them: its jobs upload as they start.)
TEST(InProcPipeline, AWorkerWithoutAJobPrefetchesItsNextWhileWaitingForTheDirective) {
  const auto fixtures = test::fixturesDir();
  RP_SKIP_UNLESS(fixtures, "shared fixtures");
  const auto [spans, layers] = slowedAsyncRun(*fixtures, {"pipeline.plan= | {1} | "}, 2);
  const std::regex jobName(R"(job 0: fused 0-[0-9]+ \(step ([0-9]+)\))");
  std::vector<std::pair<double, double>> rank1;  // rank 1's jobs: steps 2, 4, 6
  for (const auto& e : spans) {
    std::smatch m;
    const std::string name = e.value("name", "");
    if (std::regex_match(name, m, jobName) && e.value("pid", -1) == 1) {
      rank1.emplace_back(e.at("ts").get<double>(), e.at("ts").get<double>() + e.at("dur").get<double>());
    }
  }
  ASSERT_EQ(rank1.size(), 3u) << "one fused job a step, every other step on rank 1";
  EXPECT_EQ(prefetchedWithin(rank1, spans), 3) << "some of rank 1's jobs did not find their weights prefetched";
}

}  // namespace
}  // namespace rp::engine
