// LoRA adapters: PEFT initialisation (a fresh adapter changes nothing), PEFT names, frozen base.
#include <cmath>
#include <functional>

#include <gtest/gtest.h>

#include "common/error.h"
#include "model/causal_lm.h"
#include "model/config.h"
#include "model/libtorch.h"
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

std::vector<std::string> namesOf(const std::vector<NamedTensor>& tensors) {
  std::vector<std::string> out;
  for (const auto& [name, t] : tensors) out.push_back(name);
  return out;
}

std::string errorOf(const std::function<void()>& f) {
  try {
    f();
  } catch (const InputError& e) {
    return e.what();
  }
  return "no error";
}

// The MLP targets adapt the experts as PEFT's target_parameters do (one adapter per stacked parameter, nested
// names when both are adapted); dense layers of a MoE model keep their MLP unadapted, as in PEFT.
TEST(Lora, MoeModelsAdaptAttentionAndExperts) {
  auto mixed = tinyMoe({1});
  LoraConfig config;
  config.rank = 2;
  config.targets = {"q", "gate", "up", "down"};
  const auto adapters = attachLora(*mixed, config);
  const std::string l0 = "base_model.model.model.layers.0.";
  EXPECT_EQ(namesOf(adapters),
            (std::vector<std::string>{l0 + "self_attn.q_proj.lora_A.weight", l0 + "self_attn.q_proj.lora_B.weight",
                                      l0 + "mlp.experts.base_layer.lora_A.weight",
                                      l0 + "mlp.experts.base_layer.lora_B.weight", l0 + "mlp.experts.lora_A.weight",
                                      l0 + "mlp.experts.lora_B.weight",
                                      "base_model.model.model.layers.1.self_attn.q_proj.lora_A.weight",
                                      "base_model.model.model.layers.1.self_attn.q_proj.lora_B.weight"}));
  // gate_up_proj [E, 2I, H]: A [r E, H], B [2I, r E]; down_proj [E, H, I]: A [r E, I], B [H, r E].
  EXPECT_EQ(adapters[2].second.sizes(), (std::vector<std::int64_t>{8, 16}));
  EXPECT_EQ(adapters[3].second.sizes(), (std::vector<std::int64_t>{16, 8}));
  EXPECT_EQ(adapters[4].second.sizes(), (std::vector<std::int64_t>{8, 8}));
  EXPECT_EQ(adapters[5].second.sizes(), (std::vector<std::int64_t>{16, 8}));
  resetLora(*mixed, config);

  config.targets = {"gate", "up"};  // one expert parameter: PEFT does not nest
  EXPECT_EQ(namesOf(attachLora(*tinyMoe({}), config))[0], l0 + "mlp.experts.lora_A.weight");
  config.targets = {"q", "gate"};
  EXPECT_NE(errorOf([&] { attachLora(*tinyMoe({}), config); }).find("gate and up adapt the experts' fused"),
            std::string::npos);
  config.targets = {"q", "down"};
  config.dropout = 0.1;
  EXPECT_NE(errorOf([&] { attachLora(*tinyMoe({}), config); }).find("lora.dropout = 0.1: the experts' adapters"),
            std::string::npos);
  config.targets = {"q", "v"};
  EXPECT_EQ(errorOf([&] { attachLora(*tinyMoe({}), config); }), "no error");
}

// Phi-3's fused projections: any of q, k, v adapts qkv_proj, any of gate, up adapts gate_up_proj (PEFT's
// target_modules for Phi-3), with the fused widths; a fresh adapter changes nothing.
TEST(Lora, FusedProjectionsAdaptAsPeftNamesThem) {
  ModelConfig c = tinyConfig();
  c.arch = Architecture::kPhi3;
  c.fusedQkv = c.fusedGateUp = true;
  auto model = std::make_shared<CausalLM>(c, torch::kFloat);
  torch::manual_seed(2);
  {
    torch::NoGradGuard noGrad;
    for (auto& [n, p] : model->hfParameters()) p.copy_(torch::randn(p.sizes()) * 0.3);
  }
  const Batch batch = causalBatch(torch::randint(40, {1, 6}, torch::kInt64));
  const auto before = model->logits(batch).detach();
  LoraConfig config;
  config.rank = 2;
  config.targets = {"v", "up", "o"};
  const auto adapters = attachLora(*model, config);
  const std::string l1 = "base_model.model.model.layers.1.";
  EXPECT_EQ(namesOf(adapters)[6], l1 + "self_attn.qkv_proj.lora_A.weight");
  EXPECT_EQ(namesOf(adapters)[8], l1 + "mlp.gate_up_proj.lora_A.weight");
  EXPECT_EQ(namesOf(adapters)[10], l1 + "self_attn.o_proj.lora_A.weight");
  EXPECT_EQ(adapters.size(), 12u);
  // B of qkv: [(H + 2 Hkv) D, r]; B of gate_up: [2 I, r].
  EXPECT_EQ(adapters[7].second.sizes(), (std::vector<std::int64_t>{(2 + 2 * 1) * 8, 2}));
  EXPECT_EQ(adapters[9].second.sizes(), (std::vector<std::int64_t>{2 * 24, 2}));
  EXPECT_TRUE(torch::equal(model->logits(batch), before));
}

// Qwen3.5's linear-attention projections are targets by their module names (PEFT's target_modules): they adapt
// the linear-attention layers alone, q/k/v/o the full-attention ones; a model without linear attention refuses
// them, naming the target.
TEST(Lora, LinearAttentionProjectionsAreTargetsOnQwen35Alone) {
  const ModelConfig c = parseModelConfig({{"model_type", "qwen3_5_text"},
                                          {"vocab_size", 40},
                                          {"hidden_size", 16},
                                          {"intermediate_size", 24},
                                          {"num_hidden_layers", 4},
                                          {"num_attention_heads", 2},
                                          {"num_key_value_heads", 1},
                                          {"head_dim", 8},
                                          {"linear_key_head_dim", 8},
                                          {"linear_value_head_dim", 8},
                                          {"linear_num_key_heads", 1},
                                          {"linear_num_value_heads", 2}},
                                         "cfg.json");
  CausalLM model(c, torch::kFloat);
  LoraConfig config;
  config.rank = 2;
  config.targets = {"q", "in_proj_qkv", "out_proj"};
  const auto adapters = attachLora(model, config);
  std::vector<std::string> names;
  for (std::size_t i = 0; i < adapters.size(); i += 2) names.push_back(adapters[i].first);
  const std::string p = "base_model.model.model.layers.";
  // Layers 0-2 linear, 3 full (full_attention_interval 4).
  EXPECT_EQ(names, (std::vector<std::string>{
                       p + "0.linear_attn.in_proj_qkv.lora_A.weight", p + "0.linear_attn.out_proj.lora_A.weight",
                       p + "1.linear_attn.in_proj_qkv.lora_A.weight", p + "1.linear_attn.out_proj.lora_A.weight",
                       p + "2.linear_attn.in_proj_qkv.lora_A.weight", p + "2.linear_attn.out_proj.lora_A.weight",
                       p + "3.self_attn.q_proj.lora_A.weight"}));
  // in_proj_qkv's B: [2 keyDim + valueDim, r]; out_proj's A: [r, valueDim].
  EXPECT_EQ(adapters[1].second.sizes(), (std::vector<std::int64_t>{2 * 8 + 2 * 8, 2}));
  EXPECT_EQ(adapters[2].second.sizes(), (std::vector<std::int64_t>{2, 2 * 8}));

  CausalLM llama(tinyConfig(), torch::kFloat);
  config.targets = {"q", "in_proj_z"};
  try {
    attachLora(llama, config);
    FAIL() << "a linear-attention target on a model without linear attention was accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("lora.targets contains \"in_proj_z\""), std::string::npos) << e.what();
  }
}

// The export's merged delta is the forward's: x (W + delta_e)^T = x W^T + delta(e, x), in both layouts.
TEST(Lora, ExpertDeltaWeightIsTheForwardsDelta) {
  torch::manual_seed(3);
  LoraConfig config{3, 6.0, 0.0, {}};
  ExpertLoraAdapter adapter(4, 5, 7, config, {});
  torch::NoGradGuard noGrad;
  adapter.b.copy_(torch::randn(adapter.b.sizes()));
  const auto x = torch::randn({6, 5});
  const auto stacked = expertDeltaWeight(adapter.a, adapter.b, 3, 2.0, /*transposed=*/false);
  const auto inputMajor = expertDeltaWeight(adapter.a, adapter.b, 3, 2.0, /*transposed=*/true);
  ASSERT_EQ(stacked.sizes(), (std::vector<std::int64_t>{4, 7, 5}));
  for (std::int64_t e = 0; e < 4; ++e) {
    EXPECT_TRUE(torch::allclose(adapter.delta(e, x), torch::linear(x, stacked[e]), 1e-5, 1e-5)) << e;
    EXPECT_TRUE(torch::allclose(adapter.delta(e, x), torch::matmul(x, inputMajor[e]), 1e-5, 1e-5)) << e;
  }
  // Expert-major A, rank-major B (PEFT's ParamWrapper): expert 1's factors are rows 3..5 of A, columns 1, 5, 9 of B.
  const auto b1 = adapter.b.index_select(1, torch::tensor({1, 5, 9}));
  EXPECT_TRUE(torch::allclose(stacked[1], torch::matmul(b1, adapter.a.narrow(0, 3, 3)) * 2.0, 1e-5, 1e-5));
}

TEST(Lora, ExpertAdapterPathsRoundTrip) {
  const std::string experts = "model.layers.2.mlp.experts";
  for (const ExpertTargets t : {ExpertTargets{true, true}, ExpertTargets{true, false}, ExpertTargets{false, true}}) {
    if (t.gateUp) {
      EXPECT_EQ(expertParameterOf(expertAdapterPath(experts, true, t), t), experts + ".gate_up_proj");
    }
    if (t.down) {
      EXPECT_EQ(expertParameterOf(expertAdapterPath(experts, false, t), t), experts + ".down_proj");
    }
  }
}

}  // namespace
}  // namespace rp::model
