// The pipeline runtime under real mpiexec: with a fixed microbatch count, W workers give the per-step losses
// of the single-process trainer (within 1e-6 relative) and its weights after 5 steps (within 1e-5).
#include <filesystem>

#include <gtest/gtest.h>
#include <mpi.h>
#include <torch/torch.h>

#include "config/run_config.h"
#include "engine/runtime.h"
#include "mpi_test_session.h"
#include "support/fixtures.h"
#include "train/trainer.h"
#include "world/mpi_session.h"

namespace rp::engine {
namespace {

int worldRank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

std::string scratch(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("rp-pipeline-" + name)).string();
}

struct Case {
  std::string name;
  std::string model;      // directory
  std::string tokenizer;  // tokenizer.json directory
  std::vector<std::string> extra;
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

class Equivalence : public ::testing::TestWithParam<Case> {};

std::vector<std::string> baseConfig(const Case& c, const std::string& fixtures, const std::string& out) {
  std::vector<std::string> sets{"model.path=" + c.model,
                                "model.tokenizer=" + c.tokenizer,
                                "data.path=" + fixtures + "/text/tinyshakespeare.txt",
                                "train.seq_len=32",
                                "train.global_batch=8",
                                "train.microbatches=4",
                                "train.max_steps=5",
                                "train.threads=1",
                                "optim.lr=3e-3",
                                "optim.schedule=constant",
                                "optim.mode=sync",
                                "output.dir=" + out};
  sets.insert(sets.end(), c.extra.begin(), c.extra.end());
  return sets;
}

TEST_P(Equivalence, LossesAndWeightsEqualTheSingleProcessTrainer) {
  const auto fixtures = test::fixturesDir();
  RP_SKIP_UNLESS(fixtures, "shared fixtures");
  Case c = GetParam();
  if (c.model.empty()) {
    const auto golden = test::goldenDir();
    RP_SKIP_UNLESS(golden, "golden directory (generated Qwen3)");
    c.model = *golden + "/qwen3-tiny";
    c.tokenizer = std::string(RP_SOURCE_DIR) + "/configs/builtin-tiny";
  } else {
    c.model = *fixtures + "/" + c.model;
    c.tokenizer = c.model;
  }
  const MpiSession& session = test::mpiSession();
  const auto sets = baseConfig(c, *fixtures, scratch(c.name + "-pipe"));
  // A failure on one rank would leave the others waiting in a collective: abort the job instead.
  std::unique_ptr<PipelineRuntime> runtimePtr;
  std::vector<trace::StepMetrics> metrics;
  try {
    runtimePtr = std::make_unique<PipelineRuntime>(config::loadRunConfig("", sets), session);
    metrics = runtimePtr->run();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "[rank %d] %s\n", worldRank(), e.what());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  PipelineRuntime& runtime = *runtimePtr;
  if (worldRank() != 0) return;
  ASSERT_EQ(metrics.size(), 5u);

  auto refSets = baseConfig(c, *fixtures, scratch(c.name + "-ref"));
  train::Trainer reference(config::loadRunConfig("", refSets));
  for (std::int64_t s = 0; s < 5; ++s) {
    const auto rows = reference.packer().next(8);
    const auto grads = reference.computeGradients(rows, 4);
    const auto m = reference.applyStep(s, grads);
    EXPECT_NEAR(metrics[static_cast<std::size_t>(s)].loss, m.loss, 1e-6 * std::abs(m.loss)) << "step " << s + 1;
    EXPECT_NEAR(metrics[static_cast<std::size_t>(s)].gradNorm, m.gradNorm, 1e-5 * m.gradNorm) << "step " << s + 1;
  }
  for (const auto& [name, param] : reference.trainable()) {
    const auto ours = runtime.storeWeight(name);
    const double err = (ours - param.detach()).abs().max().item<double>();
    EXPECT_LE(err, 1e-5) << name;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Models, Equivalence,
    ::testing::Values(Case{"tinystories_auto", "models/tinystories-656k", "", {}},
                      Case{"tinystories_many_stages", "models/tinystories-656k", "", {"pipeline.plan=1,1 | 1 | 1,1"}},
                      Case{"tinystories_lora", "models/tinystories-656k", "", {"lora.rank=4", "pipeline.plan=2 | 1 | 1,1"}},
                      Case{"qwen3_generated", "", "", {"pipeline.plan=2,1 | 1 | 1,1,1"}}),
    [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace rp::engine
