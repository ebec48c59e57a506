#include "support/pipeline_reference.h"

#include <cmath>
#include <cstdio>

#include <gtest/gtest.h>

#include "optim/adamw.h"
#include "optim/grad_clip.h"
#include "run/setup.h"
#include "train/trainer.h"

namespace rp::test {

std::vector<std::string> equivalenceSettings(const std::string& model, const std::string& tokenizer,
                                             const std::string& fixtures, const std::string& out) {
  return {"model.path=" + model,
          "model.tokenizer=" + tokenizer,
          "data.path=" + fixtures + "/text/tinyshakespeare.txt",
          "train.seq_len=32",
          "train.global_batch=8",
          "train.microbatches=4",
          "train.max_steps=5",
          "train.threads=1",
          "optim.lr=3e-3",
          "optim.schedule=constant",
          "pipeline.backend=cpu",  // the CPU tiers stay on the CPU on a GPU machine too (tests/gpu/ sets cuda)
          "output.dir=" + out};
}

Reference trainerReference(const config::RunConfig& config) {
  train::Trainer trainer(config);
  Reference r;
  for (const auto& master : trainer.masters()) r.initial.push_back(master.clone());
  for (std::int64_t s = 0; s < config.train.maxSteps; ++s) {
    EXPECT_TRUE(trainer.step(s, false)) << "the reference trainer stopped at step " << s + 1;
    auto done = trainer.finished();
    EXPECT_EQ(done.size(), 1u) << "step " << s + 1;
    if (done.size() != 1) return r;
    r.steps.push_back(done[0]);
    // Where the pipeline evaluated, the trainer's weights after the same step are evaluated too.
    const auto e = trainer.evaluate(s + 1);
    r.evalLoss.push_back(e ? std::optional<double>(e->loss) : std::nullopt);
  }
  for (std::size_t i = 0; i < trainer.trainable().size(); ++i)
    r.masters.emplace_back(trainer.trainable()[i].first, trainer.masters()[i].clone());
  return r;
}

Reference delayedUpdateReference(const config::RunConfig& config) {
  const auto k = static_cast<std::size_t>(config.optim.staleness);
  EXPECT_GE(k, 1u) << "the delayed-update reference is for optim.mode = async";
  train::Trainer trainer(config);
  std::vector<torch::Tensor> masters;
  optim::AdamW adamw(run::adamwConfigFor(config));
  for (std::size_t i = 0; i < trainer.trainable().size(); ++i) {
    masters.push_back(trainer.masters()[i].detach().clone());  // float32, for a bf16/fp16 model too
    adamw.add(trainer.trainable()[i].first, masters.back().data_ptr<float>(), trainer.gradSlots()[i].data_ptr<float>(),
              static_cast<std::size_t>(masters.back().numel()));
  }
  auto snapshot = [&] {
    std::vector<torch::Tensor> w;
    for (const auto& m : masters) w.push_back(m.clone());
    return w;
  };
  Reference r;
  std::vector<std::vector<torch::Tensor>> history{snapshot()};  // W_0, W_1, ...: the masters after each step
  for (std::size_t s = 0; s < static_cast<std::size_t>(config.train.maxSteps); ++s) {
    {
      torch::NoGradGuard noGrad;
      const auto& stale = history[s < k ? 0 : s - k];
      for (std::size_t i = 0; i < masters.size(); ++i) trainer.trainable()[i].second.copy_(stale[i]);
    }
    const auto grads =
        trainer.computeGradients(trainer.packer().next(config.train.globalBatch), config.train.microbatches);
    trace::StepMetrics m;
    m.step = static_cast<std::int64_t>(s) + 1;
    m.loss = grads.lossSum / static_cast<double>(grads.targetTokens) + grads.auxLoss;  // as applyStep
    std::vector<optim::GradBuffer> buffers;
    for (const auto& slot : trainer.gradSlots())
      buffers.push_back({slot.data_ptr<float>(), static_cast<std::size_t>(slot.numel())});
    // Clipped in place first, as torch.nn.utils.clip_grad_norm_ does (the runtimes clip inside the update:
    // Note [Clipping in the update]).
    m.gradNorm = optim::globalGradNorm(buffers);
    const float coef = optim::clipCoefficient(m.gradNorm, config.train.gradClip);
    for (const auto& b : buffers) {
      for (std::size_t i = 0; i < b.n; ++i) b.data[i] *= coef;
    }
    adamw.step(config.optim.lr);
    history.push_back(snapshot());
    r.steps.push_back(m);
    r.evalLoss.push_back(std::nullopt);
  }
  for (std::size_t i = 0; i < masters.size(); ++i) r.masters.emplace_back(trainer.trainable()[i].first, masters[i]);
  r.initial = history[0];
  return r;
}

void expectMatches(const Reference& reference, const PipelineResult& pipeline, Tolerance tolerance) {
  ASSERT_EQ(pipeline.metrics.size(), reference.steps.size()) << "steps run by the pipeline and the reference";
  for (std::size_t s = 0; s < reference.steps.size(); ++s) {
    const trace::StepMetrics& m = reference.steps[s];
    const trace::StepMetrics& p = pipeline.metrics[s];
    if (std::isfinite(m.loss)) {
      EXPECT_NEAR(p.loss, m.loss, tolerance.loss * std::abs(m.loss)) << "step " << s + 1;
    } else {
      EXPECT_FALSE(std::isfinite(p.loss)) << "step " << s + 1 << ": the reference's loss is " << m.loss;
    }
    EXPECT_EQ(p.skipped, m.skipped) << "step " << s + 1;
    if (p.evalLoss) {
      const auto& e = reference.evalLoss[s];
      ASSERT_TRUE(e.has_value()) << "step " << s + 1 << ": the reference has no evaluation data";
      EXPECT_NEAR(*p.evalLoss, *e, tolerance.loss * *e) << "step " << s + 1;
    }
    EXPECT_EQ(p.lossScale.has_value(), m.lossScale.has_value()) << "step " << s + 1;
    if (p.lossScale && m.lossScale) {
      EXPECT_EQ(*p.lossScale, *m.lossScale) << "step " << s + 1;
    }
    if (!m.skipped) {
      EXPECT_NEAR(p.gradNorm, m.gradNorm, tolerance.gradNorm * m.gradNorm) << "step " << s + 1;
    }
  }
  if (tolerance.update <= 0) {
    for (const auto& [name, master] : reference.masters) {
      const double err = (pipeline.weight(name) - master).abs().max().item<double>();
      EXPECT_LE(err, tolerance.weight) << name;
    }
    return;
  }
  ASSERT_EQ(reference.initial.size(), reference.masters.size()) << "the reference kept no initial masters";
  double worst = 0;
  std::string worstName;
  for (std::size_t i = 0; i < reference.masters.size(); ++i) {
    const auto& [name, master] = reference.masters[i];
    const double moved = (master - reference.initial[i]).norm().item<double>();
    const double err = (pipeline.weight(name) - master).norm().item<double>();
    ASSERT_GT(moved, 0.0) << name << ": the reference never moved it, so no relative bound applies";
    EXPECT_LE(err / moved, tolerance.update)
        << name << ": |W_pipeline - W_reference| = " << err << " against the reference's movement " << moved;
    if (err / moved >= worst) {
      worst = err / moved;
      worstName = name;
    }
  }
  // One line per comparison, so a GPU run shows how much of the tolerance it used.
  std::printf("[ update   ] largest relative update error %.3g (%s), tolerance %.3g\n", worst, worstName.c_str(),
              tolerance.update);
}

void expectEqualsTrainer(const config::RunConfig& config, const PipelineResult& pipeline, Tolerance tolerance) {
  expectMatches(trainerReference(config), pipeline, tolerance);
}

void expectEqualsDelayedUpdate(const config::RunConfig& config, const PipelineResult& pipeline,
                               double weightTolerance) {
  expectMatches(delayedUpdateReference(config), pipeline, {1e-6, 1e-5, weightTolerance});
}

}  // namespace rp::test
