#include "support/pipeline_reference.h"

#include <cmath>

#include <gtest/gtest.h>

#include "optim/adamw.h"
#include "optim/grad_clip.h"
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

void expectEqualsTrainer(const config::RunConfig& config, const PipelineResult& pipeline, Tolerance tolerance) {
  train::Trainer reference(config);
  for (std::size_t s = 0; s < pipeline.metrics.size(); ++s) {
    ASSERT_TRUE(reference.step(static_cast<std::int64_t>(s), false));
    const auto done = reference.finished();
    ASSERT_EQ(done.size(), 1u);
    const trace::StepMetrics& m = done[0];
    const trace::StepMetrics& p = pipeline.metrics[s];
    if (std::isfinite(m.loss)) {
      EXPECT_NEAR(p.loss, m.loss, tolerance.loss * std::abs(m.loss)) << "step " << s + 1;
    } else {
      EXPECT_FALSE(std::isfinite(p.loss)) << "step " << s + 1 << ": the trainer's loss is " << m.loss;
    }
    EXPECT_EQ(p.skipped, m.skipped) << "step " << s + 1;
    // Where the pipeline evaluated, the trainer evaluates its weights after the same step.
    if (p.evalLoss) {
      const auto e = reference.evaluate(static_cast<std::int64_t>(s) + 1);
      ASSERT_TRUE(e.has_value()) << "step " << s + 1 << ": the trainer has no evaluation data";
      EXPECT_NEAR(*p.evalLoss, e->loss, tolerance.loss * e->loss) << "step " << s + 1;
    }
    EXPECT_EQ(p.lossScale.has_value(), m.lossScale.has_value()) << "step " << s + 1;
    if (p.lossScale && m.lossScale) {
      EXPECT_EQ(*p.lossScale, *m.lossScale) << "step " << s + 1;
    }
    if (!m.skipped) {
      EXPECT_NEAR(p.gradNorm, m.gradNorm, tolerance.gradNorm * m.gradNorm) << "step " << s + 1;
    }
  }
  for (std::size_t i = 0; i < reference.trainable().size(); ++i) {
    const auto& name = reference.trainable()[i].first;
    const double err = (pipeline.weight(name) - reference.masters()[i]).abs().max().item<double>();
    EXPECT_LE(err, tolerance.weight) << name;
  }
}

void expectEqualsDelayedUpdate(const config::RunConfig& config, const PipelineResult& pipeline,
                               double weightTolerance) {
  const auto k = static_cast<std::size_t>(config.optim.staleness);
  ASSERT_GE(k, 1u) << "the delayed-update reference is for optim.mode = async";
  train::Trainer reference(config);
  std::vector<torch::Tensor> masters;
  optim::AdamW adamw({config.optim.lr, config.optim.beta1, config.optim.beta2, config.optim.eps,
                      config.optim.weightDecay, config.optim.amsgrad});
  for (std::size_t i = 0; i < reference.trainable().size(); ++i) {
    masters.push_back(reference.trainable()[i].second.detach().clone());
    adamw.add(reference.trainable()[i].first, masters.back().data_ptr<float>(),
              reference.gradSlots()[i].data_ptr<float>(), static_cast<std::size_t>(masters.back().numel()));
  }
  auto snapshot = [&] {
    std::vector<torch::Tensor> w;
    for (const auto& m : masters) w.push_back(m.clone());
    return w;
  };
  std::vector<std::vector<torch::Tensor>> history{snapshot()};  // W_0, W_1, ...: the masters after each step
  for (std::size_t s = 0; s < pipeline.metrics.size(); ++s) {
    {
      torch::NoGradGuard noGrad;
      const auto& stale = history[s < k ? 0 : s - k];
      for (std::size_t i = 0; i < masters.size(); ++i) reference.trainable()[i].second.copy_(stale[i]);
    }
    const auto grads =
        reference.computeGradients(reference.packer().next(config.train.globalBatch), config.train.microbatches);
    const double loss = grads.lossSum / static_cast<double>(grads.targetTokens) + grads.auxLoss;  // as applyStep
    EXPECT_NEAR(pipeline.metrics[s].loss, loss, 1e-6 * loss) << "step " << s + 1;
    std::vector<optim::GradBuffer> buffers;
    for (const auto& slot : reference.gradSlots())
      buffers.push_back({slot.data_ptr<float>(), static_cast<std::size_t>(slot.numel())});
    const double norm = optim::clipGradNorm(buffers, config.train.gradClip);
    EXPECT_NEAR(pipeline.metrics[s].gradNorm, norm, 1e-5 * norm) << "step " << s + 1;
    adamw.step(config.optim.lr);
    history.push_back(snapshot());
  }
  for (std::size_t i = 0; i < masters.size(); ++i) {
    const auto& name = reference.trainable()[i].first;
    EXPECT_LE((pipeline.weight(name) - masters[i]).abs().max().item<double>(), weightTolerance) << name;
  }
}

}  // namespace rp::test
