// The runtime planner's memory rule (engine/costs.h): Note [Recompute ahead within the budget] on layers of
// known sizes, each expected depth worked out by hand from the rule.
#include <gtest/gtest.h>

#include "engine/costs.h"

namespace rp::engine {
namespace {

// An embedding and a head of 10 bytes of weights each and two decoder layers of 4, each layer's gradients as
// large as its weights; a decoder layer's graph 20 bytes, its backward's working memory 5. Two slots of the
// largest weights (20) beside the worst layer's backward: 20 + max(10, 4 + (1 + R) 20 + 5) = 49 + 20 R.
std::vector<LayerMemory> layers() {
  return {{10, 10, 0, 0}, {4, 4, 20, 5}, {4, 4, 20, 5}, {10, 10, 0, 0}};
}

TEST(RecomputeDepth, TheBudgetLowersRecomputeAheadToWhatFits) {
  struct Case {
    int wanted;
    double budget;
    int ahead;
    double need;
  };
  // Depth R > 0 is kept where its need is at most nine tenths of the budget; 0 whatever it needs.
  for (const Case& c :
       {Case{2, 0, 2, 89}, Case{2, -1, 2, 89}, Case{2, 100, 2, 89}, Case{2, 95, 1, 69}, Case{2, 80, 1, 69},
        Case{1, 80, 1, 69}, Case{2, 75, 0, 49}, Case{1, 49, 0, 49}, Case{0, 1000, 0, 49}, Case{3, 60, 0, 49}}) {
    SCOPED_TRACE(testing::Message() << "wanted " << c.wanted << ", budget " << c.budget);
    const RecomputeDepth d = recomputeAheadWithin(layers(), c.wanted, c.budget);
    EXPECT_EQ(d.ahead, c.ahead);
    EXPECT_DOUBLE_EQ(d.need, c.need);
  }
}

TEST(RecomputeDepth, WhereNothingFitsItIsZeroWithTheNeedAboveTheBudget) {
  const RecomputeDepth d = recomputeAheadWithin(layers(), 1, 40);
  EXPECT_EQ(d.ahead, 0);
  EXPECT_DOUBLE_EQ(d.need, 49);
  // A model without decoder layers needs its slots and its largest gradients, whatever the depth.
  const RecomputeDepth none = recomputeAheadWithin({{10, 10, 0, 0}, {10, 10, 0, 0}}, 2, 25);
  EXPECT_EQ(none.ahead, 0);
  EXPECT_DOUBLE_EQ(none.need, 30);
}

}  // namespace
}  // namespace rp::engine
