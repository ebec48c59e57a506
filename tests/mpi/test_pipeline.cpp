// The pipeline runtime under real mpiexec: with a fixed microbatch count, W workers give the per-step losses
// of the single-process trainer (within 1e-6 relative) and its weights after 5 steps (within 1e-5). The same
// references hold the in-process tier (tests/unit/test_pipeline_inproc.cpp).
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <set>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <gtest/gtest.h>
#include <mpi.h>

#include "common/env.h"
#include "config/run_config.h"
#include "engine/runtime.h"
#include "model/libtorch.h"
#include "mpi_test_session.h"
#include "support/fixtures.h"
#include "support/pipeline_reference.h"
#include "world/mpi_session.h"

namespace rp::engine {
namespace {

int worldRank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

// Shared by the ranks; removed by rank 0 after the last test (tests/mpi/mpi_gtest_main.cpp).
std::string scratch(const std::string& name) {
  const std::string dir =
      (std::filesystem::temp_directory_path() / fmt::format("rp-pipeline-{}-{}", test::jobTag(), name)).string();
  if (worldRank() == 0) test::removeAfterTests(dir);
  return dir;
}

// The output directory of a pipeline run, emptied first (a run refuses a checkpoint.dir holding an earlier
// run's checkpoints). Collective: every rank calls it.
std::string freshScratch(const std::string& name) {
  const std::string dir = scratch(name);
  if (worldRank() == 0) std::filesystem::remove_all(dir);
  MPI_Barrier(MPI_COMM_WORLD);
  return dir;
}

struct Case {
  std::string name;
  std::string model;      // directory
  std::string tokenizer;  // tokenizer.json directory
  std::vector<std::string> extra;
  bool replans = false;  // must re-plan: the first plan comes from a skewed profile the measured times overturn
};

void PrintTo(const Case& c, std::ostream* os) {
  *os << c.name;
}

class Equivalence : public ::testing::TestWithParam<Case> {};

std::vector<std::string> baseConfig(const Case& c, const std::string& fixtures, const std::string& out) {
  std::vector<std::string> sets = test::equivalenceSettings(c.model, c.tokenizer, fixtures, out);
  sets.push_back("optim.mode=sync");
  sets.insert(sets.end(), c.extra.begin(), c.extra.end());
  // The GPU tier reruns cases on the device (tests/gpu/pipeline_direct_gpu.sh): space-separated key=value.
  std::istringstream more(std::getenv("RP_TEST_SETS") ? std::getenv("RP_TEST_SETS") : "");
  for (std::string kv; more >> kv;) sets.push_back(kv);
  return sets;
}

TEST_P(Equivalence, LossesAndWeightsEqualTheSingleProcessTrainer) {
  const auto fixtures = test::fixturesDir();
  RP_SKIP_UNLESS(fixtures, "shared fixtures");
  Case c = GetParam();
  if (c.model.empty() || c.model.starts_with("golden:")) {
    const auto golden = test::goldenDir();
    RP_SKIP_UNLESS(golden, "golden directory (generated Qwen3 and Llama)");
    c.model = *golden + "/" + (c.model.empty() ? std::string("qwen3-tiny") : c.model.substr(7));
    c.tokenizer = std::string(test::kSourceDir) + "/configs/builtin-tiny";
  } else {
    c.model = *fixtures + "/" + c.model;
    c.tokenizer = c.model;
  }
  const MpiSession& session = test::mpiSession();
  auto sets = baseConfig(c, *fixtures, freshScratch(c.name + "-pipe"));
  if (c.replans) {
    // The embedding "costs" 5 times a decoder layer: the first plan puts it alone in a stage and every decoder
    // layer with the head, which the measured times (a cheap embedding) overturn. A tiny model's layer takes
    // well under a millisecond, so one preemption while it runs (a loaded machine: ctest -j2 beside 4 ranks on
    // 2 cores) can make it look like the skewed profile said: the case runs 8 steps and re-plans at every step
    // once times are measured, not once from one iteration's times (1 run in 15 saw no re-plan that way).
    const std::string profile = scratch(c.name + "-skewed-profile.json");
    if (worldRank() == 0) {
      const auto config = nlohmann::json::parse(std::ifstream(c.model + "/config.json"));
      const int layers = config.at("num_hidden_layers").get<int>() + 2;
      std::vector<double> forward(static_cast<std::size_t>(layers), 1.0), backward(forward.size(), 2.0);
      forward[0] = 5.0, backward[0] = 10.0;
      std::ofstream(profile) << nlohmann::json{{"forward_ms", forward}, {"backward_ms", backward}}.dump();
    }
    MPI_Barrier(MPI_COMM_WORLD);
    sets.push_back("pipeline.profile=" + profile);
  }
  // A failure on one rank would leave the others waiting in a collective: abort the job instead.
  std::unique_ptr<PipelineRuntime> runtimePtr;
  std::vector<trace::StepMetrics> metrics;
  schedule::Plan firstPlan;
  try {
    auto config = config::loadRunConfig("", sets);
    const auto channel = config.pipeline.tensorChannel;
    runtimePtr = std::make_unique<PipelineRuntime>(std::move(config), mpiParts(session, channel));
    firstPlan = runtimePtr->plan();
    metrics = runtimePtr->run();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "[rank %d] %s\n", worldRank(), e.what());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  PipelineRuntime& runtime = *runtimePtr;
  if (c.replans) {
    // Some re-plan adopted the measured times' plan. Not the last plan against the first: a preemption during the
    // last measured iteration can make the embedding look as dear as the skewed profile said, and a re-plan flip
    // back (it did, with two suites at once on 2 cores).
    EXPECT_GE(runtime.planChanges(), 1) << "rank " << worldRank() << ": no re-plan happened, first plan "
                                        << schedule::describe(firstPlan);
  }
  if (worldRank() != 0) return;
  ASSERT_EQ(metrics.size(), c.replans ? 8u : 5u);

  // The merged timeline has every rank's compute and optimizer spans.
  const auto trace = nlohmann::json::parse(std::ifstream(scratch(c.name + "-pipe") + "/trace.json"));
  std::set<int> computeRanks, optimizerRanks;
  for (const auto& e : trace.at("traceEvents")) {
    if (e.value("cat", "") == "compute") computeRanks.insert(e.at("pid").get<int>());
    if (e.value("cat", "") == "optimizer") optimizerRanks.insert(e.at("pid").get<int>());
  }
  int size = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  EXPECT_EQ(static_cast<int>(optimizerRanks.size()), size);
  EXPECT_GE(computeRanks.size(), std::min<std::size_t>(static_cast<std::size_t>(size), 4u));

  const auto reference = config::loadRunConfig("", baseConfig(c, *fixtures, scratch(c.name + "-ref")));
  const bool onCuda = reference.pipeline.backend == device::BackendChoice::kCuda;  // the GPU tier's rerun
  test::expectEqualsTrainer(reference, {metrics, [&](const std::string& name) { return runtime.storeWeight(name); }},
                            onCuda ? test::kCudaFloat : test::Tolerance{});
}

// A pipeline run with `sets` on every rank: its runtime (for the final weights) and metrics (rank 0's). A
// failure on one rank would leave the others waiting in a collective: it aborts the job instead.
struct PipelineRun {
  std::unique_ptr<PipelineRuntime> runtime;
  std::vector<trace::StepMetrics> metrics;
};

PipelineRun runPipeline(std::vector<std::string> sets) {
  PipelineRun out;
  try {
    auto config = config::loadRunConfig("", std::move(sets));
    const auto channel = config.pipeline.tensorChannel;
    out.runtime = std::make_unique<PipelineRuntime>(std::move(config), mpiParts(test::mpiSession(), channel));
    out.metrics = out.runtime->run();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "[rank %d] %s\n", worldRank(), e.what());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  return out;
}

// optim.mode = async: runs the pipeline for `c` on every rank and, on rank 0, compares it with the
// delayed-update reference of its staleness (tests/support/pipeline_reference.h); the final masters agree within
// `weightTolerance`.
void expectEqualsDelayedUpdateReference(const Case& c, const std::string& fixtures, double weightTolerance) {
  const PipelineRun run = runPipeline(baseConfig(c, fixtures, freshScratch(c.name)));
  if (worldRank() != 0) return;
  ASSERT_EQ(run.metrics.size(), 5u);
  test::expectEqualsDelayedUpdate(
      config::loadRunConfig("", baseConfig(c, fixtures, scratch(c.name + "-ref"))),
      {run.metrics, [&](const std::string& name) { return run.runtime->storeWeight(name); }}, weightTolerance);
}

TEST(AsyncEquivalence, EqualsTheSingleProcessTrainerWithAOneStepDelayedUpdate) {
  const auto fixtures = test::fixturesDir();
  RP_SKIP_UNLESS(fixtures, "shared fixtures");
  const std::string model = *fixtures + "/models/tinystories-656k";
  expectEqualsDelayedUpdateReference(
      {"tinystories_async", model, model, {"optim.mode=async", "pipeline.plan=1,1 | 1 | 1,1"}}, *fixtures, 1e-5);
}

// Bounded staleness with real processes: two versions of the weights and gradient slots in the shared node
// store, iteration t on W_{t-2}.
TEST(AsyncEquivalence, StalenessTwoEqualsTheTwoStepDelayedUpdate) {
  const auto fixtures = test::fixturesDir();
  RP_SKIP_UNLESS(fixtures, "shared fixtures");
  const std::string model = *fixtures + "/models/tinystories-656k";
  expectEqualsDelayedUpdateReference(
      {"tinystories_stale2", model, model, {"optim.mode=async", "optim.staleness=2", "pipeline.plan=1,1 | 1 | 1,1"}},
      *fixtures, 1e-5);
}

// Data parallel across nodes: under RP_RANKS_PER_NODE=2 with 4 ranks, two 2-worker pipelines each take
// half of every global batch; their gradients are summed, so training equals one process on the whole batch.
// Weights within 2e-5 rather than 1e-5: each node sums its own microbatches before the nodes are summed, a
// different float association, and Adam's 1/sqrt(v) amplifies last-bit differences where v is tiny. One loss
// chunk per microbatch: a node's microbatches are half the reference's, so automatic chunks would split the
// head's gradient differently — one more association.
// The node split RP_RANKS_PER_NODE asks for, or nullopt (skip) where the run does not ask for one.
std::optional<int> requestedNodeSplit() {
  const long perNode = env::getInt(env::kRanksPerNode);
  if (perNode <= 0) return std::nullopt;
  const auto& id = test::mpiSession().identity();
  EXPECT_GE(id.nodeCount, 2) << "RP_RANKS_PER_NODE=" << perNode << " with " << id.size << " ranks";
  return static_cast<int>(perNode);
}

// Every rank knows every rank's node, local rank and host (stall messages name where a late rank runs).
TEST(MultiNode, EveryRankKnowsWhereEveryRankRuns) {
  const auto perNode = requestedNodeSplit();
  if (!perNode) GTEST_SKIP() << "no node split requested (run with RP_RANKS_PER_NODE)";
  const auto& id = test::mpiSession().identity();
  ASSERT_EQ(static_cast<int>(id.places.size()), id.size);
  for (int r = 0; r < id.size; ++r) {
    const RankPlace& p = id.places[static_cast<std::size_t>(r)];
    EXPECT_EQ(p.node, r / *perNode) << "rank " << r;
    EXPECT_EQ(p.localRank, r % *perNode) << "rank " << r;
    EXPECT_EQ(p.host, id.hostname) << "rank " << r << " (one host)";
  }
}

TEST(MultiNode, TwoNodesEqualTheSingleProcessTrainer) {
  if (!requestedNodeSplit()) GTEST_SKIP() << "no node split requested (run with RP_RANKS_PER_NODE)";
  ASSERT_GE(test::mpiSession().identity().nodeCount, 2);
  const auto fixtures = test::fixturesDir();
  RP_SKIP_UNLESS(fixtures, "shared fixtures");
  const std::string model = *fixtures + "/models/tinystories-656k";
  expectEqualsDelayedUpdateReference(
      {"tinystories_two_nodes", model, model, {"optim.mode=async", "train.loss_chunk_tokens=4096"}}, *fixtures, 2e-5);
}

// optim.shard_across_nodes (Note [Sharded optimizer]): each node keeps the moments of half of every slice,
// reduce-scatters the gradients and all-gathers the masters — the same training as the single-process trainer
// (sync), and node 0's ranks hold a float32 gradient slice and the moments of half of it: 8 bytes per trainable
// parameter over the node instead of 12. The parameter count comes from the saved masters' shapes; every rank
// of both nodes saves its shard, so the masters' slices cover each tensor once.
TEST(MultiNode, ShardedOptimizerStateEqualsTheSingleProcessTrainer) {
  if (!requestedNodeSplit()) GTEST_SKIP() << "no node split requested (run with RP_RANKS_PER_NODE)";
  const auto fixtures = test::fixturesDir();
  RP_SKIP_UNLESS(fixtures, "shared fixtures");
  const Case c{"tinystories_sharded", "models/tinystories-656k", "", {}};
  const std::string model = *fixtures + "/" + c.model;
  const Case run{
      c.name, model, model, {"optim.shard_across_nodes=true", "train.loss_chunk_tokens=4096", "checkpoint.every=5"}};
  const std::string out = freshScratch(c.name);
  const PipelineRun sharded = runPipeline(baseConfig(run, *fixtures, out));
  if (worldRank() != 0) return;
  ASSERT_EQ(sharded.metrics.size(), 5u);
  test::expectEqualsTrainer(
      config::loadRunConfig("", baseConfig(run, *fixtures, scratch(c.name + "-ref"))),
      {sharded.metrics, [&](const std::string& name) { return sharded.runtime->storeWeight(name); }},
      test::Tolerance{1e-6, 1e-5, 2e-5});

  double parameters = 0.0;  // every trainable tensor's, from the checkpoint's masters, each counted once
  std::set<std::string> counted;
  const auto manifest = nlohmann::json::parse(std::ifstream(out + "/checkpoints/step-00000005/manifest.json"));
  for (const auto& t : manifest.at("tensors")) {
    if (t.at("kind") != "master" || !counted.insert(t.at("name").get<std::string>()).second) continue;
    double numel = 1.0, saved = 0.0;
    for (const auto& d : t.at("shape")) numel *= d.get<double>();
    for (const auto& s : t.at("slices")) saved += s.at("count").get<double>();
    EXPECT_EQ(saved, numel) << t.at("name") << ": the nodes' shards should save each element once";
    parameters += numel;
  }
  const auto memory = nlohmann::json::parse(std::ifstream(out + "/memory.json"));
  double optimizerMb = 0.0;
  for (const auto& r : memory.at("ranks")) optimizerMb += r.at("optimizer_mb").get<double>();
  ASSERT_GT(parameters, 0.0);
  EXPECT_NEAR(optimizerMb, 8.0 * parameters / 1e6, 0.01 * 8.0 * parameters / 1e6)
      << "node 0's optimizer state for " << parameters << " parameters (unsharded: " << 12.0 * parameters / 1e6
      << " MB)";
}

INSTANTIATE_TEST_SUITE_P(
    Models, Equivalence,
    ::testing::Values(
        Case{"tinystories_auto", "models/tinystories-656k", "", {}},
        Case{"tinystories_many_stages", "models/tinystories-656k", "", {"pipeline.plan=1,1 | 1 | 1,1"}},
        Case{"tinystories_direct",
             "models/tinystories-656k",
             "",
             {"pipeline.plan=1,1 | 1 | 1,1", "pipeline.tensor_channel=direct"}},
        Case{"tinystories_lora", "models/tinystories-656k", "", {"lora.rank=4", "pipeline.plan=2 | 1 | 1,1"}},
        Case{"qwen3_generated", "", "", {"pipeline.plan=2,1 | 1 | 1,1,1"}},
        Case{"qwen3_replanned", "", "", {"pipeline.replan_every=1", "train.max_steps=8"}, true},
        Case{"qwen3_searched",
             "",
             "",
             {"pipeline.planner=search", "pipeline.replan_every=1", "train.max_steps=8"},
             true},
        Case{"qwen3_layer_recompute", "", "", {"pipeline.plan=3 | 1 | 2,1", "pipeline.recompute=layer"}},
        Case{"qwen3_recompute_ahead2", "", "", {"pipeline.plan=2,1 | 1 | 1,1,1", "pipeline.recompute_ahead=2"}},
        // Tables from the earliest-finish rule (workers chosen from the profile, not the counter).
        Case{"qwen3_earliest_finish", "", "", {"pipeline.plan=2,1 | 1 | 1,1,1", "pipeline.dispatch=earliest_finish"}},
        Case{"tinystories_gpipe", "models/tinystories-656k", "", {"pipeline.schedule=gpipe"}},
        Case{"tinystories_1f1b", "models/tinystories-656k", "", {"pipeline.schedule=1f1b"}},
        // Mixed precision on an untied model (a tied one sums its two gradients in a different dtype than the
        // trainer: tests/unit/test_pipeline_inproc.cpp); fp16 skips the trainer's overflowing steps.
        Case{"llama3_bf16", "golden:llama3-tiny", "", {"model.dtype=bfloat16", "pipeline.plan=1,1 | 1 | 1,1"}},
        Case{"llama3_fp16", "golden:llama3-tiny", "", {"model.dtype=float16", "precision.loss_scale=1048576"}},
        // Qwen3-MoE with the load-balancing loss: decoder 0 sparse in a forward stage, decoder 1 dense, decoder 2
        // sparse in the fused stage; the statistics cross processes through the node store.
        Case{"qwen3_moe_aux", "golden:qwen3-moe-tiny", "", {"pipeline.plan=2,1 | 1 | 1,1,1"}},
        // GPT-OSS from its MXFP4 checkpoint (every rank dequantizes at load), sinks, sliding layers 0 and 2.
        Case{"gpt_oss_aux", "golden:gpt-oss-mxfp4", "", {"pipeline.plan=2,1 | 1 | 1,1,1"}}),
    [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace rp::engine
