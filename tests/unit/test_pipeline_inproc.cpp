// The whole pipeline runtime with threads as ranks — inproc channels, the node store on a plain buffer, each
// tensor-plane backend (host-staged arena, in-process map) — so
// the engine's protocol (stage jobs, readiness, fences, the sharded optimizer, the coordinator, checkpoints)
// is exercised in one process in seconds: W = 1..4 workers give the single-process trainer's losses, grad
// norms and weights (tests/support/pipeline_reference.h, the references of the MPI tier too).
#include <exception>
#include <map>
#include <mutex>
#include <thread>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "control/inproc/inproc_channel.h"
#include "engine/runtime.h"
#include "support/fixtures.h"
#include "support/pipeline_reference.h"
#include "train/trainer.h"

namespace rp::engine {
namespace {

enum class Tensors { kHostStaged, kInProcess };  // the tensor-plane backend under test

RuntimeParts threadParts(control::InProcHub& node, control::InProcHub& world, int rank,
                         transport::TensorChannelFactory tensors) {
  RuntimeParts parts;
  parts.identity.rank = parts.identity.localRank = rank;
  parts.identity.size = parts.identity.localSize = node.size();
  parts.identity.hostname = "in-process";
  parts.node = std::make_unique<control::InProcChannel>(node, rank);
  parts.world = std::make_unique<control::InProcChannel>(world, rank);
  parts.nodeMemory = memory::shareInProcess;
  parts.tensors = std::move(tensors);
  return parts;
}

struct ThreadRun {
  std::vector<trace::StepMetrics> metrics;       // rank 0's
  std::map<std::string, torch::Tensor> weights;  // rank 0's view of the final store
};

// Runs `config` on `workers` threads as ranks; a rank's error fails the test (after every thread ended).
ThreadRun runOnThreads(const config::RunConfig& config, int workers, Tensors backend,
                       const std::vector<std::string>& names) {
  control::InProcHub node(workers), world(workers);
  const transport::TensorChannelFactory tensors = backend == Tensors::kHostStaged
                                                      ? transport::TensorChannelFactory(transport::hostStaged)
                                                      : transport::inProcess(transport::newInProcTensorHub());
  ThreadRun out;
  std::mutex mutex;
  std::vector<std::string> errors;
  std::vector<std::thread> threads;
  for (int r = 0; r < workers; ++r) {
    threads.emplace_back([&, r] {
      try {
        PipelineRuntime runtime(config, threadParts(node, world, r, tensors));
        auto metrics = runtime.run();
        if (r != 0) return;
        out.metrics = std::move(metrics);
        for (const auto& name : names) out.weights[name] = runtime.storeWeight(name);
      } catch (const std::exception& e) {
        std::lock_guard<std::mutex> lock(mutex);
        errors.push_back(fmt::format("rank {}: {}", r, e.what()));
      }
    });
  }
  for (auto& t : threads) t.join();
  for (const auto& e : errors) ADD_FAILURE() << e;
  return out;
}

struct Case {
  std::string name;
  std::vector<std::string> extra;
  bool async = false;
};

void PrintTo(const Case& c, std::ostream* os) {
  *os << c.name;
}

void PrintTo(Tensors t, std::ostream* os) {
  *os << (t == Tensors::kHostStaged ? "host-staged" : "in-process tensors");
}

class InProcPipeline : public ::testing::TestWithParam<std::tuple<int, Case, Tensors>> {};

TEST_P(InProcPipeline, EqualsTheSingleProcessTrainer) {
  const auto fixtures = test::fixturesDir();
  RP_SKIP_UNLESS(fixtures, "shared fixtures");
  const auto& [workers, c, backend] = GetParam();
  const std::string model = *fixtures + "/models/tinystories-656k";
  auto configAt = [&](const std::string& out) {
    std::vector<std::string> sets{"model.path=" + model,     "data.path=" + *fixtures + "/text/tinyshakespeare.txt",
                                  "train.seq_len=32",        "train.global_batch=8",
                                  "train.microbatches=4",    "train.max_steps=5",
                                  "train.threads=1",         "optim.lr=3e-3",
                                  "optim.schedule=constant", "pipeline.stall_timeout_s=60",
                                  "output.dir=" + out};
    sets.push_back(c.async ? "optim.mode=async" : "optim.mode=sync");
    sets.insert(sets.end(), c.extra.begin(), c.extra.end());
    return config::loadRunConfig("", sets);
  };
  const auto reference = configAt(test::scratchDir() + "/reference");
  std::vector<std::string> names;
  {
    train::Trainer probe(reference);  // the trainable tensors' names
    for (const auto& [name, param] : probe.trainable()) names.push_back(name);
  }
  const ThreadRun run = runOnThreads(configAt(test::scratchDir() + "/pipeline"), workers, backend, names);
  ASSERT_EQ(run.metrics.size(), 5u);
  const test::PipelineResult result{run.metrics, [&](const std::string& name) { return run.weights.at(name); }};
  if (c.async) {
    test::expectEqualsDelayedUpdate(reference, result, 1e-5);
  } else {
    test::expectEqualsTrainer(reference, result);
  }
}

INSTANTIATE_TEST_SUITE_P(Workers, InProcPipeline,
                         ::testing::Combine(::testing::Values(1, 2, 3, 4),
                                            ::testing::Values(Case{"auto", {}},
                                                              Case{"replanned", {"pipeline.replan_every=2"}},
                                                              Case{"layer_recompute", {"pipeline.recompute=layer"}},
                                                              Case{"async", {}, true}),
                                            ::testing::Values(Tensors::kHostStaged, Tensors::kInProcess)),
                         [](const auto& info) {
                           return fmt::format(
                               "w{}_{}_{}", std::get<0>(info.param), std::get<1>(info.param).name,
                               std::get<2>(info.param) == Tensors::kHostStaged ? "host_staged" : "inproc_tensors");
                         });

}  // namespace
}  // namespace rp::engine
