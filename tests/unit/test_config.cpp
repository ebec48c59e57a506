// Run config: TOML + --set against the schema; every bad input names the file/flag and the key.
#include <fstream>

#include <gtest/gtest.h>

#include "common/error.h"
#include "config/run_config.h"
#include "config/schema.h"
#include "support/fixtures.h"

namespace rp::config {
namespace {

std::string writeToml(const std::string& text) {
  const std::string path = test::scratchDir() + "/run.toml";
  std::ofstream(path) << text;
  return path;
}

std::string errorOf(const std::string& toml, const std::vector<std::string>& overrides = {}) {
  try {
    loadRunConfig(writeToml(toml), overrides);
  } catch (const InputError& e) {
    return e.what();
  }
  return "no error";
}

constexpr const char* kMinimal = "[model]\npath = \"m\"\n[data]\npath = \"d.txt\"\n";

TEST(RunConfig, FileDefaultsAndOverrides) {
  const std::string path =
      writeToml(std::string(kMinimal) + "[train]\nseq_len = 64\nglobal_batch = 8\n[optim]\nlr = 1\n");
  const RunConfig c = loadRunConfig(path, {"train.microbatches=4", "optim.lr=3e-4", "lora.targets=q,v",
                                           "data.path=[\"a.txt\", \"b.txt\"]", "optim.mode=sync"});
  EXPECT_EQ(c.model.path, "m");
  EXPECT_EQ(c.train.seqLen, 64);
  EXPECT_EQ(c.train.microbatches, 4);
  EXPECT_DOUBLE_EQ(c.optim.lr, 3e-4);  // --set wins over the file
  EXPECT_EQ(c.lora.targets, (std::vector<std::string>{"q", "v"}));
  EXPECT_EQ(c.data.paths, (std::vector<std::string>{"a.txt", "b.txt"}));
  EXPECT_EQ(c.optim.staleness, 0);
  EXPECT_EQ(c.train.maxSteps, 100);  // schema default
  bool sawOverride = false;
  for (const auto& line : c.values.describe()) sawOverride = sawOverride || line == "optim.lr = 0.0003  # --set";
  EXPECT_TRUE(sawOverride);
}

TEST(RunConfig, UnknownKeyIsNamedWithSuggestion) {
  const auto error = errorOf(std::string(kMinimal) + "[train]\nseqlen = 64\n");
  EXPECT_NE(error.find("run.toml: unknown key 'train.seqlen' (did you mean 'train.seq_len'?)"), std::string::npos)
      << error;
  const auto viaSet = errorOf(kMinimal, {"optim.learning_rate=1"});
  EXPECT_NE(viaSet.find("--set: unknown key 'optim.learning_rate'"), std::string::npos) << viaSet;
}

TEST(RunConfig, WrongTypesAndValues) {
  EXPECT_NE(
      errorOf(std::string(kMinimal) + "[train]\nseq_len = \"long\"\n").find("key 'train.seq_len' must be an integer"),
      std::string::npos);
  EXPECT_NE(errorOf(kMinimal, {"train.seq_len=abc"}).find("--set train.seq_len: value 'abc' is not an integer"),
            std::string::npos);
  EXPECT_NE(errorOf(kMinimal, {"optim.mode=later"}).find("optim.mode = \"later\": expected one of \"sync\", \"async\""),
            std::string::npos)
      << errorOf(kMinimal, {"optim.mode=later"});
  EXPECT_NE(errorOf(kMinimal, {"train.global_batch=6", "train.microbatches=4"})
                .find("train.global_batch = 6 is not a multiple of train.microbatches = 4"),
            std::string::npos);
  EXPECT_NE(errorOf(kMinimal, {"lora.targets=q,x"}).find("lora.targets contains \"x\""), std::string::npos);
  EXPECT_NE(errorOf(kMinimal, {"lora.base_dtype=nf4"}).find("lora.base_dtype = \"nf4\" needs lora.rank > 0"),
            std::string::npos)
      << errorOf(kMinimal, {"lora.base_dtype=nf4"});
  EXPECT_NE(errorOf(kMinimal, {"lora.rank=4", "lora.base_dtype=int4"})
                .find("lora.base_dtype = \"int4\": expected one of \"model\", \"nf4\""),
            std::string::npos)
      << errorOf(kMinimal, {"lora.rank=4", "lora.base_dtype=int4"});
  EXPECT_NE(errorOf(kMinimal, {"optim.beta2=1.0"}).find("optim.beta2 = 1: must be in [0, 1)"), std::string::npos)
      << errorOf(kMinimal, {"optim.beta2=1.0"});
  EXPECT_NE(errorOf(kMinimal, {"train.seq_len"}).find("--set 'train.seq_len': expected key=value"), std::string::npos);
  EXPECT_NE(errorOf(kMinimal, {"optim.state_bits=4"}).find("optim.state_bits = 4: expected 32 or 8"), std::string::npos)
      << errorOf(kMinimal, {"optim.state_bits=4"});
  EXPECT_NE(errorOf(kMinimal, {"optim.state_bits=8", "optim.amsgrad=true"})
                .find("optim.amsgrad needs 32-bit states (optim.state_bits = 32)"),
            std::string::npos)
      << errorOf(kMinimal, {"optim.state_bits=8", "optim.amsgrad=true"});
}

// optim.mode alone gives staleness 0 or 1; optim.staleness alone decides the mode; both must agree, unless a
// --set of one overrides the file's other (one notice says so).
TEST(RunConfig, OptimModeAndStaleness) {
  EXPECT_EQ(loadRunConfig(writeToml(kMinimal), {}).optim.staleness, 0);  // sync by default
  EXPECT_EQ(loadRunConfig(writeToml(kMinimal), {"optim.mode=async"}).optim.staleness, 1);
  const RunConfig three = loadRunConfig(writeToml(kMinimal), {"optim.staleness=3"});
  EXPECT_EQ(three.optim.staleness, 3);
  EXPECT_TRUE(three.optim.async());
  EXPECT_TRUE(three.notices.empty());
  EXPECT_EQ(loadRunConfig(writeToml(std::string(kMinimal) + "[optim]\nmode = \"async\"\nstaleness = 2\n"), {})
                .optim.staleness,
            2);
  EXPECT_FALSE(loadRunConfig(writeToml(kMinimal), {"optim.staleness=0"}).optim.async());

  // The file says sync (configs/tiny-finetune.toml does); --set optim.staleness=2 wins, and says so.
  const RunConfig overridden =
      loadRunConfig(writeToml(std::string(kMinimal) + "[optim]\nmode = \"sync\"\n"), {"optim.staleness=2"});
  EXPECT_EQ(overridden.optim.staleness, 2);
  ASSERT_EQ(overridden.notices.size(), 1u);
  EXPECT_NE(overridden.notices[0].find("--set optim.staleness = 2 overrides"), std::string::npos)
      << overridden.notices[0];
  EXPECT_NE(overridden.notices[0].find("run.toml's optim.mode = \"sync\": the mode is async"), std::string::npos)
      << overridden.notices[0];
  // The file's staleness, --set optim.mode: the mode wins.
  const std::string stale2 = std::string(kMinimal) + "[optim]\nstaleness = 2\n";
  const RunConfig toSync = loadRunConfig(writeToml(stale2), {"optim.mode=sync"});
  EXPECT_EQ(toSync.optim.staleness, 0);
  ASSERT_EQ(toSync.notices.size(), 1u);
  EXPECT_NE(toSync.notices[0].find("--set optim.mode = \"sync\" overrides"), std::string::npos) << toSync.notices[0];
  EXPECT_EQ(loadRunConfig(writeToml(std::string(kMinimal) + "[optim]\nstaleness = 0\n"), {"optim.mode=async"})
                .optim.staleness,
            1);
  // Two --sets, or one file, that disagree stay an error.
  EXPECT_NE(errorOf(kMinimal, {"optim.mode=async", "optim.staleness=0"}).find("disagree"), std::string::npos);
  const auto inFile = errorOf(std::string(kMinimal) + "[optim]\nmode = \"sync\"\nstaleness = 2\n");
  EXPECT_NE(inFile.find("run.toml: optim.mode = \"sync\" and optim.staleness = 2 disagree"), std::string::npos)
      << inFile;
  const auto tooStale = errorOf(kMinimal, {"optim.staleness=9"});
  EXPECT_NE(tooStale.find("--set: optim.staleness = 9: must be in [0, 8]"), std::string::npos) << tooStale;
  EXPECT_NE(errorOf(kMinimal, {"optim.staleness=-1"}).find("must be in [0, 8]"), std::string::npos);
}

// NaN passes every range check (every comparison is false): the schema refuses it, and infinity, for every
// float key, from the file and from --set.
TEST(RunConfig, EveryFloatKeyRefusesNanAndInfinity) {
  std::size_t floats = 0;
  for (const KeySpec& spec : runSchema()) {
    if (spec.type != Type::kFloat) continue;
    ++floats;
    const std::string key = spec.key;
    for (const std::string word : {"nan", "inf", "-inf", "+nan"}) {
      const auto viaSet = errorOf(kMinimal, {key + "=" + word});
      EXPECT_NE(viaSet.find("--set: key '" + key + "'"), std::string::npos) << key << "=" << word << ": " << viaSet;
      EXPECT_NE(viaSet.find("must be a finite number"), std::string::npos) << viaSet;
    }
    const auto inFile = errorOf("model.path = \"m\"\ndata.path = \"d.txt\"\n" + key + " = nan\n");
    EXPECT_NE(inFile.find("run.toml: key '" + key + "' = nan: must be a finite number"), std::string::npos) << inFile;
  }
  EXPECT_GE(floats, 19u) << "the schema's float keys (19 when written)";
}

TEST(RunConfig, BackendKeys) {
  const auto config = loadRunConfig(writeToml(kMinimal), {});
  EXPECT_EQ(config.pipeline.backend, device::BackendChoice::kAuto);
  EXPECT_EQ(config.pipeline.ranksPerGpu, 1);
  EXPECT_EQ(loadRunConfig(writeToml(kMinimal), {"pipeline.backend=cuda"}).pipeline.backend,
            device::BackendChoice::kCuda);
  EXPECT_NE(errorOf(kMinimal, {"pipeline.backend=gpu"})
                .find("pipeline.backend = \"gpu\": expected one of \"auto\", \"cpu\", \"cuda\""),
            std::string::npos)
      << errorOf(kMinimal, {"pipeline.backend=gpu"});
  EXPECT_NE(errorOf(kMinimal, {"pipeline.ranks_per_gpu=0"}).find("pipeline.ranks_per_gpu"), std::string::npos);
  const std::string shared = errorOf(kMinimal, {"pipeline.tensor_channel=nccl", "pipeline.ranks_per_gpu=2"});
  EXPECT_NE(shared.find("pipeline.tensor_channel = \"nccl\" needs one GPU per rank, and pipeline.ranks_per_gpu = 2"),
            std::string::npos)
      << shared;
  EXPECT_NE(errorOf(kMinimal, {"pipeline.memory_reserve_gb=-1"}).find("pipeline.memory_reserve_gb"), std::string::npos);
  EXPECT_EQ(config.pipeline.tensorChannel, TensorChannelKind::kHost);
  EXPECT_EQ(loadRunConfig(writeToml(kMinimal), {"pipeline.tensor_channel=direct"}).pipeline.tensorChannel,
            TensorChannelKind::kDirect);
  EXPECT_EQ(loadRunConfig(writeToml(kMinimal), {"pipeline.tensor_channel=nccl"}).pipeline.tensorChannel,
            TensorChannelKind::kNccl);
  EXPECT_NE(errorOf(kMinimal, {"pipeline.tensor_channel=gloo"})
                .find("pipeline.tensor_channel = \"gloo\": expected one of \"host\", \"direct\", \"nccl\""),
            std::string::npos);
  // The emulated device's host costs (Note [What a GPU host pays]): its waits block and its memory is pinned
  // unless asked.
  EXPECT_EQ(config.pipeline.emulatedWaits, "block");
  EXPECT_TRUE(config.pipeline.emulatedPinned);
  EXPECT_EQ(loadRunConfig(writeToml(kMinimal), {"pipeline.emulated_waits=spin"}).pipeline.emulatedWaits, "spin");
  EXPECT_NE(errorOf(kMinimal, {"pipeline.emulated_waits=busy"})
                .find("pipeline.emulated_waits = \"busy\": expected \"block\" or \"spin\""),
            std::string::npos)
      << errorOf(kMinimal, {"pipeline.emulated_waits=busy"});
}

// pipeline.dispatch: round-robin unless asked; earliest finish only where jobs move between workers.
TEST(RunConfig, DispatchRule) {
  EXPECT_EQ(loadRunConfig(writeToml(kMinimal), {}).pipeline.dispatch, schedule::DispatchRule::kRoundRobin);
  const auto uneven = loadRunConfig(writeToml(kMinimal), {"pipeline.dispatch=earliest_finish"});
  EXPECT_EQ(uneven.pipeline.dispatch, schedule::DispatchRule::kEarliestFinish);
  EXPECT_NO_THROW(checkPipelineRun(uneven, 1));
  EXPECT_NE(errorOf(kMinimal, {"pipeline.dispatch=fastest"})
                .find("pipeline.dispatch = \"fastest\": expected one of \"round_robin\", \"earliest_finish\""),
            std::string::npos)
      << errorOf(kMinimal, {"pipeline.dispatch=fastest"});
  const auto bound =
      loadRunConfig(writeToml(kMinimal), {"pipeline.dispatch=earliest_finish", "pipeline.schedule=1f1b"});
  try {
    checkPipelineRun(bound, 1);
    ADD_FAILURE() << "expected InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("pipeline.dispatch = \"earliest_finish\" needs pipeline.schedule = "
                                         "\"roundpipe\" (\"1f1b\" binds each stage to one worker)"),
              std::string::npos)
        << e.what();
  }
}

// output.dir (and checkpoint.dir) naming a file, or under one, is a usage error naming the key, before the run
// starts; a directory that does not exist yet is fine.
TEST(RunConfig, OutputDirThatCannotBeADirectoryIsNamed) {
  const std::string file = test::scratchDir() + "/run.toml";  // errorOf writes the config there: a file
  const auto direct = errorOf(kMinimal, {"output.dir=" + file});
  EXPECT_NE(direct.find("--set: output.dir = \"" + file + "\": \"" + file + "\" is a file, not a directory"),
            std::string::npos)
      << direct;
  const auto below = errorOf(kMinimal, {"output.dir=" + file + "/run/1"});
  EXPECT_NE(below.find("output.dir = \"" + file + "/run/1\": \"" + file + "\" is a file"), std::string::npos) << below;
  EXPECT_NE(errorOf(kMinimal, {"checkpoint.dir=" + file}).find("checkpoint.dir"), std::string::npos);
  EXPECT_EQ(loadRunConfig(writeToml(kMinimal), {"output.dir=" + test::scratchDir() + "/new/deeper"}).output.dir,
            test::scratchDir() + "/new/deeper");
  EXPECT_EQ(loadRunConfig(writeToml(kMinimal), {"output.dir=relative/out"}).output.dir, "relative/out");
}

TEST(RunConfig, RequiredKeysAndSyntaxErrors) {
  EXPECT_NE(errorOf("[data]\npath = \"d\"\n").find("required key 'model.path' is missing"), std::string::npos);
  const auto syntax = errorOf("[model\npath = 1\n");
  EXPECT_NE(syntax.find("run.toml:1:"), std::string::npos) << syntax;
}

}  // namespace
}  // namespace rp::config
