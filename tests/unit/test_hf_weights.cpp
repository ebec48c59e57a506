// Loading Hugging Face checkpoints into the layer list: names, dtypes, tied embeddings, and the errors
// for checkpoints that do not match their config.
#include <fstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "common/error.h"
#include "model/causal_lm.h"
#include "model/expert_layout.h"
#include "model/libtorch.h"
#include "model/safetensors.h"
#include "support/fixtures.h"
#include "support/safetensors_writer.h"

namespace rp::model {
namespace {

using nlohmann::json;

json configJson(bool tied) {
  return {{"model_type", "llama"},
          {"vocab_size", 50},
          {"hidden_size", 16},
          {"intermediate_size", 24},
          {"num_hidden_layers", 1},
          {"num_attention_heads", 2},
          {"num_key_value_heads", 1},
          {"tie_word_embeddings", tied},
          {"max_position_embeddings", 32}};
}

std::vector<float> values(const torch::Tensor& t) {
  const auto c = t.to(torch::kFloat).contiguous();
  return {c.data_ptr<float>(), c.data_ptr<float>() + c.numel()};
}

// Writes config.json and a float32 model.safetensors with every tensor of `model` under its HF name,
// except `skip`; `rename` maps an HF name to the stored one.
void writeCheckpoint(const std::string& dir, const json& config, CausalLM& model, const std::string& skip = "",
                     const std::map<std::string, std::string>& rename = {}) {
  std::ofstream(dir + "/config.json") << config.dump();
  std::vector<test::FloatTensor> tensors;
  for (auto& [name, p] : model.hfParameters()) {
    if (name == skip) continue;
    const auto it = rename.find(name);
    tensors.push_back({it == rename.end() ? name : it->second, p.sizes().vec(), values(p)});
  }
  test::writeFloatSafetensors(dir + "/model.safetensors", tensors);
}

std::shared_ptr<CausalLM> randomModel(const json& config) {
  auto model = std::make_shared<CausalLM>(parseModelConfig(config, "test"), torch::kFloat);
  torch::manual_seed(11);
  torch::NoGradGuard noGrad;
  for (auto& [name, p] : model->hfParameters()) p.copy_(torch::randn(p.sizes()));
  return model;
}

std::string loadError(const std::string& dir) {
  try {
    loadHfModel(dir, torch::kFloat);
  } catch (const InputError& e) {
    return e.what();
  }
  return "no error";
}

void expectSameParameters(const CausalLM& a, const CausalLM& b) {
  const auto pa = a.hfParameters(), pb = b.hfParameters();
  ASSERT_EQ(pa.size(), pb.size());
  for (std::size_t i = 0; i < pa.size(); ++i) {
    EXPECT_EQ(pa[i].first, pb[i].first);
    EXPECT_TRUE(torch::equal(pa[i].second, pb[i].second)) << pa[i].first;
  }
}

TEST(HfWeights, RoundTripsEveryParameter) {
  const std::string dir = test::scratchDir();
  auto source = randomModel(configJson(false));
  writeCheckpoint(dir, configJson(false), *source);
  auto loaded = loadHfModel(dir, torch::kFloat);
  expectSameParameters(*source, *loaded);
}

TEST(HfWeights, Bf16CheckpointIntoFloatModel) {
  const std::string dir = test::scratchDir();
  std::ofstream(dir + "/config.json") << configJson(true).dump();
  auto reference = randomModel(configJson(true));
  json header = json::object();
  std::vector<std::uint8_t> data;
  for (auto& [name, p] : reference->hfParameters()) {
    const auto bf = p.to(torch::kBFloat16).contiguous();
    const auto begin = data.size();
    data.resize(begin + static_cast<std::size_t>(bf.nbytes()));
    std::memcpy(data.data() + begin, bf.data_ptr(), static_cast<std::size_t>(bf.nbytes()));
    header[name] = {{"dtype", "BF16"}, {"shape", p.sizes().vec()}, {"data_offsets", {begin, data.size()}}};
  }
  test::writeRawSafetensors(dir + "/model.safetensors", header, data);
  auto loaded = loadHfModel(dir, torch::kFloat);
  auto want = reference->hfParameters();
  auto got = loaded->hfParameters();
  for (std::size_t i = 0; i < want.size(); ++i) {
    EXPECT_TRUE(torch::equal(got[i].second, want[i].second.to(torch::kBFloat16).to(torch::kFloat))) << got[i].first;
  }
}

TEST(HfWeights, TiedEmbeddingStoredOnlyAsLmHead) {
  const std::string dir = test::scratchDir();
  auto source = randomModel(configJson(true));
  writeCheckpoint(dir, configJson(true), *source, "", {{"model.embed_tokens.weight", "lm_head.weight"}});
  auto loaded = loadHfModel(dir, torch::kFloat);
  EXPECT_TRUE(torch::equal(loaded->embedding().weight, source->embedding().weight));
  torch::NoGradGuard noGrad;
  const auto batch = causalBatch(torch::randint(50, {1, 6}, torch::kInt64));
  EXPECT_TRUE(torch::equal(loaded->logits(batch), source->logits(batch)));
}

TEST(HfWeights, MissingTensorIsNamed) {
  const std::string dir = test::scratchDir();
  auto source = randomModel(configJson(false));
  writeCheckpoint(dir, configJson(false), *source, "model.layers.0.mlp.up_proj.weight");
  const auto error = loadError(dir);
  EXPECT_NE(error.find("tensor 'model.layers.0.mlp.up_proj.weight' is missing"), std::string::npos) << error;
}

TEST(HfWeights, UntiedHeadMissingIsNamed) {
  const std::string dir = test::scratchDir();
  auto source = randomModel(configJson(false));
  writeCheckpoint(dir, configJson(false), *source, "lm_head.weight");
  EXPECT_NE(loadError(dir).find("'lm_head.weight' is missing"), std::string::npos) << loadError(dir);
}

TEST(HfWeights, ShapeMismatchNamesTensorAndBothShapes) {
  const std::string dir = test::scratchDir();
  auto source = randomModel(configJson(false));
  json bigger = configJson(false);
  bigger["intermediate_size"] = 32;
  writeCheckpoint(dir, configJson(false), *source);
  std::ofstream(dir + "/config.json") << bigger.dump();
  const auto error = loadError(dir);
  EXPECT_NE(error.find("'model.layers.0.mlp.gate_proj.weight' has shape [24, 16] but config.json implies [32, 16]"),
            std::string::npos)
      << error;
}

TEST(HfWeights, IntegerWeightIsRejected) {
  const std::string dir = test::scratchDir();
  auto source = randomModel(configJson(true));
  std::ofstream(dir + "/config.json") << configJson(true).dump();
  json header = json::object();
  std::vector<std::uint8_t> data;
  for (auto& [name, p] : source->hfParameters()) {
    const auto begin = data.size();
    data.resize(begin + static_cast<std::size_t>(p.numel()) * 4);
    header[name] = {{"dtype", name == "model.norm.weight" ? "I32" : "F32"},
                    {"shape", p.sizes().vec()},
                    {"data_offsets", {begin, data.size()}}};
  }
  test::writeRawSafetensors(dir + "/model.safetensors", header, data);
  const auto error = loadError(dir);
  EXPECT_NE(error.find("'model.norm.weight' has dtype I32"), std::string::npos) << error;
}

// The values the fixture's source repository publishes for its own loader test (fixtures NOTICE.md).
TEST(HfWeights, TinyStoriesPublishedReferenceWeights) {
  const auto fixtures = test::fixturesDir();
  RP_SKIP_UNLESS(fixtures, "shared fixtures");
  auto model = loadHfModel(*fixtures + "/models/tinystories-656k", torch::kFloat);
  std::map<std::string, torch::Tensor> byName;
  for (auto& [name, p] : model->hfParameters()) byName[name] = p.flatten();
  byName["lm_head.weight"] = model->embedding().weight.flatten();  // tied
  const std::vector<std::tuple<std::string, int, float>> expected = {
      {"lm_head.weight", 50, 0.14453125f},
      {"model.layers.0.input_layernorm.weight", 10, 0.18652344f},
      {"model.layers.1.post_attention_layernorm.weight", 10, 0.32421875f},
      {"model.norm.weight", 100, 0.73046875f},
      {"model.layers.0.mlp.down_proj.weight", 100, -0.0625f},
      {"model.layers.0.mlp.up_proj.weight", 100, 1.46875f},
      {"model.layers.1.mlp.gate_proj.weight", 100, 0.296875f},
      {"model.layers.1.self_attn.q_proj.weight", 100, 0.032226563f},
      {"model.layers.1.self_attn.k_proj.weight", 100, -0.21386719f},
      {"model.layers.0.self_attn.v_proj.weight", 100, 0.041015625f},
      {"model.layers.0.self_attn.o_proj.weight", 100, 0.01965332f},
  };
  for (const auto& [name, index, value] : expected) {
    ASSERT_TRUE(byName.count(name)) << name;
    EXPECT_FLOAT_EQ(byName[name][index].item<float>(), value) << name << "[" << index << "]";
  }
}

json moeConfigJson() {
  json j = configJson(false);
  j["model_type"] = "qwen3_moe";
  j["head_dim"] = 8;
  j["num_hidden_layers"] = 2;
  j["num_experts"] = 3;
  j["num_experts_per_tok"] = 2;
  j["moe_intermediate_size"] = 6;
  j["mlp_only_layers"] = {1};
  return j;
}

// A MoE model's tensors as a published checkpoint stores them: one tensor per expert projection.
void writePublishedMoe(const std::string& dir, CausalLM& model, const std::string& skip = "") {
  std::ofstream(dir + "/config.json") << moeConfigJson().dump();
  std::map<std::string, torch::Tensor> byName;
  for (auto& [name, p] : model.hfParameters()) byName[name] = p.detach();
  toPublishedLayout(byName);
  std::vector<test::FloatTensor> tensors;
  for (auto& [name, t] : byName) {
    if (name != skip) tensors.push_back({name, t.sizes().vec(), values(t)});
  }
  test::writeFloatSafetensors(dir + "/model.safetensors", tensors);
}

TEST(HfWeights, MoeExpertsLoadFromThePublishedPerExpertLayout) {
  const std::string dir = test::scratchDir();
  auto source = randomModel(moeConfigJson());
  ASSERT_TRUE(source->decoderLayer(0).sparse());
  ASSERT_FALSE(source->decoderLayer(1).sparse());
  writePublishedMoe(dir, *source);
  const auto stored = safetensors::CheckpointReader(dir).names();
  EXPECT_NE(std::find(stored.begin(), stored.end(), "model.layers.0.mlp.experts.2.up_proj.weight"), stored.end());
  EXPECT_EQ(std::find(stored.begin(), stored.end(), "model.layers.0.mlp.experts.gate_up_proj"), stored.end());
  auto loaded = loadHfModel(dir, torch::kFloat);
  expectSameParameters(*source, *loaded);
  // transformers 5's in-memory (stacked) names load as they are.
  const std::string stackedDir = test::scratchDir();
  writeCheckpoint(stackedDir, moeConfigJson(), *source);
  expectSameParameters(*source, *loadHfModel(stackedDir, torch::kFloat));
}

TEST(HfWeights, MoeMissingExpertTensorIsNamed) {
  const std::string dir = test::scratchDir();
  auto source = randomModel(moeConfigJson());
  writePublishedMoe(dir, *source, "model.layers.0.mlp.experts.1.up_proj.weight");
  const auto error = loadError(dir);
  EXPECT_NE(error.find("tensor 'model.layers.0.mlp.experts.1.up_proj.weight' is missing"), std::string::npos) << error;
}

}  // namespace
}  // namespace rp::model
