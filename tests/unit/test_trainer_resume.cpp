// Checkpoints of the single-process trainer: a run resumed from its step-3 checkpoint continues bitwise
// like the run that never stopped (losses and weights), for full fine-tunes, LoRA with dropout (the RNG
// state matters), bf16 weights and fp16 with its loss scaler.
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "common/error.h"
#include "config/run_config.h"
#include "model/libtorch.h"
#include "support/fixtures.h"
#include "train/trainer.h"

namespace rp::train {
namespace {

struct Case {
  const char* name;
  std::vector<std::string> sets;
};

void PrintTo(const Case& c, std::ostream* os) {
  *os << c.name;
}

class ResumeTest : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    fixtures_ = test::fixturesDir();
    if (!fixtures_) GTEST_SKIP() << "shared fixtures not found (set RP_FIXTURES_DIR)";
    root_ = test::scratchDir();
  }

  config::RunConfig configFor(const std::string& out, std::vector<std::string> extra) const {
    std::vector<std::string> sets{"model.path=" + *fixtures_ + "/models/tinystories-656k",
                                  "data.path=" + *fixtures_ + "/text/tinyshakespeare.txt",
                                  "train.seq_len=32",
                                  "train.global_batch=4",
                                  "train.microbatches=2",
                                  "train.max_steps=6",
                                  "train.threads=1",
                                  "optim.lr=3e-3",
                                  "optim.schedule=cosine",
                                  "optim.warmup_steps=2",
                                  "optim.mode=sync",
                                  "checkpoint.every=3",
                                  "output.dir=" + out};
    const auto& c = GetParam().sets;
    sets.insert(sets.end(), c.begin(), c.end());
    sets.insert(sets.end(), extra.begin(), extra.end());
    return config::loadRunConfig("", sets);
  }

  static std::vector<double> losses(const std::string& out) {
    std::ifstream in(out + "/metrics.jsonl");
    std::vector<double> v;
    for (std::string line; std::getline(in, line);) v.push_back(nlohmann::json::parse(line).at("loss").get<double>());
    return v;
  }

  std::optional<std::string> fixtures_;
  std::string root_;
};

TEST_P(ResumeTest, ContinuesBitwiseLikeTheRunThatNeverStopped) {
  const std::string whole = root_ + "/whole", resumed = root_ + "/resumed";
  Trainer a(configFor(whole, {}));
  ASSERT_TRUE(a.run());
  ASSERT_TRUE(std::filesystem::exists(whole + "/checkpoints/step-00000003/manifest.json"));
  ASSERT_TRUE(std::filesystem::exists(whole + "/checkpoints/step-00000006/manifest.json"));

  Trainer b(configFor(resumed, {"checkpoint.resume=" + whole + "/checkpoints/step-00000003"}));
  ASSERT_TRUE(b.run());
  const auto la = losses(whole), lb = losses(resumed);
  ASSERT_EQ(la.size(), 6u);
  ASSERT_EQ(lb.size(), 3u) << "the resumed run logs steps 4..6";
  for (std::size_t i = 0; i < 3; ++i) EXPECT_EQ(la[3 + i], lb[i]) << "step " << 4 + i;
  ASSERT_EQ(a.trainable().size(), b.trainable().size());
  for (std::size_t i = 0; i < a.trainable().size(); ++i) {
    EXPECT_TRUE(torch::equal(a.trainable()[i].second, b.trainable()[i].second)) << a.trainable()[i].first;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Runs, ResumeTest,
    ::testing::Values(Case{"full", {}}, Case{"lora_dropout", {"lora.rank=4", "lora.dropout=0.1"}},
                      // The NF4 base is rebuilt from model.path on resume: the same bytes.
                      Case{"qlora", {"lora.rank=4", "lora.base_dtype=nf4", "lora.double_quant=true"}},
                      Case{"bf16", {"model.dtype=bfloat16"}}, Case{"fp16", {"model.dtype=float16"}},
                      // 8-bit moments: their codes and absmax in the checkpoint (docs/checkpoint-format.md).
                      Case{"eight_bit", {"optim.state_bits=8"}}),
    [](const auto& info) { return std::string(info.param.name); });

class ResumeErrors : public ResumeTest {};

TEST_P(ResumeErrors, ACheckpointOfAnotherSetupIsRefusedNamingTheManifest) {
  const std::string whole = root_ + "/whole";
  Trainer a(configFor(whole, {"train.max_steps=3"}));
  ASSERT_TRUE(a.run());
  const std::string manifest = whole + "/checkpoints/step-00000003/manifest.json";
  // A new run into the same directory would mix its checkpoints with this one's: refused, nothing deleted.
  try {
    Trainer again(configFor(whole, {"train.max_steps=3"}));
    again.run();
    FAIL() << "expected an error";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("already holds checkpoints of an earlier run (newest: step-00000003): "
                                         "continue it with --resume latest"),
              std::string::npos)
        << e.what();
  }
  EXPECT_TRUE(std::filesystem::exists(manifest));
  try {
    Trainer b(configFor(root_ + "/other", {"checkpoint.resume=" + whole + "/checkpoints/latest", "lora.rank=4"}));
    FAIL() << "expected an error";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("no such checkpoint directory"), std::string::npos) << e.what();
  }
  try {
    Trainer b(configFor(root_ + "/other",
                        {"checkpoint.dir=" + whole + "/checkpoints", "checkpoint.resume=latest", "lora.rank=4"}));
    FAIL() << "expected an error";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find(manifest + ": the checkpoint's LoRA settings null differ"), std::string::npos)
        << e.what();
  }
}

// A resume with a changed run config: what would move the data position to other documents, or does not fit
// the optimizer state, is refused naming the manifest and the key; moved files with the same contents resume;
// what changes the trajectory (lr, batch shape, the schedule's length) is named in a warning.
TEST_P(ResumeErrors, AChangedRunConfigIsRefusedOrNamed) {
  const std::string whole = root_ + "/whole";
  Trainer a(configFor(whole, {"train.max_steps=3"}));
  ASSERT_TRUE(a.run());
  const std::string manifest = whole + "/checkpoints/step-00000003/manifest.json";
  const std::string resume = "checkpoint.resume=" + whole + "/checkpoints/step-00000003";
  auto refused = [&](const std::vector<std::string>& sets, const std::string& expected) {
    std::vector<std::string> all{resume};
    all.insert(all.end(), sets.begin(), sets.end());
    try {
      Trainer b(configFor(root_ + "/other", all));
      ADD_FAILURE() << "expected an error for " << sets[0];
    } catch (const InputError& e) {
      EXPECT_EQ(std::string(e.what()).rfind(manifest + ": " + expected, 0), 0u) << e.what();
    }
  };
  refused({"data.path=" + *fixtures_ + "/text/tinystories_sample.txt"},
          "the tokenized dataset is not the checkpoint's (");
  refused({"data.sample_by=line"}, "the tokenized dataset is not the checkpoint's (");
  refused({"train.seed=7"}, "train.seed was 0, now 7: the data order depends on it");
  refused({"optim.amsgrad=true"}, "optim.amsgrad was false, now true: the optimizer state");

  // The same text under another name: the same tokens, so the data position holds.
  const std::string moved = root_ + "/moved.txt";
  std::filesystem::copy_file(*fixtures_ + "/text/tinyshakespeare.txt", moved);
  testing::internal::CaptureStderr();
  {
    Trainer b(configFor(root_ + "/changed",
                        {resume, "data.path=" + moved, "optim.lr=1e-3", "train.seq_len=48", "train.max_steps=5"}));
    EXPECT_TRUE(b.run());
  }
  const std::string log = testing::internal::GetCapturedStderr();
  for (const char* line :
       {"data.path is now", "the tokenized data is the same", "optim.lr was 0.003 in the checkpoint's run, now 0.001",
        "train.seq_len was 32 in the checkpoint's run, now 48",
        "train.max_steps was 3 in the checkpoint's run, now 5: the cosine learning-rate schedule"}) {
    EXPECT_NE(log.find(line), std::string::npos) << line << "\n" << log;
  }
  EXPECT_EQ(losses(root_ + "/changed").size(), 2u) << "steps 4 and 5 ran";
}

INSTANTIATE_TEST_SUITE_P(Runs, ResumeErrors, ::testing::Values(Case{"full", {}}),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace rp::train
