// The whole pipeline runtime with threads as ranks — inproc channels, the node store on a plain buffer, each
// tensor-plane backend (host-staged arena, in-process map, device-direct ring, peer links) — so
// the engine's protocol (stage jobs, readiness, fences, the sharded optimizer, the coordinator, checkpoints)
// is exercised in one process in seconds: W = 1..4 workers give the single-process trainer's losses, grad
// norms and weights (tests/support/pipeline_reference.h, the references of the MPI tier too).
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <regex>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "family_patch.h"
#include "support/fixtures.h"
#include "support/pipeline_reference.h"
#include "support/thread_ranks.h"
#include "trace/formats.h"
#include "train/trainer.h"

namespace rp::engine {
namespace {

using test::TensorPlane;
using test::ThreadRun;

struct Case {
  std::string name;
  std::vector<std::string> extra;
  int staleness = 0;  // optim.staleness: 0 = sync
  test::Tolerance tolerance = {};
  bool overflows = false;  // fp16 with a loss scale too large: some step must be skipped
  bool untied = false;     // a randomly initialised untied TinyStories (no tied embedding to sum)
  const char* family = "";  // ... made another family (familyPatch)
};

// bf16/fp16 with tied embeddings: the pipeline sums the tied matrix's two gradients (the embedding's job and
// the head's) in float32 where the trainer's autograd sums them in the model dtype, one rounding of 2^-9
// apart; it moves a bf16 weight by an ulp now and then, which the following steps carry on: the final masters
// are held relative to the reference's movement (Tolerance::update). An untied model is the same arithmetic
// in both: the default tolerances.
constexpr test::Tolerance kTiedHalf{5e-3, 5e-3, 0, 0.05};
// 8-bit states: the pipeline sums a gradient in another order than the trainer (float32 ulps, as in every case),
// and a moment that lands an ulp across a midpoint of the map takes the neighbouring code, a step of the map
// (up to ~1/16 of a small v) in that element's update. The final masters are held relative to the reference's
// movement; the losses and grad norms as in float32.
constexpr test::Tolerance kEightBit{1e-6, 1e-5, 0, 5e-3};
// 2^21: the first steps' fp16 gradients overflow, the scale halves until they fit.
constexpr const char* kOverflowingScale = "precision.loss_scale=2097152";

// The matrix: every case on every tensor plane with every worker count. The default suite runs a Latin square
// of it (docs/testing.md): case i on plane p with W = (i + p) mod 4 + 1 workers, so every (case, plane) pair
// runs once, every case sees every worker count and every plane sees every worker count. The whole matrix
// (InProcPipelineAll, label long) runs in `scripts/test.sh --all`. One process per case (or per case and
// plane), so the single-process reference is computed once for the runs compared with it.
const std::vector<Case>& matrixCases() {
  static const std::vector<Case> cases{
      Case{"auto", {}}, Case{"replanned", {"pipeline.replan_every=2"}},
      Case{"layer_recompute", {"pipeline.recompute=layer"}}, Case{"async", {}, 1},
      Case{"no_recompute_ahead", {"pipeline.recompute_ahead=0"}},
      Case{"layer_recompute_ahead2", {"pipeline.recompute=layer", "pipeline.recompute_ahead=2"}},
      Case{"async_ahead2", {"pipeline.recompute_ahead=2"}, 1},
      // Bounded staleness: k versions of the weights and gradient slots, iteration t on
      // W_{t-k}, equal to the delayed-update reference.
      Case{"stale2", {}, 2}, Case{"stale3_lora", {"lora.rank=4"}, 3}, Case{"lora", {"lora.rank=4"}},
      // QLoRA: the frozen base stored packed NF4 (double-quantised scales) from load on, on every rank.
      Case{"qlora", {"lora.rank=4", "lora.base_dtype=nf4", "lora.double_quant=true"}},
      // Weight uploads in 50 KB chunks (a stage of this model is 0.3-1.8 MB): the copy
      // queue's chunked path, with activation copies going past it, gives the same weights.
      Case{"small_upload_chunks", {"pipeline.upload_chunk_mb=0.05"}},
      // Evaluation on 5% held-out documents after steps 2, 4 and 5: rank 0 on the masters
      // in the store equals the trainer on its weights.
      Case{"eval", {"data.eval_fraction=0.05", "eval.every=2", "eval.max_rows=8"}},
      Case{"bf16_tied", {"model.dtype=bfloat16"}, 0, kTiedHalf},
      Case{"bf16", {"model.dtype=bfloat16"}, 0, {}, false, true},
      Case{"fp16_overflow", {"model.dtype=float16", kOverflowingScale}, 0, {}, true, true},
      // Mixture of experts: the router's top-k choice recomputed in the backward stages;
      // the load-balancing loss summed over stages (Note [Router statistics]).
      Case{"moe", {}, 0, {}, false, true, "qwen3_moe"}, Case{"moe_aux", {}, 0, {}, false, true, "qwen3_moe_aux"},
      Case{"moe_aux_layer_recompute", {"pipeline.recompute=layer"}, 0, {}, false, true, "qwen3_moe_aux"},
      Case{"moe_aux_async_lora", {"lora.rank=4"}, 1, {}, false, true, "qwen3_moe_aux"},
      Case{"gpt_oss", {}, 0, {}, false, true, "gpt_oss"},
      Case{"gpt_oss_async_lora", {"lora.rank=4"}, 1, {}, false, true, "gpt_oss"},
      // The families of docs/model.md beyond Llama and Qwen3, on what sets their layers apart.
      Case{"mistral_window", {}, 0, {}, false, true, "mistral"},
      Case{"qwen2_window_lora", {"lora.rank=4"}, 0, {}, false, true, "qwen2_window"},
      Case{"granite_async", {}, 1, {}, false, true, "granite"},
      Case{"gemma2_lora", {"lora.rank=4"}, 0, {}, false, true, "gemma2"},
      Case{"gemma3_qlora", {"lora.rank=4", "lora.base_dtype=nf4"}, 0, {}, false, true, "gemma3"},
      // Qwen3.5's linear-attention projections adapted and packed in NF4 beside the full layers' (the plain
      // LoRA export: golden.Families/ExportTest qwen3_5_lora).
      Case{"qwen3_5_qlora",
           {"lora.rank=4", "lora.base_dtype=nf4", "lora.targets=q,v,down,in_proj_qkv,in_proj_z,out_proj"},
           0,
           {},
           false,
           true,
           "qwen3_5"},
      Case{"phi3_qlora", {"lora.rank=4", "lora.base_dtype=nf4"}, 0, {}, false, true, "phi3"},
      Case{"olmo2_bf16", {"model.dtype=bfloat16"}, 0, {}, false, true, "olmo2"},
      Case{"glm4_async_lora", {"lora.rank=4"}, 1, {}, false, true, "glm4"},
      // 8-bit AdamW states (docs/optimizer.md, "8-bit states"): every rank's part of a tensor whole blocks, so
      // the pipeline's update is the trainer's; bfloat16 adds split masters (Note [8-bit split master]); the
      // MoE experts' fused tensors (4 x 128 x 128, 4 x 64 x 128) and rank-32 adapters (32 x 128) are 8-bit too.
      Case{"eight_bit", {"optim.state_bits=8"}, 0, kEightBit},
      Case{"moe_bf16_eight_bit_async",
           {"model.dtype=bfloat16", "optim.state_bits=8"},
           1,
           kEightBit,
           false,
           true,
           "qwen3_moe_aux"},
      Case{"bf16_eight_bit", {"model.dtype=bfloat16", "optim.state_bits=8"}, 0, kEightBit, false, true},
      Case{"eight_bit_lora", {"optim.state_bits=8", "lora.rank=32"}, 0, kEightBit, false, true}};
  return cases;
}
constexpr TensorPlane kPlanes[] = {TensorPlane::kHostStaged, TensorPlane::kInProcess, TensorPlane::kDirect,
                                   TensorPlane::kPeerLinks};
constexpr int kMaxWorkers = 4;

int latinWorkers(std::size_t caseIndex, std::size_t plane) {
  return static_cast<int>((caseIndex + plane) % kMaxWorkers) + 1;
}

// Runs case `c` on each (workers, plane) of `cells` and holds every run to one reference.
void expectCellsEqualTheTrainer(const Case& c, const std::vector<std::pair<int, TensorPlane>>& cells) {
  const auto fixtures = test::fixturesDir();
  RP_SKIP_UNLESS(fixtures, "shared fixtures");
  const std::string scratch = test::scratchDir();
  const std::string tokenizer = *fixtures + "/models/tinystories-656k";
  std::string model = tokenizer;
  std::vector<std::string> init;
  if (c.untied) {
    model = scratch + "/untied";
    std::filesystem::create_directories(model);
    auto json = nlohmann::json::parse(std::ifstream(tokenizer + "/config.json"));
    json["tie_word_embeddings"] = false;
    json.update(test::familyPatch(c.family));
    std::ofstream(model + "/config.json") << json.dump();
    init.push_back("model.init=random");
  }
  auto configAt = [&](const std::string& out) {
    std::vector<std::string> sets = test::equivalenceSettings(model, tokenizer, *fixtures, out);
    sets.push_back("pipeline.stall_timeout_s=60");
    sets.push_back(c.staleness == 0 ? "optim.mode=sync" : fmt::format("optim.staleness={}", c.staleness));
    sets.insert(sets.end(), init.begin(), init.end());
    sets.insert(sets.end(), c.extra.begin(), c.extra.end());
    return config::loadRunConfig("", sets);
  };
  const auto referenceConfig = configAt(scratch + "/reference");
  const test::Reference reference =
      c.staleness > 0 ? test::delayedUpdateReference(referenceConfig) : test::trainerReference(referenceConfig);
  std::vector<std::string> names;
  for (const auto& [name, master] : reference.masters) names.push_back(name);
  for (const auto& [workers, plane] : cells) {
    SCOPED_TRACE(fmt::format("W={} on the {} plane", workers, test::planeName(plane)));
    const std::string out = fmt::format("{}/pipeline-w{}-{}", scratch, workers, test::planeName(plane));
    const ThreadRun run = test::runOnThreads(configAt(out), workers, plane, names);
    ASSERT_EQ(run.metrics.size(), 5u);
    for (const auto& m : run.metrics) {  // every rank's resident peak, gathered by the optimizers
      ASSERT_EQ(m.rankPeakResidentMb.size(), static_cast<std::size_t>(workers)) << "step " << m.step;
      for (const double mb : m.rankPeakResidentMb) EXPECT_GT(mb, 0.0) << "step " << m.step;
    }
    if (c.overflows) {
      int skipped = 0;
      for (const auto& m : run.metrics) skipped += m.skipped ? 1 : 0;
      EXPECT_GE(skipped, 1) << "the injected loss scale overflowed no step";
      EXPECT_LT(skipped, 5) << "the scale never backed off far enough";
    }
    const test::PipelineResult result{run.metrics, [&](const std::string& name) { return run.weights.at(name); }};
    test::expectMatches(reference, result,
                        c.staleness > 0 && c.tolerance.update == 0 ? test::Tolerance{1e-6, 1e-5, 1e-5} : c.tolerance);
  }
}

std::string caseName(std::size_t caseIndex) {
  return matrixCases()[caseIndex].name;
}

// The default suite: one process per case, its four planes each with the Latin square's worker count.
class InProcPipeline : public ::testing::TestWithParam<std::size_t> {};

TEST_P(InProcPipeline, EqualsTheSingleProcessTrainer) {
  const std::size_t i = GetParam();
  std::vector<std::pair<int, TensorPlane>> cells;
  for (std::size_t p = 0; p < std::size(kPlanes); ++p) cells.emplace_back(latinWorkers(i, p), kPlanes[p]);
  expectCellsEqualTheTrainer(matrixCases()[i], cells);
}

INSTANTIATE_TEST_SUITE_P(LatinSquare, InProcPipeline, ::testing::Range<std::size_t>(0, matrixCases().size()),
                         [](const auto& info) { return caseName(info.param); });

// `scripts/test.sh --all`: one process per (case, plane), every worker count.
class InProcPipelineAll : public ::testing::TestWithParam<std::tuple<std::size_t, TensorPlane>> {};

TEST_P(InProcPipelineAll, EqualsTheSingleProcessTrainer) {
  const auto [i, plane] = GetParam();
  std::vector<std::pair<int, TensorPlane>> cells;
  for (int w = 1; w <= kMaxWorkers; ++w) cells.emplace_back(w, plane);
  expectCellsEqualTheTrainer(matrixCases()[i], cells);
}

INSTANTIATE_TEST_SUITE_P(Matrix, InProcPipelineAll,
                         ::testing::Combine(::testing::Range<std::size_t>(0, matrixCases().size()),
                                            ::testing::ValuesIn(kPlanes)),
                         [](const auto& info) {
                           return fmt::format("{}_{}", caseName(std::get<0>(info.param)),
                                              test::planeName(std::get<1>(info.param)));
                         });

// QLoRA's 4-bit store (Note [Packed NF4]): against the same LoRA run on a float32 base, the node store is
// smaller by what packing saves on the decoder projections — 4 bytes a parameter become 0.516 (double-quantised
// NF4: half a byte, a byte per 64, a float per 16384) plus at most 1.1 KB a tensor (its dynamic map, padding,
// alignment) — and the workers upload at least that much less per step (each projection goes up at least once
// a step). Sizes from the memory report; the projections counted from config.json.
TEST(InProcPipeline, AnNf4BaseIsStoredAndUploadedInFourBits) {
  const auto fixtures = test::fixturesDir();
  RP_SKIP_UNLESS(fixtures, "shared fixtures");
  const std::string model = *fixtures + "/models/tinystories-656k";
  const auto config = nlohmann::json::parse(std::ifstream(model + "/config.json"));
  const double h = config["hidden_size"], inter = config["intermediate_size"], heads = config["num_attention_heads"],
               kv = config["num_key_value_heads"], layers = config["num_hidden_layers"];
  const double headDim = h / heads;
  const double projections = layers * (2 * h * heads * headDim + 2 * h * kv * headDim + 3 * h * inter);
  constexpr int kSteps = 5;
  auto report = [&](const std::string& name, std::vector<std::string> extra) {
    const std::string out = test::scratchDir() + "/" + name;
    std::vector<std::string> sets = test::equivalenceSettings(model, model, *fixtures, out);
    sets.insert(sets.end(), extra.begin(), extra.end());
    const ThreadRun run = test::runOnThreads(config::loadRunConfig("", sets), 2, TensorPlane::kHostStaged, {});
    EXPECT_EQ(run.metrics.size(), static_cast<std::size_t>(kSteps));
    const auto json = nlohmann::json::parse(std::ifstream(out + "/memory.json"));
    double uploaded = 0;
    for (const auto& r : json["ranks"]) uploaded += r["uploaded_mb"].get<double>();
    return std::pair{json["node_store_mb"].get<double>() * 1e6, uploaded * 1e6};
  };
  const auto [loraStore, loraUploads] = report("lora", {"lora.rank=4"});
  const auto [nf4Store, nf4Uploads] = report("qlora", {"lora.rank=4", "lora.base_dtype=nf4", "lora.double_quant=true"});
  const double leastSaved = 3.48 * projections - 1100.0 * 7 * layers;
  EXPECT_GE(loraStore - nf4Store, leastSaved) << "store: " << loraStore << " bytes, " << nf4Store << " with NF4";
  EXPECT_LE(loraStore - nf4Store, 3.5 * projections) << "store: " << loraStore << " bytes, " << nf4Store << " with NF4";
  EXPECT_GE(loraUploads - nf4Uploads, leastSaved * kSteps)
      << "uploads: " << loraUploads << " bytes on a float32 base, " << nf4Uploads << " on the NF4 base";
}

// A plan whose largest stage (with its prefetched neighbour) exceeds the worker memory budget is an input
// error naming the stage, its bytes and the budget, on every rank — not an allocation failure mid-run.
TEST(InProcPipeline, AStageOverTheMemoryBudgetIsNamed) {
  const auto fixtures = test::fixturesDir();
  RP_SKIP_UNLESS(fixtures, "shared fixtures");
  const std::string model = *fixtures + "/models/tinystories-656k";
  std::vector<std::string> sets = test::equivalenceSettings(model, model, *fixtures, test::scratchDir() + "/out");
  sets.push_back("pipeline.plan=1,1 | 1 | 1,1");     // fused: the last decoder layer and the head (1.8 MB)
  sets.push_back("pipeline.memory_limit_gb=0.001");  // 1 MB
  const ThreadRun run = test::runOnThreads(config::loadRunConfig("", sets), 2, TensorPlane::kHostStaged, {}, true);
  ASSERT_EQ(run.errors.size(), 2u);
  for (const auto& e : run.errors) {
    EXPECT_NE(e.find("stage 2-3 needs"), std::string::npos) << e;
    EXPECT_NE(e.find("MB budget (pipeline.memory_limit_gb"), std::string::npos) << e;
  }
}

// Note [Recompute ahead within the budget]: where one decoder layer's backward with a recomputed graph held ahead
// does not fit the worker budget, the run lowers pipeline.recompute_ahead, says so, and recomputes no microbatch
// ahead (no `recompute` span in the trace), with the losses of the run without a budget. TinyStories in float32
// at 1,024 tokens per microbatch: a layer's graph 11.5 MB, its backward's working memory 4.7 MB (the MLP's
// gradients 3.1, the job's input and gradients 1.6), its gradients 0.8 MB, beside two slots of the 1 MB
// embedding: 19.1 MB at depth 0, 30.6 MB at 1; the budget is 23 MB.
TEST(InProcPipeline, TheMemoryBudgetLowersRecomputeAhead) {
  const auto fixtures = test::fixturesDir();
  RP_SKIP_UNLESS(fixtures, "shared fixtures");
  const std::string model = *fixtures + "/models/tinystories-656k", scratch = test::scratchDir();
  auto runWith = [&](const std::string& name, const std::vector<std::string>& extra, std::string* log) {
    std::vector<std::string> sets = test::equivalenceSettings(model, model, *fixtures, scratch + "/" + name);
    sets.insert(sets.end(), {"train.seq_len=256", "train.global_batch=8", "train.microbatches=2", "train.max_steps=2",
                             "pipeline.recompute_ahead=1"});
    sets.insert(sets.end(), extra.begin(), extra.end());
    testing::internal::CaptureStderr();
    const ThreadRun run = test::runOnThreads(config::loadRunConfig("", sets), 2, TensorPlane::kHostStaged, {});
    *log = testing::internal::GetCapturedStderr();
    int recomputes = 0;
    const auto trace = nlohmann::json::parse(std::ifstream(scratch + "/" + name + "/trace.json"));
    for (const auto& event : trace.at("traceEvents")) {
      const auto span = trace::parseComputeSpanName(event.value("name", std::string()));
      recomputes += span && span->kind == "recompute";
    }
    return std::make_pair(run, recomputes);
  };
  std::string freeLog, budgetLog;
  const auto [free, freeRecomputes] = runWith("free", {}, &freeLog);
  const auto [budget, budgetRecomputes] = runWith("budget", {"pipeline.memory_limit_gb=0.023"}, &budgetLog);
  EXPECT_GT(freeRecomputes, 0) << "without a budget the backward jobs recompute ahead";
  EXPECT_EQ(freeLog.find("recompute ahead lowered"), std::string::npos) << freeLog;
  EXPECT_EQ(budgetRecomputes, 0) << "recomputed ahead within a budget that holds no second graph";
  EXPECT_NE(budgetLog.find("recompute ahead lowered from 1 to 0 to fit the 0.02 GB worker budget at 1024 tokens"),
            std::string::npos)
      << budgetLog;
  EXPECT_EQ(budgetLog.find("expect to run out of memory"), std::string::npos) << budgetLog;
  ASSERT_EQ(free.metrics.size(), 2u);
  ASSERT_EQ(budget.metrics.size(), 2u);
  for (std::size_t s = 0; s < 2; ++s) EXPECT_EQ(free.metrics[s].loss, budget.metrics[s].loss) << "step " << s + 1;

  // A budget below even depth 0's need: warned, before any memory runs out (the CPU's is not enforced).
  std::string tightLog;
  runWith("tight", {"pipeline.memory_limit_gb=0.012"}, &tightLog);
  EXPECT_NE(tightLog.find("more than the 0.01 GB budget"), std::string::npos) << tightLog;
  EXPECT_NE(tightLog.find("recompute ahead 0, lowered from 1"), std::string::npos) << tightLog;
}

// Note [Out of worker memory]: a job that runs out of worker memory (injected: the CPU has no limit to run into)
// stops its rank with a message naming the job, the step, the microbatch's tokens and what to change. One worker:
// threads as ranks have no launcher to stop the others when one fails (under mpirun: tests/mpi/kill_rank.sh).
TEST(InProcPipeline, AJobOutOfMemoryIsNamed) {
  const auto fixtures = test::fixturesDir();
  RP_SKIP_UNLESS(fixtures, "shared fixtures");
  const std::string model = *fixtures + "/models/tinystories-656k";
  std::vector<std::string> sets = test::equivalenceSettings(model, model, *fixtures, test::scratchDir() + "/out");
  ::setenv("RP_FAULT_INJECT", "oom:0:1:job", 1);
  const ThreadRun run = test::runOnThreads(config::loadRunConfig("", sets), 1, TensorPlane::kHostStaged, {}, true);
  ::unsetenv("RP_FAULT_INJECT");
  ASSERT_FALSE(run.errors.empty());
  const auto named = std::find_if(run.errors.begin(), run.errors.end(), [](const std::string& e) {
    return e.find("rank 0: the worker ran out of memory in the ") != std::string::npos;
  });
  ASSERT_NE(named, run.errors.end()) << ::testing::PrintToString(run.errors);
  for (const char* part :
       {" job over layers ", " of step 2, at 64 tokens per microbatch (2 row(s) of train.seq_len 32)",
        "shorten train.seq_len", "pipeline.memory_limit_gb", "LibTorch: fault injection: out of memory in the "}) {
    EXPECT_NE(named->find(part), std::string::npos) << part << "\n" << *named;
  }
}

// Note [Host memory]: a node that cannot hold the store and the optimizer state stops every rank before
// anything is allocated, with the sizes and where the available memory was read.
TEST(InProcPipeline, ARunBeyondTheHostMemoryIsRefusedBeforeLoading) {
  const auto fixtures = test::fixturesDir();
  RP_SKIP_UNLESS(fixtures, "shared fixtures");
  const std::string model = *fixtures + "/models/tinystories-656k";
  std::vector<std::string> sets = test::equivalenceSettings(model, model, *fixtures, test::scratchDir() + "/out");
  ::setenv("RP_HOST_MEMORY_MB", "1", 1);  // the store alone is several MB
  const ThreadRun run = test::runOnThreads(config::loadRunConfig("", sets), 2, TensorPlane::kHostStaged, {}, true);
  ::unsetenv("RP_HOST_MEMORY_MB");
  ASSERT_EQ(run.errors.size(), 2u);
  for (const auto& e : run.errors) {
    EXPECT_NE(e.find("GB of host memory — the node store"), std::string::npos) << e;
    EXPECT_NE(e.find("but RP_HOST_MEMORY_MB leaves 0.00 GB"), std::string::npos) << e;
  }
}

// A host that holds the 4-bit base but not the float32 one (2 MiB: the NF4 store is 1.5 MB, the float32 one 2.9):
// the LoRA run is refused before loading, pointing at lora.base_dtype; the QLoRA run trains.
TEST(InProcPipeline, AHostThatHoldsOnlyTheFourBitBaseRunsQLora) {
  const auto fixtures = test::fixturesDir();
  RP_SKIP_UNLESS(fixtures, "shared fixtures");
  const std::string model = *fixtures + "/models/tinystories-656k";
  auto configFor = [&](const std::string& base) {
    std::vector<std::string> sets =
        test::equivalenceSettings(model, model, *fixtures, test::scratchDir() + "/out-" + base);
    sets.insert(sets.end(), {"lora.rank=4", "lora.base_dtype=" + base, "train.max_steps=1"});
    return config::loadRunConfig("", sets);
  };
  ::setenv("RP_HOST_MEMORY_MB", "2", 1);
  const ThreadRun lora = test::runOnThreads(configFor("model"), 2, TensorPlane::kHostStaged, {}, true);
  const ThreadRun qlora = test::runOnThreads(configFor("nf4"), 2, TensorPlane::kHostStaged, {}, true);
  ::unsetenv("RP_HOST_MEMORY_MB");
  ASSERT_EQ(lora.errors.size(), 2u);
  for (const auto& e : lora.errors) {
    EXPECT_NE(e.find("but RP_HOST_MEMORY_MB leaves 0.00 GB: store the frozen base in 4 bits (lora.base_dtype = "
                     "\"nf4\")"),
              std::string::npos)
        << e;
  }
  EXPECT_TRUE(qlora.errors.empty()) << qlora.errors.front();
  EXPECT_EQ(qlora.metrics.size(), 1u);
}

// A diverged step (fault injection: step 3's loss, hence its gradients, made NaN on whichever rank runs the
// fused stage) is skipped by every rank alike, and the run goes on exactly as the single-process trainer
// that skipped the same step: same losses and skip flags, same weights.
TEST(InProcPipeline, ADivergedStepIsSkippedByEveryRankAsByTheTrainer) {
  const auto fixtures = test::fixturesDir();
  RP_SKIP_UNLESS(fixtures, "shared fixtures");
  const std::string model = *fixtures + "/models/tinystories-656k";
  ::setenv("RP_FAULT_INJECT", "nan:*:2:loss", 1);
  for (int workers : {2, 3}) {
    const std::string scratch = test::scratchDir();
    auto configAt = [&](const std::string& out) {
      std::vector<std::string> sets = test::equivalenceSettings(model, model, *fixtures, out);
      sets.push_back("optim.mode=sync");
      return config::loadRunConfig("", sets);
    };
    const auto reference = configAt(scratch + "/reference");
    std::vector<std::string> names;
    {
      train::Trainer probe(reference);
      for (const auto& [name, param] : probe.trainable()) names.push_back(name);
    }
    const ThreadRun run = test::runOnThreads(configAt(scratch + "/pipeline"), workers, TensorPlane::kHostStaged, names);
    ASSERT_EQ(run.metrics.size(), 5u);
    for (std::size_t s = 0; s < 5; ++s)
      EXPECT_EQ(run.metrics[s].skipped, s == 2) << "W=" << workers << " step " << s + 1;
    test::expectEqualsTrainer(reference, {run.metrics, [&](const std::string& n) { return run.weights.at(n); }}, {});
  }
  ::unsetenv("RP_FAULT_INJECT");
}

// pipeline.dispatch = earliest_finish with rank 1's worker slowed to a quarter speed (RP_SLOW_WORKER): rank 0
// measures it as the slowest worker and gives it less than an even share of the jobs, and the losses, grad norms and
// weights stay the single-process trainer's — which worker runs a job never changes what it computes.
TEST(InProcPipeline, ASlowWorkerGetsFewerJobsAndTheRunStaysTheTrainers) {
  const auto fixtures = test::fixturesDir();
  RP_SKIP_UNLESS(fixtures, "shared fixtures");
  const std::string model = *fixtures + "/models/tinystories-656k", scratch = test::scratchDir();
  auto configAt = [&](const std::string& out) {
    std::vector<std::string> sets = test::equivalenceSettings(model, model, *fixtures, out);
    sets.insert(sets.end(), {"optim.mode=sync", "train.max_steps=8", "pipeline.dispatch=earliest_finish",
                             "pipeline.stall_timeout_s=60"});
    return config::loadRunConfig("", sets);
  };
  const auto reference = configAt(scratch + "/reference");
  std::vector<std::string> names;
  {
    train::Trainer probe(reference);
    for (const auto& [name, param] : probe.trainable()) names.push_back(name);
  }
  ::setenv("RP_SLOW_WORKER", "1:0.25", 1);
  testing::internal::CaptureStderr();
  const ThreadRun run = test::runOnThreads(configAt(scratch + "/pipeline"), 3, TensorPlane::kHostStaged, names);
  const std::string log = testing::internal::GetCapturedStderr();
  ::unsetenv("RP_SLOW_WORKER");
  ASSERT_EQ(run.metrics.size(), 8u);
  test::expectEqualsTrainer(reference, {run.metrics, [&](const std::string& n) { return run.weights.at(n); }}, {});
  // "dispatch: measured worker speeds at step S (1 = the fastest): a b c; jobs per worker this step: x y z"
  const std::regex line(R"(measured worker speeds at step \d+ \(1 = the fastest\): ([\d.]+) ([\d.]+) ([\d.]+); )"
                        R"(jobs per worker this step: (\d+) (\d+) (\d+))");
  std::smatch m;  // the last such line
  for (auto it = std::sregex_iterator(log.begin(), log.end(), line); it != std::sregex_iterator(); ++it) m = *it;
  ASSERT_FALSE(m.empty()) << log;
  EXPECT_LT(std::stod(m[2]), 0.6) << m[0];
  const int slow = std::stoi(m[5]), jobs = std::stoi(m[4]) + slow + std::stoi(m[6]);
  EXPECT_LT(3 * slow, jobs) << m[0] << ": not below an even share (round-robin's)";
}

// train.epochs ends a pipeline run where it ends the single-process trainer's, sync and async (whose steps are
// still in flight when the loop stops: they are drained, reported and saved), on a corpus of a few steps an epoch.
TEST(InProcPipeline, StopsAtTheEpochLimitWhereTheTrainerDoes) {
  const auto fixtures = test::fixturesDir();
  RP_SKIP_UNLESS(fixtures, "shared fixtures");
  const std::string model = *fixtures + "/models/tinystories-656k", scratch = test::scratchDir();
  {
    std::ifstream in(*fixtures + "/text/tinyshakespeare.txt");
    std::string text(3000, '\0');
    in.read(text.data(), static_cast<std::streamsize>(text.size()));
    std::ofstream(scratch + "/small.txt") << text.substr(0, text.rfind("\n\n"));
  }
  auto configAt = [&](const std::string& out, const std::string& mode) {
    std::vector<std::string> sets = test::equivalenceSettings(model, model, *fixtures, out);
    sets.insert(sets.end(),
                {"data.path=" + scratch + "/small.txt", "train.epochs=2", "train.max_steps=40", "optim.mode=" + mode});
    return config::loadRunConfig("", sets);
  };
  ASSERT_TRUE(train::Trainer(configAt(scratch + "/trainer", "sync")).run());
  std::vector<double> losses;  // the trainer's, from its metrics
  std::ifstream in(scratch + "/trainer/metrics.jsonl");
  for (std::string line; std::getline(in, line);) losses.push_back(nlohmann::json::parse(line).at("loss"));
  ASSERT_GT(losses.size(), 2u);
  ASSERT_LT(losses.size(), 40u) << "the corpus is too long to reach the epoch limit";
  const ThreadRun sync = test::runOnThreads(configAt(scratch + "/sync", "sync"), 2, TensorPlane::kHostStaged, {});
  ASSERT_EQ(sync.metrics.size(), losses.size());
  for (std::size_t i = 0; i < losses.size(); ++i) EXPECT_NEAR(sync.metrics[i].loss, losses[i], 1e-6 * losses[i]);
  const ThreadRun async = test::runOnThreads(configAt(scratch + "/async", "async"), 2, TensorPlane::kHostStaged, {});
  EXPECT_EQ(async.metrics.size(), losses.size());
  EXPECT_TRUE(std::filesystem::exists(
      fmt::format("{}/async/checkpoints/step-{:08d}", scratch, static_cast<int>(losses.size()))))
      << "the last step, drained, is saved";
}

// pipeline.profile of another model (a layer count that differs) is named, with both counts, on every rank.
TEST(InProcPipeline, AProfileOfAnotherModelIsNamed) {
  const auto fixtures = test::fixturesDir();
  RP_SKIP_UNLESS(fixtures, "shared fixtures");
  const std::string model = *fixtures + "/models/tinystories-656k", scratch = test::scratchDir();
  std::ofstream(scratch + "/profile.json") << R"({"forward_ms": [1, 1, 1], "backward_ms": [2, 2, 2]})";
  std::vector<std::string> sets = test::equivalenceSettings(model, model, *fixtures, scratch + "/out");
  sets.push_back("pipeline.profile=" + scratch + "/profile.json");
  const ThreadRun run = test::runOnThreads(config::loadRunConfig("", sets), 2, TensorPlane::kHostStaged, {}, true);
  ASSERT_EQ(run.errors.size(), 2u);
  for (const auto& e : run.errors) {
    EXPECT_NE(e.find(scratch + "/profile.json: pipeline.profile has times for 3 layers; this model has 4"),
              std::string::npos)
        << e;
  }
}

// More workers than the plan has stages trains, and says that workers sit idle and what to do about it.
TEST(InProcPipeline, MoreWorkersThanStagesWarns) {
  const auto fixtures = test::fixturesDir();
  RP_SKIP_UNLESS(fixtures, "shared fixtures");
  const std::string model = *fixtures + "/models/tinystories-656k";
  std::vector<std::string> sets = test::equivalenceSettings(model, model, *fixtures, test::scratchDir() + "/out");
  sets.push_back("pipeline.plan=2 | 1 | 2");  // 3 stages
  sets.push_back("train.max_steps=1");
  testing::internal::CaptureStderr();
  const ThreadRun run = test::runOnThreads(config::loadRunConfig("", sets), 4, TensorPlane::kHostStaged, {});
  const std::string log = testing::internal::GetCapturedStderr();
  EXPECT_EQ(run.metrics.size(), 1u);
  EXPECT_NE(log.find("4 workers per node but the plan has 3 stages: each iteration leaves 1 worker(s) idle"),
            std::string::npos)
      << log;
  EXPECT_NE(log.find("split into at most 7 stages"), std::string::npos) << log;
}

}  // namespace
}  // namespace rp::engine

namespace rp::engine {
namespace {

// Issue "stream-ordered GPU pipeline", its proof on the CPU: the same plan with 4 and with 16 microbatches, and
// the blocking waits of each rank's issuing thread (device/host_waits.h, reported in metrics.jsonl). The only
// ones that grow with the microbatches are the waits for another rank's word that a microbatch's input exists
// (`peer`: the previous job's hand-off, and recompute ahead's wait for the fused stage's start), one per
// microbatch each; the copies (fetched tensors ordered by the compute, puts left in flight behind the
// readiness sender), the optimizer's fences, the losses (once per fused job) and the device's timings (once per
// iteration, though rank 0 runs two or three jobs of the five-stage plan) do not. On every tensor plane.
TEST(InProcPipeline, OnlyTheWaitsForOtherRanksGrowWithTheMicrobatches) {
  const auto fixtures = test::fixturesDir();
  RP_SKIP_UNLESS(fixtures, "shared fixtures");
  const std::string model = *fixtures + "/models/tinystories-656k", scratch = test::scratchDir();
  for (TensorPlane plane :
       {TensorPlane::kHostStaged, TensorPlane::kInProcess, TensorPlane::kDirect, TensorPlane::kPeerLinks}) {
    SCOPED_TRACE(planeName(plane));
    auto waitsWith = [&](int microbatches) {
      std::vector<std::string> sets = test::equivalenceSettings(
          model, model, *fixtures, scratch + "/" + planeName(plane) + std::to_string(microbatches));
      sets.insert(sets.end(), {"train.global_batch=16", "train.microbatches=" + std::to_string(microbatches),
                               "train.max_steps=2", "optim.mode=sync", "pipeline.plan=1,1 | 1 | 1,1"});
      const ThreadRun run = test::runOnThreads(config::loadRunConfig("", sets), 2, plane, {});
      EXPECT_EQ(run.metrics.size(), 2u);
      return run.metrics.empty() ? trace::StepMetrics{} : run.metrics.back();
    };
    const trace::StepMetrics four = waitsWith(4), sixteen = waitsWith(16);
    // Five jobs (fwd 0, fwd 1, fused, bwd 1, bwd 0) on two workers: rank 0 runs two or three of them.
    ASSERT_GE(four.jobs, 2);
    ASSERT_EQ(four.jobs, sixteen.jobs) << "the same plan and dispatch, whatever the microbatch count";
    for (const auto* m : {&four, &sixteen}) {
      std::string line = fmt::format("{}: rank 0, {} jobs:", planeName(plane), m->jobs);
      for (const auto& [reason, count] : m->hostWaits) line += fmt::format(" {} {}", reason, count);
      std::printf("%s\n", line.c_str());
      EXPECT_EQ(m->hostWaits.at("timing"), 1) << "one wait for the device's clock per iteration";
      EXPECT_LE(m->hostWaits.at("loss_read"), 1) << "the fused job's losses, read once";
    }
    for (const char* reason : {"copy", "readiness", "loss_read", "timing"}) {
      EXPECT_EQ(four.hostWaits.at(reason), sixteen.hostWaits.at(reason)) << reason << " grew with the microbatches";
    }
    EXPECT_GT(four.hostWaits.at("peer"), 0) << "rank 0's jobs wait for rank 1's hand-offs";
    EXPECT_EQ(four.hostWaits.at("peer") * 4, sixteen.hostWaits.at("peer")) << "peer waits: so many per microbatch";
  }
}

}  // namespace
}  // namespace rp::engine
