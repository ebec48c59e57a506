// LoRA adapters: PEFT initialisation (a fresh adapter changes nothing), PEFT names, frozen base.
#include <cmath>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "common/error.h"
#include "model/causal_lm.h"
#include "model/lora.h"

namespace rp::model {
namespace {

ModelConfig tinyConfig() {
  ModelConfig c;
  c.vocabSize = 40;
  c.hiddenSize = 16;
  c.intermediateSize = 24;
  c.numLayers = 2;
  c.numHeads = 2;
  c.numKvHeads = 1;
  c.headDim = 8;
  c.maxPositions = 32;
  return c;
}

std::shared_ptr<CausalLM> tiny() {
  auto model = std::make_shared<CausalLM>(tinyConfig(), torch::kFloat);
  torch::manual_seed(1);
  torch::NoGradGuard noGrad;
  for (auto& [n, p] : model->hfParameters()) p.copy_(torch::randn(p.sizes()) * 0.3);
  return model;
}

TEST(Lora, FreshAdapterChangesNothingAndTrainsOnlyAdapters) {
  auto model = tiny();
  const auto batch = causalBatch(torch::randint(40, {2, 9}, torch::kInt64));
  torch::Tensor before;
  {
    torch::NoGradGuard noGrad;
    before = model->logits(batch);
  }
  torch::manual_seed(5);
  const auto adapters = attachLora(*model, LoraConfig{4, 8.0, 0.0, {"q", "v", "down"}});
  ASSERT_EQ(adapters.size(), 2u * 3u * 2u);  // layers x targets x (A, B)
  EXPECT_EQ(adapters[0].first, "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight");
  EXPECT_EQ(adapters[5].first, "base_model.model.model.layers.0.mlp.down_proj.lora_B.weight");
  for (const auto& [name, t] : adapters) {
    if (name.find("lora_B") != std::string::npos) {
      EXPECT_EQ(t.abs().max().item<float>(), 0.0f) << name;
    } else {
      // Kaiming-uniform(a=sqrt(5)): U(-1/sqrt(in), 1/sqrt(in)), and not all zero
      const double bound = 1.0 / std::sqrt(static_cast<double>(t.size(1)));
      EXPECT_LE(t.abs().max().item<double>(), bound) << name;
      EXPECT_GT(t.abs().max().item<double>(), 0.5 * bound) << name;
    }
  }
  {
    torch::NoGradGuard noGrad;
    EXPECT_TRUE(torch::equal(model->logits(batch), before));
  }
  for (const auto& [n, p] : model->hfParameters()) EXPECT_FALSE(p.requires_grad()) << n;

  // Gradients reach the adapters only; once B is non-zero the output moves.
  for (const auto& [n, t] : adapters) t.set_requires_grad(true);
  model->loss(batch).sum.backward();
  EXPECT_TRUE(adapters[1].second.grad().defined());
  EXPECT_GT(adapters[1].second.grad().abs().sum().item<double>(), 0.0);
  {
    torch::NoGradGuard noGrad;
    adapters[1].second.fill_(0.1f);
    EXPECT_FALSE(torch::allclose(model->logits(batch), before));
  }
}

std::shared_ptr<CausalLM> tinyMoe(std::vector<std::int64_t> denseLayers) {
  ModelConfig c = tinyConfig();
  c.arch = Architecture::kQwen3Moe;
  c.moe.numExperts = 4;
  c.moe.expertsPerToken = 2;
  c.moe.expertIntermediateSize = 8;
  c.moe.mlpOnlyLayers = std::move(denseLayers);
  return std::make_shared<CausalLM>(c, torch::kFloat);
}

// Experts take no adapter, and PEFT reads gate/up/down on a MoE model as the experts: the MLP targets are left
// out on every layer, dense ones included; with nothing else to adapt it is an error.
TEST(Lora, MoeModelsAdaptAttentionOnly) {
  auto mixed = tinyMoe({1});
  LoraConfig config;
  config.rank = 2;
  config.targets = {"q", "gate"};
  std::vector<std::string> names;
  for (const auto& [name, t] : attachLora(*mixed, config)) names.push_back(name);
  EXPECT_EQ(names, (std::vector<std::string>{"base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight",
                                             "base_model.model.model.layers.0.self_attn.q_proj.lora_B.weight",
                                             "base_model.model.model.layers.1.self_attn.q_proj.lora_A.weight",
                                             "base_model.model.model.layers.1.self_attn.q_proj.lora_B.weight"}));
  resetLora(*mixed, config);

  config.targets = {"gate", "down"};
  try {
    attachLora(*tinyMoe({}), config);
    FAIL() << "no error for MLP-only targets on a MoE model";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("lora.targets [gate, down]: on a mixture-of-experts model only the attention"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace rp::model
