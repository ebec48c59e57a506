// Masters in the weights' memory (optim.split_master; docs/optimizer.md, "Split masters"): a bfloat16 sync run
// whose masters are its weights plus 16-bit low words (optim/adamw.h, Note [Split master]), and a float32 sync
// run whose masters are its weights, train bitwise as the runs with masters of their own — losses, grad norms,
// and every master and moment their checkpoints hold — at W = 1..3 workers, with a node store
// 2 (4) bytes a trainable parameter smaller; and a checkpoint of either layout resumes in the other and ends where
// the uninterrupted run does, bit for bit; split masters resumed from 8-bit moments keep their tie bits.
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <tuple>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "checkpoint/manifest.h"
#include "support/fixtures.h"
#include "support/pipeline_reference.h"
#include "support/thread_ranks.h"

namespace rp::engine {
namespace {

using test::TensorPlane;

// Every float of the checkpoint's masters and moments, by kind and tensor, as raw bits.
std::map<std::string, std::vector<std::uint32_t>> stateOf(const std::string& dir) {
  const checkpoint::Manifest manifest = checkpoint::readManifest(dir);
  std::map<std::string, std::vector<std::uint32_t>> out;
  std::vector<checkpoint::Slice> wanted;
  for (const auto& r : manifest.slices) {
    const std::string key = std::string(checkpoint::kindName(r.kind)) + "/" + r.tensor;
    if (out.count(key) != 0) continue;
    auto& bits = out[key];
    bits.resize(static_cast<std::size_t>(checkpoint::numel(r.shape)));
    wanted.push_back({r.kind, r.tensor, r.shape, 0, checkpoint::numel(r.shape), reinterpret_cast<float*>(bits.data())});
  }
  checkpoint::readSlices(dir, manifest, wanted);
  return out;
}

double nodeStoreMb(const std::string& out) {
  return nlohmann::json::parse(std::ifstream(out + "/memory.json")).at("node_store_mb").get<double>();
}

class SplitMaster : public ::testing::TestWithParam<std::tuple<const char*, int>> {};

TEST_P(SplitMaster, TrainsResumesAndCheckpointsBitwiseAsMastersOfTheirOwn) {
  const auto fixtures = test::fixturesDir();
  RP_SKIP_UNLESS(fixtures, "shared fixtures");
  const auto [dtype, workers] = GetParam();
  const bool bf16 = std::string(dtype) == "bfloat16";
  const std::string model = *fixtures + "/models/tinystories-656k", scratch = test::scratchDir();
  auto configFor = [&](const std::string& out, bool split, std::vector<std::string> extra) {
    std::vector<std::string> sets = test::equivalenceSettings(model, model, *fixtures, scratch + "/" + out);
    sets.insert(sets.end(), {std::string("model.dtype=") + dtype, "train.max_steps=20", "checkpoint.every=10",
                             "checkpoint.keep=0", fmt::format("optim.split_master={}", split)});
    sets.insert(sets.end(), extra.begin(), extra.end());
    return config::loadRunConfig("", sets);
  };
  const auto run = [&](const std::string& out, bool split, std::vector<std::string> extra = {}) {
    return test::runOnThreads(configFor(out, split, std::move(extra)), workers, TensorPlane::kHostStaged, {});
  };
  const test::ThreadRun full = run("float32", false), split = run("split", true);
  ASSERT_EQ(full.metrics.size(), 20u);
  ASSERT_EQ(split.metrics.size(), 20u);
  for (std::size_t i = 0; i < 20; ++i) {
    EXPECT_EQ(split.metrics[i].loss, full.metrics[i].loss) << "step " << i + 1;
    EXPECT_EQ(split.metrics[i].gradNorm, full.metrics[i].gradNorm) << "step " << i + 1;
  }
  EXPECT_NE(full.metrics.front().loss, full.metrics.back().loss) << "the run did not train";
  for (const char* step : {"step-00000010", "step-00000020"}) {
    const auto a = stateOf(scratch + "/float32/checkpoints/" + step),
               b = stateOf(scratch + "/split/checkpoints/" + step);
    ASSERT_EQ(a.size(), b.size()) << step;
    for (const auto& [key, bits] : a) EXPECT_TRUE(b.at(key) == bits) << step << ": " << key << " differs";
  }
  // The node store holds 2 (float32: 4) bytes less per trainable parameter (TinyStories-656K trains all 0.66M).
  const double saved = nodeStoreMb(scratch + "/float32") - nodeStoreMb(scratch + "/split");
  EXPECT_NEAR(saved, (bf16 ? 2 : 4) * 0.656, 0.05) << "MB";

  // Resumed across layouts at step 10: the last ten steps and the step-20 checkpoint are the uninterrupted run's.
  for (const bool toSplit : {true, false}) {
    const std::string from = toSplit ? "float32" : "split", out = toSplit ? "float32-to-split" : "split-to-float32";
    const test::ThreadRun resumed =
        run(out, toSplit, {"checkpoint.resume=" + scratch + "/" + from + "/checkpoints/step-00000010"});
    ASSERT_EQ(resumed.metrics.size(), 10u) << out;
    for (std::size_t i = 0; i < 10; ++i) EXPECT_EQ(resumed.metrics[i].loss, full.metrics[10 + i].loss) << out;
    const auto a = stateOf(scratch + "/float32/checkpoints/step-00000020"),
               b = stateOf(scratch + "/" + out + "/checkpoints/step-00000020");
    for (const auto& [key, bits] : a) EXPECT_TRUE(b.at(key) == bits) << out << ": " << key << " differs";
  }
}

// bfloat16's split at W = 1..3; float32's masters-as-weights once, at W = 2 (the same fences).
INSTANTIATE_TEST_SUITE_P(Workers, SplitMaster,
                         ::testing::Values(std::make_tuple("bfloat16", 1), std::make_tuple("bfloat16", 2),
                                           std::make_tuple("bfloat16", 3), std::make_tuple("float32", 2)),
                         [](const auto& info) {
                           return fmt::format("{}_W{}", std::get<0>(info.param), std::get<1>(info.param));
                         });

// A checkpoint of 8-bit moments (docs/optimizer.md, "8-bit states") with float32 masters of their own, resumed in
// a bfloat16 run with float32 moments: split masters take their tie bits with the converted moments (Note
// [Moments across widths]), and the run ends bit for bit where the same resume with masters of its own does.
TEST(SplitMasterResume, FromEightBitMomentsKeepsTheTieBits) {
  const auto fixtures = test::fixturesDir();
  RP_SKIP_UNLESS(fixtures, "shared fixtures");
  const std::string model = *fixtures + "/models/tinystories-656k", scratch = test::scratchDir();
  const auto run = [&](const std::string& out, std::vector<std::string> extra) {
    std::vector<std::string> sets = test::equivalenceSettings(model, model, *fixtures, scratch + "/" + out);
    sets.insert(sets.end(), {"model.dtype=bfloat16", "checkpoint.every=10", "checkpoint.keep=0"});
    sets.insert(sets.end(), extra.begin(), extra.end());
    return test::runOnThreads(config::loadRunConfig("", sets), 2, TensorPlane::kHostStaged, {});
  };
  run("q8", {"train.max_steps=10", "optim.state_bits=8", "optim.split_master=false"});
  const std::string from = "checkpoint.resume=" + scratch + "/q8/checkpoints/step-00000010";
  int ties = 0;  // masters at a bfloat16 tie: the elements whose tie bit the split must keep
  for (const auto& [key, bits] : stateOf(scratch + "/q8/checkpoints/step-00000010")) {
    if (key.rfind("master/", 0) != 0) continue;
    for (const std::uint32_t b : bits) ties += (b & 0xffffu) == 0x8000u ? 1 : 0;
  }
  ASSERT_GT(ties, 0) << "no master of the checkpoint is at a tie, so nothing here could fail";
  const test::ThreadRun own = run("own", {"train.max_steps=20", "optim.split_master=false", from}),
                        split = run("split", {"train.max_steps=20", "optim.split_master=true", from});
  ASSERT_EQ(own.metrics.size(), 10u);
  ASSERT_EQ(split.metrics.size(), 10u);
  for (std::size_t i = 0; i < 10; ++i) EXPECT_EQ(split.metrics[i].loss, own.metrics[i].loss) << "step " << i + 11;
  const auto a = stateOf(scratch + "/own/checkpoints/step-00000020"),
             b = stateOf(scratch + "/split/checkpoints/step-00000020");
  ASSERT_EQ(a.size(), b.size());
  for (const auto& [key, bits] : a) EXPECT_TRUE(b.at(key) == bits) << key << " differs";
}

}  // namespace
}  // namespace rp::engine
