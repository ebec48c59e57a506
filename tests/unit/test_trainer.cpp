// The single-process trainer on the real TinyStories-656K checkpoint and tiny-shakespeare.
#include <cmath>
#include <cstdlib>
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

class TrainerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    fixtures_ = test::fixturesDir();
    if (!fixtures_) GTEST_SKIP() << "shared fixtures not found (set RP_FIXTURES_DIR)";
    out_ = test::scratchDir();
  }

  config::RunConfig configWith(std::vector<std::string> extra) const {
    std::vector<std::string> sets{"model.path=" + *fixtures_ + "/models/tinystories-656k",
                                  "data.path=" + *fixtures_ + "/text/tinyshakespeare.txt",
                                  "train.seq_len=64",
                                  "train.global_batch=8",
                                  "train.microbatches=2",
                                  "train.max_steps=20",
                                  "train.threads=1",
                                  "optim.lr=3e-3",
                                  "optim.schedule=constant",
                                  "optim.mode=sync",
                                  "output.dir=" + out_};
    sets.insert(sets.end(), extra.begin(), extra.end());
    return config::loadRunConfig("", sets);
  }

  std::vector<nlohmann::json> metrics() const {
    std::ifstream in(out_ + "/metrics.jsonl");
    std::vector<nlohmann::json> out;
    for (std::string line; std::getline(in, line);) out.push_back(nlohmann::json::parse(line));
    return out;
  }

  std::optional<std::string> fixtures_;
  std::string out_;
};

TEST_F(TrainerTest, LossDecreasesAndMetricsAreWritten) {
  Trainer trainer(configWith({}));
  trainer.run();
  const auto m = metrics();
  ASSERT_EQ(m.size(), 20u);
  for (std::size_t i = 0; i < m.size(); ++i) {
    EXPECT_EQ(m[i].at("step").get<int>(), static_cast<int>(i) + 1);
    for (const char* key : {"loss", "lr", "grad_norm", "tokens", "tokens_per_s", "step_time_s"}) {
      EXPECT_TRUE(m[i].contains(key)) << key;
    }
    EXPECT_EQ(m[i].at("tokens").get<int>(), 8 * 64);
  }
  auto mean = [&](std::size_t from, std::size_t to) {
    double s = 0;
    for (std::size_t i = from; i < to; ++i) s += m[i].at("loss").get<double>();
    return s / static_cast<double>(to - from);
  };
  const double first = mean(0, 3), last = mean(17, 20);
  EXPECT_LT(last, first - 1.0) << "loss " << first << " -> " << last;
  EXPECT_TRUE(std::ifstream(out_ + "/config.effective.toml").good());
}

// The property the pipeline runtime is held to: the microbatch split does not change the gradient.
TEST_F(TrainerTest, MicrobatchCountDoesNotChangeTheGradient) {
  Trainer trainer(configWith({}));
  const auto rows = trainer.packer().next(8);
  const auto one = trainer.computeGradients(rows, 1);
  std::vector<torch::Tensor> reference;
  for (const auto& slot : trainer.gradSlots()) reference.push_back(slot.clone());
  const auto four = trainer.computeGradients(rows, 4);
  EXPECT_EQ(one.targetTokens, four.targetTokens);
  EXPECT_NEAR(one.lossSum, four.lossSum, 1e-6 * std::abs(one.lossSum));
  for (std::size_t i = 0; i < reference.size(); ++i) {
    const double scale = reference[i].abs().max().item<double>();
    const double err = (trainer.gradSlots()[i] - reference[i]).abs().max().item<double>();
    EXPECT_LE(err, 1e-5 * scale) << trainer.trainable()[i].first;
    EXPECT_GT(scale, 0.0) << trainer.trainable()[i].first;
  }
}

TEST_F(TrainerTest, LoraTrainsAdaptersOnlyAndLowersLoss) {
  Trainer trainer(configWith({"lora.rank=4", "lora.alpha=8", "train.max_steps=12", "optim.lr=1e-2"}));
  std::vector<torch::Tensor> base;
  for (auto& [name, p] : trainer.model().hfParameters()) base.push_back(p.detach().clone());
  trainer.run();
  std::size_t i = 0;
  for (auto& [name, p] : trainer.model().hfParameters()) EXPECT_TRUE(torch::equal(p, base[i++])) << name;
  const auto m = metrics();
  ASSERT_EQ(m.size(), 12u);
  EXPECT_LT(m.back().at("loss").get<double>(), m.front().at("loss").get<double>() - 0.3);
  for (const auto& [name, t] : trainer.trainable()) EXPECT_NE(name.find("lora_"), std::string::npos) << name;
}

// RP_HOST_MEMORY_MB for one scope.
struct HostMemoryMb {
  explicit HostMemoryMb(std::int64_t mb) { ::setenv("RP_HOST_MEMORY_MB", std::to_string(mb).c_str(), 1); }
  ~HostMemoryMb() { ::unsetenv("RP_HOST_MEMORY_MB"); }
};

// A float32 full fine-tune costs 20 bytes per parameter (weights, gradients, the optimizer's gradient slot and
// moments): a host 4% short of that is refused before any weight is read (the model directory below holds
// config.json alone), one 4% over is not; LoRA fits where the full run did not.
TEST_F(TrainerTest, RefusesARunTheHostCannotHoldBeforeLoading) {
  double params = 0;
  for (const auto& [name, p] : Trainer(configWith({})).model().hfParameters()) params += p.numel();
  const double mib = 20.0 * params / (1 << 20);
  const std::string configOnly = out_ + "/config-only";
  std::filesystem::create_directories(configOnly);
  std::filesystem::copy_file(*fixtures_ + "/models/tinystories-656k/config.json", configOnly + "/config.json");
  {
    HostMemoryMb host(static_cast<std::int64_t>(std::floor(0.96 * mib)));
    try {
      Trainer refused(configWith({"model.path=" + configOnly}));
      FAIL() << "a run needing " << mib << " MiB started on a smaller host";
    } catch (const InputError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find(configOnly + ": this run needs"), std::string::npos) << what;
      EXPECT_NE(what.find("but RP_HOST_MEMORY_MB leaves"), std::string::npos) << what;
      EXPECT_NE(what.find("train LoRA (lora.rank)"), std::string::npos) << what;
    }
    EXPECT_NO_THROW(Trainer(configWith({"lora.rank=4"})));
  }
  HostMemoryMb host(static_cast<std::int64_t>(std::ceil(1.04 * mib)));
  EXPECT_NO_THROW(Trainer(configWith({})));
}

// model_tflops is the step's model FLOPs over its time: against the standard estimate 6 x parameters x tokens
// (Kaplan et al.), which leaves out attention's score and value products (about 2% of this model at 64
// tokens); mfu is it over output.peak_tflops.
TEST_F(TrainerTest, ReportsModelFlopsAgainstSixNAndMfuAgainstThePeak) {
  Trainer trainer(configWith({"train.max_steps=2", "output.peak_tflops=0.5"}));
  trainer.run();
  const auto m = metrics();
  ASSERT_EQ(m.size(), 2u);
  const auto config = nlohmann::json::parse(std::ifstream(*fixtures_ + "/models/tinystories-656k/config.json"));
  const double h = config.at("hidden_size"), i = config.at("intermediate_size"), v = config.at("vocab_size");
  const double heads = config.at("num_attention_heads"), kv = config.at("num_key_value_heads");
  const double layers = config.at("num_hidden_layers");
  const double perLayer = 2 * h * h + 2 * h * (h / heads * kv) + 3 * h * i;  // q, o; k, v; gate, up, down
  const double params = layers * perLayer + h * v;                           // and the LM head
  const double sixN = 6 * params * 8 * 64;                                   // global_batch x seq_len tokens
  for (const auto& r : m) {
    const double flops = r.at("model_tflops").get<double>() * 1e12 * r.at("step_time_s").get<double>();
    EXPECT_GT(flops, sixN) << "attention adds to 6N";
    EXPECT_LT(flops, 1.03 * sixN);
    EXPECT_NEAR(r.at("mfu").get<double>(), r.at("model_tflops").get<double>() / 0.5, 1e-12);
  }
}

// bf16 parameters with float32 masters: each master exists apart from its parameter, the parameter is the
// master rounded to bf16, and the masters keep what bf16 cannot hold (the small AdamW updates accumulate).
TEST_F(TrainerTest, Bfloat16KeepsFp32MasterWeights) {
  Trainer trainer(configWith({"model.dtype=bfloat16", "train.max_steps=3"}));
  trainer.run();
  const auto m = metrics();
  ASSERT_EQ(m.size(), 3u);
  for (const auto& r : m) EXPECT_TRUE(std::isfinite(r.at("loss").get<double>()));
  ASSERT_EQ(trainer.masters().size(), trainer.trainable().size());
  std::int64_t finer = 0, elements = 0;
  for (std::size_t i = 0; i < trainer.trainable().size(); ++i) {
    const auto& [name, p] = trainer.trainable()[i];
    const torch::Tensor& master = trainer.masters()[i];
    EXPECT_EQ(p.scalar_type(), torch::kBFloat16) << name;
    ASSERT_EQ(master.scalar_type(), torch::kFloat) << name;
    EXPECT_EQ(master.sizes(), p.sizes()) << name;
    EXPECT_NE(master.data_ptr(), p.data_ptr()) << name;
    EXPECT_TRUE(torch::equal(master.to(torch::kBFloat16), p.detach())) << name << ": not the master rounded";
    finer += master.ne(master.to(torch::kBFloat16).to(torch::kFloat)).sum().item<std::int64_t>();
    elements += master.numel();
  }
  EXPECT_GT(finer, elements / 2) << "the masters hold no more than bf16 does";
}

// fp16 with a loss scale so large that the first steps overflow: those steps are skipped and the scale
// follows torch.amp.GradScaler's rule (x0.5 on an overflow; x2 after precision.growth_interval good steps in
// a row), step by step, until steps fit and train.
TEST_F(TrainerTest, Float16UsesTheLossScaler) {
  Trainer trainer(configWith(
      {"model.dtype=float16", "train.max_steps=10", "precision.loss_scale=2097152", "precision.growth_interval=2"}));
  trainer.run();
  const auto m = metrics();
  ASSERT_EQ(m.size(), 10u);
  double scale = 2097152;
  int good = 0, skipped = 0, grown = 0;
  for (const auto& r : m) {
    ASSERT_TRUE(r.contains("loss_scale"));
    EXPECT_EQ(r.at("loss_scale").get<double>(), scale) << "step " << r.at("step");
    if (r.value("skipped", false)) {
      ++skipped;
      scale /= 2, good = 0;
    } else {
      EXPECT_TRUE(std::isfinite(r.at("grad_norm").get<double>())) << "step " << r.at("step");
      if (++good == 2) scale *= 2, good = 0, ++grown;
    }
  }
  EXPECT_TRUE(m[0].value("skipped", false)) << "2^21 must overflow the first step";
  EXPECT_GE(skipped, 1);
  EXPECT_LT(skipped, 10) << "the scale never backed off far enough";
  EXPECT_GE(grown, 1) << "no run of good steps grew the scale";
}

}  // namespace
}  // namespace rp::train
