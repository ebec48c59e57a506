// What the trainer and the pipeline set up alike from a run config (run/setup.h): the warnings at start, and the
// line on 8-bit moments.
#include <gtest/gtest.h>

#include "config/run_config.h"
#include "model/config.h"
#include "run/preemption.h"
#include "run/setup.h"

namespace rp::run {
namespace {

config::RunConfig runConfig(const std::vector<std::string>& sets) {
  std::vector<std::string> all{"model.path=some-model", "data.path=d.txt"};
  all.insert(all.end(), sets.begin(), sets.end());
  return config::loadRunConfig("", all);
}

model::ModelConfig modelWithPositions(std::int64_t positions, const std::string& rope = "default") {
  model::ModelConfig m;
  m.maxPositions = positions;
  m.rope.type = rope;
  return m;
}

constexpr const char* kAvx2 = "fpu sse2 avx avx2 f16c fma";
constexpr const char* kSapphireRapids = "avx2 avx512f avx512_bf16 amx_bf16 avx512_fp16 amx_tile";

TEST(StartWarnings, SequenceLengthBeyondTheModelsPositionsNamesBothValues) {
  EXPECT_TRUE(startWarnings(runConfig({"train.seq_len=512"}), modelWithPositions(512), true, kAvx2).empty());
  const auto plain = startWarnings(runConfig({"train.seq_len=1024"}), modelWithPositions(512), true, kAvx2);
  ASSERT_EQ(plain.size(), 1u);
  EXPECT_NE(plain[0].find("train.seq_len = 1024 is beyond the model's max_position_embeddings = 512 "
                          "(some-model/config.json)"),
            std::string::npos)
      << plain[0];
  EXPECT_NE(plain[0].find("never trained on (it has no RoPE scaling)"), std::string::npos) << plain[0];
  const auto scaled = startWarnings(runConfig({"train.seq_len=1024"}), modelWithPositions(512, "yarn"), true, kAvx2);
  ASSERT_EQ(scaled.size(), 1u);
  EXPECT_NE(scaled[0].find("its yarn RoPE scaling"), std::string::npos) << scaled[0];
}

// bitsandbytes' rule (min_8bit_size 4,096; embeddings in 32 bits) on a Llama's names: of these, only the MLP weight.
TEST(EightBitLine, CountsTheTensorsThatTakeEightBitsAndWarnsWhereNoneDoes) {
  const std::vector<std::pair<std::string, std::size_t>> full = {{"model.embed_tokens.weight", 8192},
                                                                 {"model.layers.0.mlp.up_proj.weight", 4096},
                                                                 {"model.layers.0.input_layernorm.weight", 64},
                                                                 {"lm_head.weight", 8192}};
  EXPECT_FALSE(eightBitLine(runConfig({}), full).has_value()) << "32-bit states say nothing";
  const auto line = eightBitLine(runConfig({"optim.state_bits=8"}), full);
  ASSERT_TRUE(line.has_value());
  EXPECT_FALSE(line->warning);
  EXPECT_NE(line->text.find("8-bit AdamW moments for 4096 of the 20544 trainable parameters (1 of 4 tensors)"),
            std::string::npos)
      << line->text;
  // LoRA adapters of rank 4 on a hidden size of 512: 2,048 elements each, none takes 8 bits.
  const std::vector<std::pair<std::string, std::size_t>> lora = {
      {"base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight", 2048},
      {"base_model.model.model.layers.0.self_attn.q_proj.lora_B.weight", 2048}};
  const auto none = eightBitLine(runConfig({"optim.state_bits=8"}), lora);
  ASSERT_TRUE(none.has_value());
  EXPECT_TRUE(none->warning);
  for (const char* part :
       {"--set: optim.state_bits = 8 changes nothing", "4096 elements", "the largest of these 2 has 2048"}) {
    EXPECT_NE(none->text.find(part), std::string::npos) << part << " in: " << none->text;
  }
}

TEST(StartWarnings, HalfPrecisionOnACpuWithoutNativeSupportSaysItIsSlow) {
  const auto m = modelWithPositions(4096);
  const auto bf16 = startWarnings(runConfig({"model.dtype=bfloat16"}), m, true, kAvx2);
  ASSERT_EQ(bf16.size(), 1u);
  EXPECT_NE(bf16[0].find("model.dtype = bfloat16 on a CPU without AVX512-BF16 or AMX"), std::string::npos) << bf16[0];
  EXPECT_EQ(startWarnings(runConfig({"model.dtype=float16"}), m, true, kAvx2).size(), 1u);
  EXPECT_TRUE(startWarnings(runConfig({"model.dtype=bfloat16"}), m, true, kSapphireRapids).empty());
  EXPECT_TRUE(startWarnings(runConfig({"model.dtype=float16"}), m, true, kSapphireRapids).empty());
  EXPECT_TRUE(startWarnings(runConfig({"model.dtype=bfloat16"}), m, /*computesOnCpu=*/false, kAvx2).empty());
  EXPECT_TRUE(startWarnings(runConfig({}), m, true, kAvx2).empty());  // float32
  // A flag is a whole word: "avx512_bf16x" is not "avx512_bf16".
  EXPECT_EQ(startWarnings(runConfig({"model.dtype=bfloat16"}), m, true, "avx512_bf16x").size(), 1u);
}

// Under mpirun (its URI in the environment) a kill timeout shorter than kMinKillTimeoutSeconds, Open MPI's
// default 1 s included, gets one warning naming the launcher and the flag; elsewhere, under the launcher, or with
// time enough, none.
TEST(StartWarnings, AnMpirunKillTimeoutTooShortToSaveNamesTheFlag) {
  const char* uri = "2060255232.0;tcp://192.0.2.2:39113";
  const auto unset = killTimeoutWarning(uri, nullptr, nullptr);
  ASSERT_TRUE(unset.has_value());
  EXPECT_NE(unset->find("mpirun gives the ranks 1 s"), std::string::npos) << *unset;
  EXPECT_NE(unset->find("Open MPI's default"), std::string::npos) << *unset;
  EXPECT_NE(unset->find("--mca odls_base_sigkill_timeout 30"), std::string::npos) << *unset;
  EXPECT_NE(unset->find("launch/roundpipe-mpirun"), std::string::npos) << *unset;
  EXPECT_FALSE(killTimeoutWarning(uri, nullptr, "roundpipe-mpirun").has_value());  // the wrapper saves on Ctrl-C
  const auto five = killTimeoutWarning(uri, "5", nullptr);
  ASSERT_TRUE(five.has_value());
  EXPECT_NE(five->find("gives the ranks 5 s"), std::string::npos) << *five;
  EXPECT_FALSE(killTimeoutWarning(uri, "30", nullptr).has_value());
  EXPECT_FALSE(killTimeoutWarning(uri, "10", nullptr).has_value());
  EXPECT_FALSE(killTimeoutWarning(nullptr, nullptr, nullptr).has_value());  // not launched by mpirun (srun, one process)
  EXPECT_FALSE(killTimeoutWarning("", "1", nullptr).has_value());
}

}  // namespace
}  // namespace rp::run
