// Host optimizer pieces whose reference is their definition: clipping, loss scaling, schedule edges.
#include <cmath>
#include <limits>
#include <vector>

#include <gtest/gtest.h>

#include "common/error.h"
#include "optim/adamw.h"
#include "optim/grad_clip.h"
#include "optim/loss_scaler.h"
#include "optim/lr_schedule.h"

namespace rp::optim {
namespace {

TEST(GradClip, ScalesToMaxNormAcrossBuffers) {
  std::vector<float> a{3.0f, 0.0f}, b{4.0f};
  std::vector<GradBuffer> grads{{a.data(), a.size()}, {b.data(), b.size()}};
  EXPECT_DOUBLE_EQ(globalGradNorm(grads), 5.0);
  EXPECT_DOUBLE_EQ(clipGradNorm(grads, 1.0), 5.0);
  EXPECT_NEAR(globalGradNorm(grads), 1.0, 1e-6);
  EXPECT_NEAR(a[0] / b[0], 0.75, 1e-7);  // direction kept
  // Below the limit nothing changes.
  EXPECT_NEAR(clipGradNorm(grads, 10.0), 1.0, 1e-6);
  EXPECT_NEAR(globalGradNorm(grads), 1.0, 1e-6);
}

TEST(LossScaler, BacksOffOnOverflowAndGrowsAfterInterval) {
  LossScaler scaler({1024.0, 2.0, 0.5, 3});
  EXPECT_FALSE(scaler.update(true));
  EXPECT_EQ(scaler.scale(), 512.0);
  EXPECT_TRUE(scaler.update(false));
  EXPECT_TRUE(scaler.update(false));
  EXPECT_EQ(scaler.scale(), 512.0);
  EXPECT_TRUE(scaler.update(false));
  EXPECT_EQ(scaler.scale(), 1024.0);  // grew after 3 good steps
  EXPECT_FALSE(scaler.update(true));
  EXPECT_EQ(scaler.scale(), 512.0);
  EXPECT_EQ(scaler.skippedSteps(), 2);
  EXPECT_THROW(LossScaler({0.0, 2.0, 0.5, 3}), InputError);
}

TEST(LrSchedule, WarmupFloorAndNames) {
  const LrSchedule cosine{ScheduleKind::kCosine, 1.0, 4, 14, 0.1};
  EXPECT_DOUBLE_EQ(cosine.at(0), 0.0);
  EXPECT_DOUBLE_EQ(cosine.at(2), 0.5);
  EXPECT_DOUBLE_EQ(cosine.at(4), 1.0);
  EXPECT_NEAR(cosine.at(9), 0.1 + 0.9 * 0.5, 1e-12);
  EXPECT_NEAR(cosine.at(14), 0.1, 1e-12);
  EXPECT_NEAR(cosine.at(100), 0.1, 1e-12);
  EXPECT_EQ(parseScheduleKind("linear", "optim.schedule"), ScheduleKind::kLinear);
  try {
    parseScheduleKind("step", "optim.schedule");
    FAIL();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("optim.schedule = \"step\""), std::string::npos) << e.what();
  }
}

// Zero gradients with weight decay only shrink the parameters by (1 - lr*wd) per step.
TEST(AdamW, ZeroGradientIsPureDecoupledDecay) {
  std::vector<float> p{2.0f, -4.0f}, g{0.0f, 0.0f};
  AdamW adamw(AdamWConfig{0.1, 0.9, 0.999, 1e-8, 0.5, false, {}});
  adamw.add("p", p.data(), g.data(), p.size());
  adamw.step(0.1);
  adamw.step(0.1);
  EXPECT_FLOAT_EQ(p[0], 2.0f * 0.95f * 0.95f);
  EXPECT_FLOAT_EQ(p[1], -4.0f * 0.95f * 0.95f);
}

}  // namespace
}  // namespace rp::optim
