// LoRA against PEFT (goldens from scripts/make_goldens.py, "<model>-lora"): PEFT's adapter, with random
// non-zero factors, loaded into our model by its saved names gives PEFT's logits, loss and adapter gradients.
// On the MoE models the MLP targets adapt the stacked experts as PEFT's target_parameters do. Tolerances as
// test_golden_models.cpp: 1e-5 of the reference scale for logits and loss, 1e-4 for gradients (fp32).
#include <filesystem>
#include <vector>

#include <gtest/gtest.h>

#include "model/causal_lm.h"
#include "model/libtorch.h"
#include "model/lora.h"
#include "model/safetensors.h"
#include "model/torch_bridge.h"
#include "support/fixtures.h"

namespace rp::model {
namespace {

void expectClose(const torch::Tensor& ours, const torch::Tensor& ref, double tol, const std::string& what) {
  ASSERT_EQ(ours.sizes(), ref.sizes()) << what;
  const double scale = std::max(ref.abs().max().item<double>(), 1e-12);
  const double err = (ours.to(torch::kFloat) - ref).abs().max().item<double>();
  EXPECT_LE(err, tol * scale) << what << ": max abs error " << err << " vs reference scale " << scale;
}

class GoldenLora : public ::testing::TestWithParam<std::string> {};

TEST_P(GoldenLora, PeftAdapterGivesPeftLogitsLossAndGradients) {
  const auto golden = test::goldenDir();
  RP_SKIP_UNLESS(golden, "golden directory");
  const std::string dir = *golden + "/" + GetParam() + "-lora";
  const safetensors::SafetensorsFile reference(dir + "/golden.safetensors");
  const safetensors::SafetensorsFile peft(dir + "/adapter_model.safetensors");
  auto model = loadHfModel(*golden + "/" + GetParam(), torch::kFloat);
  // PEFT's targets q_proj, v_proj and the MLP (target_parameters on the MoE models), under our names.
  const auto adapters = attachLora(*model, LoraConfig{2, 4.0, 0.0, {"q", "v", "gate", "up", "down"}});
  {
    torch::NoGradGuard noGrad;
    for (const auto& [name, t] : adapters) {
      const auto* view = peft.find(name);
      ASSERT_NE(view, nullptr) << name << " is not in PEFT's adapter";
      ASSERT_EQ(t.sizes(), toTorch(*view).sizes()) << name;
      t.copy_(toTorch(*view));
    }
  }
  EXPECT_EQ(adapters.size(), peft.tensors().size()) << "PEFT's adapter has tensors we do not";

  const auto batch = causalBatch(toTorch(*reference.find("input_ids")));
  {
    torch::NoGradGuard noGrad;
    expectClose(model->logits(batch), toTorch(*reference.find("logits")), 1e-5, "logits");
  }
  const LossSum loss = model->loss(batch);
  auto objective = loss.sum / batch.targets.ne(kIgnoreIndex).sum().item<double>();
  if (loss.aux.defined()) objective = objective + loss.aux;
  expectClose(objective, toTorch(*reference.find("loss")), 1e-5, "loss");
  objective.backward();
  for (const auto& [name, t] : adapters) {
    ASSERT_TRUE(t.grad().defined()) << name;
    expectClose(t.grad(), toTorch(*reference.find("grad." + name)), 1e-4, "gradient of " + name);
  }
  for (const auto& [name, p] : model->hfParameters()) EXPECT_FALSE(p.grad().defined()) << name << " is frozen";
}

INSTANTIATE_TEST_SUITE_P(Models, GoldenLora, ::testing::Values("qwen3-tiny", "qwen3-moe-tiny", "gpt-oss-tiny"),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (auto& c : n) {
                             if (c == '-') c = '_';
                           }
                           return n;
                         });

}  // namespace
}  // namespace rp::model
