// roundpipe_export's files load in transformers / PEFT (from .venv) and give roundpipe's logits: a model
// trained for 3 steps (full fine-tune, sharded into several safetensors files; LoRA merged; LoRA as a PEFT
// adapter) is exported from its checkpoint and checked by tests/golden/check_export.py.
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>
#include <torch/torch.h>
#include <nlohmann/json.hpp>

#include "common/error.h"
#include "config/run_config.h"
#include "export/hf_export.h"
#include "model/safetensors_writer.h"
#include "support/fixtures.h"
#include "train/trainer.h"

namespace rp::exporting {
namespace {
namespace fs = std::filesystem;

struct Case {
  const char* name;
  std::vector<std::string> sets;
};
void PrintTo(const Case& c, std::ostream* os) {
  *os << c.name;
}

class ExportTest : public ::testing::TestWithParam<Case> {};

TEST_P(ExportTest, TransformersAndPeftGiveOurLogits) {
  const auto fixtures = test::fixturesDir();
  RP_SKIP_UNLESS(fixtures, "shared fixtures");
  const std::string out = test::scratchDir(), model = *fixtures + "/models/tinystories-656k";
  std::vector<std::string> sets{"model.path=" + model,  "data.path=" + *fixtures + "/text/tinyshakespeare.txt",
                                "train.seq_len=32",     "train.global_batch=4",
                                "train.microbatches=1", "train.max_steps=3",
                                "train.threads=1",      "optim.lr=1e-2",
                                "output.dir=" + out};
  const bool lora = GetParam().sets.size() > 0;
  sets.insert(sets.end(), GetParam().sets.begin(), GetParam().sets.end());
  train::Trainer trainer(config::loadRunConfig("", sets));
  ASSERT_TRUE(trainer.run());

  // Our logits with the trained weights, for Python to compare against.
  torch::NoGradGuard noGrad;
  const torch::Tensor ids =
      (torch::arange(1, 41, torch::kLong) * 37 % trainer.model().config().vocabSize).view({1, -1});
  const torch::Tensor logits = trainer.model().logits(model::causalBatch(ids)).contiguous();
  safetensors::writeFile(out + "/ours.safetensors",
                         {{"input_ids", safetensors::DType::kI64, ids.sizes().vec(), ids.data_ptr()},
                          {"logits", safetensors::DType::kF32, logits.sizes().vec(), logits.data_ptr()}});

  const fs::path checkpoint = fs::path(out) / "checkpoints" / "step-00000003";
  exportCheckpoint(checkpoint, out + "/hf", {false, "float32", 1e6});  // 1 MB shards: several files
  std::string command = fmt::format("{} {}/tests/golden/check_export.py --ours {}/ours.safetensors --model {}/hf",
                                    RP_PYTHON, RP_SOURCE_DIR, out, out);
  if (lora) {
    exportCheckpoint(checkpoint, out + "/peft", {true, "", 5e9});
    EXPECT_TRUE(fs::exists(out + "/peft/adapter_config.json"));
    command += fmt::format(" --adapter {}/peft --base {}", out, model);
  } else {
    // A bfloat16 export loads in bfloat16 where the user passes no dtype (the base's config says float32).
    exportCheckpoint(checkpoint, out + "/hf-bf16", {false, "bfloat16", 5e9});
    command += fmt::format(" --low-precision {}/hf-bf16 --expect-dtype bfloat16", out);
    std::ifstream in(out + "/hf-bf16/config.json");
    const auto config = nlohmann::json::parse(in);
    EXPECT_EQ(config.value("dtype", ""), "bfloat16") << "transformers 5.x reads dtype";
    EXPECT_EQ(config.value("torch_dtype", ""), "bfloat16") << "transformers 4.x reads torch_dtype";
    EXPECT_TRUE(fs::exists(out + "/hf/model.safetensors.index.json")) << "expected a sharded export";
    int shards = 0;
    for (const auto& e : fs::directory_iterator(out + "/hf"))
      shards += e.path().filename().string().rfind("model-0", 0) == 0;
    EXPECT_GE(shards, 2);
  }
  EXPECT_TRUE(fs::exists(out + "/hf/tokenizer.json"));
  EXPECT_EQ(std::system(command.c_str()), 0) << command;
}

INSTANTIATE_TEST_SUITE_P(Runs, ExportTest,
                         ::testing::Values(Case{"full", {}}, Case{"lora", {"lora.rank=4", "lora.alpha=8"}}),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace rp::exporting
