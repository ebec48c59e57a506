// The measured-time profile: EMA 0.9 from zero with bias correction, first iteration dropped.
#include <gtest/gtest.h>

#include "coordinator/profile.h"

namespace rp::coordinator {
namespace {

TEST(LayerProfile, BiasCorrectedEmaDropsTheFirstIteration) {
  LayerProfile p(2);
  p.update({100.0, 100.0}, {100.0, 100.0});  // warm-up: ignored
  EXPECT_FALSE(p.ready());
  p.update({2.0, 4.0}, {6.0, 8.0});
  ASSERT_TRUE(p.ready());
  EXPECT_NEAR(p.forward(0), 2.0, 1e-12);  // one sample: the correction returns it exactly
  EXPECT_NEAR(p.backward(1), 8.0, 1e-12);
  p.update({4.0, 4.0}, {6.0, -1.0});  // layer 1 backward not measured this time
  // EMA: 0.9*0.1*2 + 0.1*4 = 0.58, corrected by 1 - 0.81 = 0.19
  EXPECT_NEAR(p.forward(0), 0.58 / 0.19, 1e-12);
  EXPECT_NEAR(p.backward(1), 8.0, 1e-12);  // unmeasured: keeps its estimate
  schedule::LayerCosts proxy{{1, 1}, {3, 3}, {10, 10}, {20, 20}};
  const auto measured = p.applyTo(proxy);
  EXPECT_NEAR(measured.forward[0], p.forward(0), 1e-12);
  EXPECT_EQ(measured.bytes, proxy.bytes);
}

}  // namespace
}  // namespace rp::coordinator
