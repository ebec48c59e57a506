// The pipeline runtime on a GPU, threads as ranks: every worker a CUDA worker, the same 5 steps as the CPU
// tiers, held to the single-process trainer on the CPU (tests/support/pipeline_reference.h). W = 1, and W = 2
// ranks sharing one GPU, on both tensor planes; float32 (full, LoRA, layer-grain recompute), bfloat16 and
// float16 (with its loss scaling); the node store pinned for the uploads, and pipeline.memory_limit_gb enforced.
#include <string>

#include <fmt/format.h>

#include "gpu_skip.h"
#include "support/fixtures.h"
#include "support/pipeline_reference.h"
#include "support/thread_ranks.h"
#include "train/trainer.h"

namespace rp::test {
namespace {

struct GpuCase {
  std::string name;
  std::vector<std::string> extra;
  Tolerance tolerance;
};

void PrintTo(const GpuCase& c, std::ostream* os) {
  *os << c.name;
}

constexpr Tolerance kFloat = kCudaFloat;
// bfloat16 / float16: both sides round after every op, in different places (GPU kernels keep fp32
// accumulators longer): a percent or two on the loss and grad norm; the final masters within 30% of what the
// reference's five updates moved them (Tolerance::update: a pipeline that never updated is 100% off). The
// bound is a first guess; every run prints the error it measured ("[ update   ]" lines).
constexpr Tolerance kHalf{2e-2, 5e-2, 0, 0.15};

class GpuPipeline : public ::testing::TestWithParam<std::tuple<int, GpuCase, TensorPlane>> {};

TEST_P(GpuPipeline, EqualsTheTrainerOnTheCpu) {
  RP_SKIP_WITHOUT_GPU();
  const auto fixtures = fixturesDir();
  RP_SKIP_UNLESS(fixtures, "shared fixtures");
  // Not a structured binding: clang 14 cannot capture one in a lambda.
  const int workers = std::get<0>(GetParam());
  const auto& c = std::get<1>(GetParam());
  const auto plane = std::get<2>(GetParam());
  const std::string scratch = scratchDir();
  const std::string model = *fixtures + "/models/tinystories-656k";
  auto configAt = [&](const std::string& out, bool gpu) {
    std::vector<std::string> sets = equivalenceSettings(model, model, *fixtures, out);
    sets.push_back("optim.mode=sync");
    sets.insert(sets.end(), c.extra.begin(), c.extra.end());
    if (gpu) {
      sets.push_back("pipeline.backend=cuda");
      sets.push_back(fmt::format("pipeline.ranks_per_gpu={}", workers));  // every rank on GPU 0
    }
    return config::loadRunConfig("", sets);
  };
  const auto reference = configAt(scratch + "/reference", false);
  std::vector<std::string> names;
  {
    train::Trainer probe(reference);
    for (const auto& [name, param] : probe.trainable()) names.push_back(name);
  }
  const ThreadRun run = runOnThreads(configAt(scratch + "/pipeline", true), workers, plane, names);
  ASSERT_EQ(run.metrics.size(), 5u);
  expectEqualsTrainer(reference, {run.metrics, [&](const std::string& name) { return run.weights.at(name); }},
                      c.tolerance);
}

INSTANTIATE_TEST_SUITE_P(
    Workers, GpuPipeline,
    ::testing::Combine(::testing::Values(1, 2),
                       ::testing::Values(GpuCase{"fp32", {}, kFloat}, GpuCase{"lora", {"lora.rank=4"}, kFloat},
                                         GpuCase{"layer_recompute", {"pipeline.recompute=layer"}, kFloat},
                                         GpuCase{"bf16", {"model.dtype=bfloat16"}, kHalf},
                                         GpuCase{"fp16", {"model.dtype=float16"}, kHalf}),
                       ::testing::Values(TensorPlane::kHostStaged, TensorPlane::kInProcess, TensorPlane::kDirect)),
    [](const auto& info) {
      return fmt::format("w{}_{}_{}", std::get<0>(info.param), std::get<1>(info.param).name,
                         test::planeName(std::get<2>(info.param)));
    });

// The node store is registered with the device (cudaHostRegister), or every upload goes through the driver's
// staging buffers at a fraction of the link's speed: the set-up line says which (a machine whose locked-memory
// limit is too low fails here, with the warning naming the limit in the output).
TEST(GpuPipelineSetUp, TheNodeStoreIsPinned) {
  RP_SKIP_WITHOUT_GPU();
  const auto fixtures = fixturesDir();
  RP_SKIP_UNLESS(fixtures, "shared fixtures");
  const std::string model = *fixtures + "/models/tinystories-656k";
  std::vector<std::string> sets = equivalenceSettings(model, model, *fixtures, scratchDir());
  sets.insert(sets.end(), {"train.max_steps=1", "pipeline.backend=cuda"});
  testing::internal::CaptureStderr();
  const ThreadRun run = runOnThreads(config::loadRunConfig("", sets), 1, TensorPlane::kHostStaged, {});
  const std::string log = testing::internal::GetCapturedStderr();
  EXPECT_EQ(run.metrics.size(), 1u);
  const auto line = log.find("pipeline: set up in");
  ASSERT_NE(line, std::string::npos) << log;
  const std::string setUp = log.substr(line, log.find('\n', line) - line);
  EXPECT_NE(setUp.find(", pinned in "), std::string::npos) << setUp << "\n" << log;
}

// pipeline.memory_limit_gb is enforced on a GPU (Note [Stage slots]): the caching allocator may hold only what the
// limit leaves beside the two stage slots. 12 MB leaves a few, less than a microbatch of 2,048 tokens needs (a
// decoder layer's graph alone is 23 MB in float32, the loss's logits chunk 8 MB): the run fails as out of
// memory on a card with 80 GB free, where a limit of 2 GB trains.
TEST(GpuPipelineSetUp, TheMemoryLimitCapsTheCompute) {
  RP_SKIP_WITHOUT_GPU();
  const auto fixtures = fixturesDir();
  RP_SKIP_UNLESS(fixtures, "shared fixtures");
  const std::string model = *fixtures + "/models/tinystories-656k", scratch = scratchDir();
  auto runWith = [&](const std::string& limitGb, const std::string& out, bool failing) {
    std::vector<std::string> sets = equivalenceSettings(model, model, *fixtures, out);
    sets.insert(sets.end(), {"train.seq_len=512", "train.global_batch=8", "train.microbatches=2", "train.max_steps=1",
                             "pipeline.backend=cuda", "pipeline.memory_limit_gb=" + limitGb});
    return runOnThreads(config::loadRunConfig("", sets), 1, TensorPlane::kHostStaged, {}, failing);
  };
  testing::internal::CaptureStderr();
  const ThreadRun fits = runWith("2", scratch + "/fits", false);
  const std::string log = testing::internal::GetCapturedStderr();
  EXPECT_EQ(fits.metrics.size(), 1u);
  // The limit less the two slots of the whole model (one fused stage: 2 x 2.6 MB in float32).
  const auto cap = log.find("the compute may hold ");
  ASSERT_NE(cap, std::string::npos) << log;
  const double capGb = std::stod(log.substr(cap + std::string("the compute may hold ").size()));
  EXPECT_GT(capGb, 1.9) << log;
  EXPECT_LT(capGb, 2.0) << log;
  // The capped run follows in the same process, whose caching allocator still holds the blocks of the run above:
  // the cap must apply to them too (CudaWorker::capComputeMemory empties the cache).
  const ThreadRun capped = runWith("0.012", scratch + "/capped", true);
  ASSERT_EQ(capped.errors.size(), 1u) << "a run beyond its memory limit trained";
  // Note [Out of worker memory]: the job named, then LibTorch's account.
  EXPECT_NE(capped.errors[0].find("rank 0: the worker ran out of memory in the "), std::string::npos)
      << capped.errors[0];
  EXPECT_NE(capped.errors[0].find("LibTorch: CUDA out of memory"), std::string::npos) << capped.errors[0];
}

}  // namespace
}  // namespace rp::test
