// Our forward and backward against Hugging Face transformers (goldens from scripts/make_goldens.py).
// Tolerances are relative to the largest reference magnitude: |ours - ref|_inf <= tol * |ref|_inf,
// 1e-5 for logits and losses, 1e-4 for gradients (fp32).
#include <filesystem>
#include <fstream>
#include <set>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "common/error.h"
#include "config/schema.h"
#include "model/causal_lm.h"
#include "model/libtorch.h"
#include "model/safetensors.h"
#include "model/safetensors_writer.h"
#include "model/torch_bridge.h"
#include "optim/adamw.h"
#include "support/fixtures.h"

namespace rp::model {
namespace {

struct ModelCase {
  std::string name;
  bool fromFixtures;  // the checkpoint is the shared fixture, not a generated one
};

void PrintTo(const ModelCase& c, std::ostream* os) {
  *os << c.name;
}

class GoldenModel : public ::testing::TestWithParam<ModelCase> {
 protected:
  void SetUp() override {
    const auto golden = test::goldenDir();
    RP_SKIP_UNLESS(golden, "golden directory");
    const std::string dir = *golden + "/" + GetParam().name;
    if (!std::filesystem::exists(dir + "/golden.safetensors")) {
      GTEST_SKIP() << dir << "/golden.safetensors absent (make_goldens skips models whose fixtures are missing)";
    }
    goldens_ = std::make_unique<safetensors::SafetensorsFile>(dir + "/golden.safetensors");
    goldenDir_ = dir;
    modelDir_ = dir;
    if (GetParam().fromFixtures) {
      const auto fixtures = test::fixturesDir();
      RP_SKIP_UNLESS(fixtures, "shared fixtures");
      modelDir_ = *fixtures + "/models/" + GetParam().name;
    }
    model_ = loadHfModel(modelDir_, torch::kFloat);
  }

  torch::Tensor golden(const std::string& name) const {
    const auto* view = goldens_->find(name);
    if (view == nullptr) throw std::runtime_error("golden tensor missing: " + name);
    return toTorch(*view);
  }

  static void expectClose(const torch::Tensor& ours, const torch::Tensor& ref, double tol, const std::string& what) {
    ASSERT_EQ(ours.sizes(), ref.sizes()) << what;
    const double scale = std::max(ref.abs().max().item<double>(), 1e-12);
    const double err = (ours.to(torch::kFloat) - ref).abs().max().item<double>();
    EXPECT_LE(err, tol * scale) << what << ": max abs error " << err << " vs reference scale " << scale;
  }

  // transformers' `loss`: the mean token loss over the batch's targets, plus a MoE model's load-balancing loss.
  static torch::Tensor objective(const LossSum& loss, const Batch& batch) {
    const auto mean = loss.sum / batch.targets.ne(kIgnoreIndex).sum().item<double>();
    return loss.aux.defined() ? mean + loss.aux : mean;
  }

  std::unique_ptr<safetensors::SafetensorsFile> goldens_;
  std::string goldenDir_, modelDir_;
  std::shared_ptr<CausalLM> model_;
};

TEST_P(GoldenModel, LogitsAndLossMatchTransformers) {
  torch::NoGradGuard noGrad;
  const auto batch = causalBatch(golden("input_ids"));
  const auto logits = model_->logits(batch);
  expectClose(logits, golden("logits"), 1e-5, "logits");

  const auto T = batch.inputIds.size(1);
  const auto tokenLoss = torch::nn::functional::cross_entropy(
      logits.narrow(1, 0, T - 1).reshape({-1, logits.size(-1)}), batch.inputIds.narrow(1, 1, T - 1).reshape({-1}),
      torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kNone));
  expectClose(tokenLoss.view({batch.inputIds.size(0), T - 1}), golden("token_loss"), 1e-5, "per-token loss");

  const auto loss = model_->loss(batch, /*chunkTokens=*/7);
  expectClose(objective(loss, batch), golden("loss"), 1e-5, "mean loss (chunked)");
  if (goldens_->find("aux_loss") != nullptr) {
    ASSERT_TRUE(loss.aux.defined()) << "transformers added a load-balancing loss; we did not";
    expectClose(loss.aux, golden("aux_loss"), 1e-5, "load-balancing loss");
  } else {
    EXPECT_FALSE(loss.aux.defined());
  }
}

TEST_P(GoldenModel, GradientsMatchTransformers) {
  const auto batch = causalBatch(golden("input_ids"));
  objective(model_->loss(batch), batch).backward();
  std::size_t compared = 0;
  for (const auto& [name, param] : model_->hfParameters()) {
    ASSERT_TRUE(param.grad().defined()) << name;
    expectClose(param.grad(), golden("grad." + name), 1e-4, "gradient of " + name);
    ++compared;
  }
  std::size_t stored = 0;
  for (const auto& view : goldens_->tensors()) stored += view.name.rfind("grad.", 0) == 0 ? 1 : 0;
  EXPECT_EQ(compared, stored) << "transformers has parameters we do not";
}

// optim.no_decay's default exempts exactly the parameters Hugging Face Trainer does not decay.
TEST_P(GoldenModel, WeightDecayFollowsHuggingFaceTrainer) {
  const auto hf = nlohmann::json::parse(std::ifstream(goldenDir_ + "/decay_names.json")).get<std::set<std::string>>();
  const auto noDecay = std::get<std::vector<std::string>>(config::runKey("optim.no_decay").fallback);
  std::size_t exempt = 0;
  for (const auto& [name, param] : model_->hfParameters()) {
    const bool ours = optim::decays(name, noDecay);
    EXPECT_EQ(ours, hf.count(name) == 1) << name << (ours ? " decays here, not in" : " is exempt here, decays in")
                                         << " Hugging Face Trainer";
    exempt += ours ? 0 : 1;
  }
  EXPECT_GE(exempt, 2u) << "every model has norm weights";
}

// transformers in bfloat16 (bf16.*: the model loaded in bfloat16, as a user loads it): ours in bfloat16 within
// twice the distance of transformers' own bfloat16 run from its float32 one, plus 1% of the float32 reference's
// scale (a tensor bfloat16 leaves almost untouched still rounds in another order), for the logits, the loss and
// every gradient.
TEST_P(GoldenModel, BFloat16IsAsCloseToTransformersAsItsOwnFloat32) {
  if (goldens_->find("bf16.logits") == nullptr) GTEST_SKIP() << "no bfloat16 goldens (the fixture's model)";
  const auto low = loadHfModel(modelDir_, torch::kBFloat16);
  const auto within = [&](const torch::Tensor& ours, const std::string& name) {
    const auto ref16 = golden("bf16." + name), ref32 = golden(name);
    ASSERT_EQ(ours.sizes(), ref16.sizes()) << name;
    const double scale = ref32.abs().max().item<double>();
    const double own = (ref16 - ref32).abs().max().item<double>();
    const double err = (ours.to(torch::kFloat) - ref32).abs().max().item<double>();
    EXPECT_LE(err, 2.0 * own + 0.01 * scale)
        << name << ": ours " << err << " from transformers' float32, its own bfloat16 run " << own << " (scale "
        << scale << ")";
  };
  const auto batch = causalBatch(golden("input_ids"));
  {
    torch::NoGradGuard noGrad;
    within(low->logits(batch), "logits");
  }
  const auto loss = objective(low->loss(batch), batch);
  within(loss.detach(), "loss");
  loss.backward();
  for (const auto& [name, param] : low->hfParameters()) {
    // GPT-OSS's router: six of the golden's tokens have their 2nd and 3rd expert logits within 1% of the logits'
    // scale in layer 0 (measured), under bfloat16's resolution there, so either run may send them to the other
    // expert, which moves that expert's gradient by whole tokens. Its experts' gradients are left out here.
    if (low->config().arch == Architecture::kGptOss && name.find(".mlp.experts.") != std::string::npos) continue;
    within(param.grad(), "grad." + name);
  }
}

// Linear attention (Qwen3.5) carries a state from one 64-token chunk to the next: a row of 200 tokens, its logits,
// loss and every gradient.
TEST_P(GoldenModel, ALongRowMatchesTransformersAcrossChunks) {
  if (goldens_->find("long.input_ids") == nullptr) GTEST_SKIP() << "no linear-attention layers";
  const auto batch = causalBatch(golden("long.input_ids"));
  const auto loss = model_->loss(batch);
  expectClose(objective(loss, batch).detach(), golden("long.loss"), 1e-5, "mean loss");
  objective(loss, batch).backward();
  for (const auto& [name, param] : model_->hfParameters()) {
    expectClose(param.grad(), golden("long.grad." + name), 1e-4, "gradient of " + name);
  }
  torch::NoGradGuard noGrad;
  expectClose(model_->logits(batch), golden("long.logits"), 1e-5, "logits");
}

// The fixture's goldens come from its own text (one row); every generated model has two documents.
TEST_P(GoldenModel, PackedDocumentsMatchSeparateTransformersRuns) {
  if (GetParam().fromFixtures) GTEST_SKIP() << "the fixture's goldens are one row of its sample text, not documents";
  ASSERT_NE(goldens_->find("doc_a_ids"), nullptr) << "make_goldens.py wrote no packed-document goldens";
  torch::NoGradGuard noGrad;
  const auto a = golden("doc_a_ids");
  const auto b = golden("doc_b_ids");
  const auto la = a.size(1), lb = b.size(1);
  Batch packed = causalBatch(torch::cat({a, b}, 1));
  packed.positionIds = torch::cat({torch::arange(la), torch::arange(lb)}).unsqueeze(0);
  packed.segmentIds = torch::cat({torch::zeros(la, torch::kInt64), torch::ones(lb, torch::kInt64)}).unsqueeze(0);
  const auto logits = model_->logits(packed);
  expectClose(logits.narrow(1, 0, la), golden("doc_a_logits"), 1e-5, "document A logits");
  expectClose(logits.narrow(1, la, lb), golden("doc_b_logits"), 1e-5, "document B logits");
}

INSTANTIATE_TEST_SUITE_P(Models, GoldenModel,
                         ::testing::Values(ModelCase{"tinystories-656k", true}, ModelCase{"qwen3-tiny", false},
                                           ModelCase{"qwen2-tiny", false}, ModelCase{"qwen2-window-tiny", false},
                                           ModelCase{"mistral-tiny", false}, ModelCase{"granite-tiny", false},
                                           ModelCase{"gemma2-tiny", false}, ModelCase{"gemma3-tiny", false},
                                           ModelCase{"gemma3-multimodal-tiny", false}, ModelCase{"qwen3_5-tiny", false},
                                           ModelCase{"qwen3_5-multimodal-tiny", false}, ModelCase{"phi3-tiny", false},
                                           ModelCase{"olmo2-tiny", false}, ModelCase{"glm4-tiny", false},
                                           ModelCase{"llama3-tiny", false}, ModelCase{"qwen3-moe-tiny", false},
                                           ModelCase{"gpt-oss-tiny", false}),
                         [](const auto& info) {
                           std::string n = info.param.name;
                           for (auto& c : n) {
                             if (c == '-') c = '_';
                           }
                           return n;
                         });

// GPT-OSS's published layout: experts MXFP4-quantized, dequantized at load exactly as transformers does.
TEST(GoldenMxfp4, QuantizedExpertsLoadAsTransformersDequantizesThem) {
  const auto golden = test::goldenDir();
  RP_SKIP_UNLESS(golden, "golden directory");
  const std::string dir = *golden + "/gpt-oss-mxfp4";
  const safetensors::SafetensorsFile reference(dir + "/golden.safetensors");
  const auto model = loadHfModel(dir, torch::kFloat);
  std::size_t compared = 0;
  for (const auto& [name, param] : model->hfParameters()) {
    const auto* view = reference.find("dequantized." + name);
    if (view == nullptr) continue;
    EXPECT_TRUE(torch::equal(param, toTorch(*view))) << name << " differs from transformers' dequantization";
    ++compared;
  }
  EXPECT_EQ(compared, 6u) << "3 layers x (gate_up_proj, down_proj)";
}

TEST(GoldenMxfp4, ATruncatedScaleTensorIsNamed) {
  const auto golden = test::goldenDir();
  RP_SKIP_UNLESS(golden, "golden directory");
  const std::string dir = *golden + "/gpt-oss-mxfp4";
  const safetensors::SafetensorsFile source(dir + "/model.safetensors");
  // The same checkpoint with one layer's scales cut to half the rows.
  const auto out = std::filesystem::path(test::scratchDir()) / "mxfp4-bad";  // removed when the tests pass
  std::filesystem::create_directories(out);
  std::filesystem::copy_file(dir + "/config.json", out / "config.json",
                             std::filesystem::copy_options::overwrite_existing);
  std::vector<safetensors::OutTensor> tensors;
  for (const auto& view : source.tensors()) {
    tensors.push_back({view.name, view.dtype, view.shape, view.data});
    if (view.name == "model.layers.1.mlp.experts.down_proj_scales") tensors.back().shape[1] /= 2;
  }
  safetensors::writeFile((out / "model.safetensors").string(), tensors);
  try {
    loadHfModel(out.string(), torch::kFloat);
    FAIL() << "loading a truncated scale tensor succeeded";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("model.layers.1.mlp.experts.down_proj_scales"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace rp::model
