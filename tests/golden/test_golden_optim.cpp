// The host optimizer against torch.optim.AdamW and transformers' LR schedules (goldens from
// scripts/make_goldens.py), and the fixture's published 1000-step AdamW reference.
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "config/schema.h"
#include "model/libtorch.h"
#include "model/safetensors.h"
#include "model/torch_bridge.h"
#include "optim/adamw.h"
#include "optim/lr_schedule.h"
#include "support/fixtures.h"

namespace rp::optim {
namespace {

torch::Tensor load(const safetensors::SafetensorsFile& file, const std::string& name) {
  const auto* view = file.find(name);
  if (view == nullptr) throw std::runtime_error("golden tensor missing: " + name);
  return model::toTorch(*view);
}

class GoldenAdamW : public ::testing::TestWithParam<std::string> {};

// 100 steps over three tensors with the gradients torch saw; every element within 1e-6 relative. "groups":
// Hugging Face Trainer's two parameter groups (no decay on biases and norms), which our AdamW forms from the
// names with optim.no_decay's default patterns.
TEST_P(GoldenAdamW, MatchesTorchOptimAdamW) {
  const auto golden = test::goldenDir();
  RP_SKIP_UNLESS(golden, "golden directory");
  const std::string base = *golden + "/optim/adamw_" + GetParam();
  const safetensors::SafetensorsFile file(base + ".safetensors");
  const auto hyper = nlohmann::json::parse(std::ifstream(base + ".json"));
  AdamWConfig config;
  config.lr = hyper.at("lr");
  config.beta1 = hyper.at("betas")[0];
  config.beta2 = hyper.at("betas")[1];
  config.eps = hyper.at("eps");
  config.weightDecay = hyper.at("weight_decay");
  config.amsgrad = hyper.at("amsgrad");
  const bool groups = hyper.contains("names");
  if (groups) config.noDecay = std::get<std::vector<std::string>>(config::runKey("optim.no_decay").fallback);
  AdamW adamw(config);
  const int count = groups ? static_cast<int>(hyper.at("names").size()) : 3;
  std::vector<torch::Tensor> params, grads, history;
  for (int i = 0; i < count; ++i) {
    params.push_back(load(file, "init." + std::to_string(i)).contiguous());
    history.push_back(load(file, "grads." + std::to_string(i)));
    grads.push_back(torch::zeros_like(params.back()));
    const std::string name = groups ? hyper.at("names")[i].get<std::string>() : "p" + std::to_string(i);
    adamw.add(name, params[i].data_ptr<float>(), grads[i].data_ptr<float>(),
              static_cast<std::size_t>(params[i].numel()));
    if (groups) {
      EXPECT_EQ(adamw.decays(static_cast<std::size_t>(i)), hyper.at("decay")[i].get<bool>()) << name;
    }
  }
  const auto steps = history[0].size(0);
  for (std::int64_t t = 0; t < steps; ++t) {
    for (int i = 0; i < count; ++i) grads[i].copy_(history[i][t]);
    adamw.step(config.lr);
  }
  EXPECT_EQ(adamw.stepCount(), steps);
  for (int i = 0; i < count; ++i) {
    const auto want = load(file, "final." + std::to_string(i));
    const double err = ((params[i] - want).abs() / want.abs().clamp_min(1e-3)).max().item<double>();
    EXPECT_LE(err, 1e-6) << "tensor " << i;
    const auto m =
        torch::from_blob(const_cast<float*>(adamw.expAvg(static_cast<std::size_t>(i)).data()), params[i].sizes());
    const auto wantM = load(file, "exp_avg." + std::to_string(i));
    const double mErr = (m - wantM).abs().max().item<double>() / wantM.abs().max().item<double>();
    EXPECT_LE(mErr, 1e-6) << "exp_avg " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Hyper, GoldenAdamW, ::testing::Values("default", "amsgrad", "groups"));

// Reproduces the fixture's recipe with LibTorch's RNG (same stream as Python's for the same seed):
// manual_seed(42); Linear(3, 2, bias=False); 1000 steps of x = rand(3), y = [x0 + x1, -x2],
// loss = ((y - Wx)^2).sum(), AdamW(lr 1e-3, wd 0.01, betas 0.9/0.999, eps 1e-8).
TEST(GoldenAdamWFixture, ThousandStepsReachThePublishedWeights) {
  const auto golden = test::goldenDir();
  RP_SKIP_UNLESS(golden, "golden directory");
  const std::string path = *golden + "/optim/adamw_fixture.safetensors";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " absent (fixtures missing)";
  const auto expected = load(safetensors::SafetensorsFile(path), "weight");

  torch::manual_seed(42);
  torch::nn::Linear linear(torch::nn::LinearOptions(3, 2).bias(false));
  auto& weight = linear->weight;
  auto grad = torch::zeros_like(weight);
  AdamW adamw(AdamWConfig{1e-3, 0.9, 0.999, 1e-8, 0.01, false, {}});
  adamw.add("weight", weight.data_ptr<float>(), grad.data_ptr<float>(), static_cast<std::size_t>(weight.numel()));
  for (int step = 0; step < 1000; ++step) {
    const auto x = torch::rand({3});
    const auto y = torch::stack({x[0] + x[1], -x[2]});
    const auto loss = (y - linear->forward(x)).pow(2).sum();
    grad.copy_(torch::autograd::grad({loss}, {weight})[0]);
    torch::NoGradGuard noGrad;
    adamw.step(1e-3);
  }
  EXPECT_TRUE(torch::allclose(weight.detach(), expected, 0.0, 1e-4)) << weight << "\nexpected\n" << expected;
}

TEST(GoldenLrSchedule, MatchesTransformersSchedules) {
  const auto golden = test::goldenDir();
  RP_SKIP_UNLESS(golden, "golden directory");
  const safetensors::SafetensorsFile file(*golden + "/optim/lr_schedules.safetensors");
  for (const auto& [name, kind] :
       {std::pair{"constant", ScheduleKind::kConstant}, std::pair{"linear", ScheduleKind::kLinear},
        std::pair{"cosine", ScheduleKind::kCosine}}) {
    const auto want = load(file, std::string("lr.") + name);
    const LrSchedule schedule{kind, 2e-3, 10, 100, 0.0};
    for (std::int64_t t = 0; t < want.size(0); ++t) {
      EXPECT_NEAR(schedule.at(t), want[t].item<double>(), 1e-12) << name << " step " << t;
    }
  }
}

}  // namespace
}  // namespace rp::optim
