// Note [Gradient marks]: during a backward, a layer is marked once every tensor it owns has accumulated its
// gradient, deepest layer first; a layer not fully reached has no mark; the hooks go with the object.
#include <gtest/gtest.h>

#include <map>
#include <vector>

#include "engine/gradient_marks.h"
#include "model/libtorch.h"

namespace rp::engine {
namespace {

// A mark that remembers when it was taken and what the owned gradients were then.
struct SeenMark : device::ComputeMark {
  int order = 0;
  std::vector<torch::Tensor> grads;  // of every watched tensor, cloned (undefined: not yet accumulated)
};

class GradientMarksTest : public ::testing::Test {
 protected:
  // Three "layers" of a chain x -> (w0) -> (w1a, w1b) -> (w2) -> loss; `watched` in that order.
  torch::Tensor w0 = torch::full({3}, 2.0).requires_grad_(true);
  torch::Tensor w1a = torch::full({3}, 3.0).requires_grad_(true);
  torch::Tensor w1b = torch::full({3}, 0.5).requires_grad_(true);
  torch::Tensor w2 = torch::full({3}, 4.0).requires_grad_(true);
  std::vector<torch::Tensor> watched{w0, w1a, w1b, w2};
  std::vector<std::shared_ptr<SeenMark>> taken;

  GradientMarks::TakeMark recorder() {
    return [this] {
      auto m = std::make_shared<SeenMark>();
      m->order = static_cast<int>(taken.size());
      for (const auto& w : watched) m->grads.push_back(w.grad().defined() ? w.grad().clone() : torch::Tensor());
      taken.push_back(m);
      return m;
    };
  }
  void backward(const torch::Tensor& x) { (((x * w0) * w1a + w1b) * w2).sum().backward(); }
  std::map<int, std::vector<torch::Tensor>> layers() const { return {{0, {w0}}, {1, {w1a, w1b}}, {2, {w2}}}; }
};

TEST_F(GradientMarksTest, MarksEachLayerOnceItsGradientsAreFinalDeepestFirst) {
  GradientMarks marks(layers(), recorder());
  backward(torch::ones({3}));
  ASSERT_EQ(taken.size(), 3U);
  const auto of = [&](int l) { return std::dynamic_pointer_cast<SeenMark>(marks.of(l)); };
  ASSERT_TRUE(of(0) && of(1) && of(2));
  EXPECT_LT(of(2)->order, of(1)->order);
  EXPECT_LT(of(1)->order, of(0)->order);
  // At a layer's mark its own gradients are there and final (d/dw of sum(((x w0) w1a + w1b) w2) at x = 1).
  const auto finalGrad = [](const SeenMark& m, int i) { return m.grads[static_cast<std::size_t>(i)]; };
  EXPECT_TRUE(torch::equal(finalGrad(*of(2), 3), torch::full({3}, 6.5)));   // (2*3 + 0.5)
  EXPECT_TRUE(torch::equal(finalGrad(*of(1), 1), torch::full({3}, 8.0)));   // 2*4
  EXPECT_TRUE(torch::equal(finalGrad(*of(1), 2), torch::full({3}, 4.0)));   // both of layer 1's, not one
  EXPECT_TRUE(torch::equal(finalGrad(*of(0), 0), torch::full({3}, 12.0)));  // 3*4
  // ... and the shallower layer's were not yet: the mark is taken while the backward goes on.
  EXPECT_FALSE(finalGrad(*of(2), 0).defined());
}

TEST_F(GradientMarksTest, MarksTheAccumulatedGradientOfTheLastMicrobatch) {
  backward(torch::ones({3}));  // an earlier microbatch: no marks
  EXPECT_TRUE(taken.empty());
  GradientMarks marks(layers(), recorder());
  backward(torch::ones({3}));
  ASSERT_TRUE(marks.of(0));
  const auto& m = static_cast<const SeenMark&>(*marks.of(0));
  EXPECT_TRUE(torch::equal(m.grads[0], torch::full({3}, 24.0)));  // two microbatches' sum
}

TEST_F(GradientMarksTest, ALayerTheBackwardDoesNotFullyReachHasNoMark) {
  torch::Tensor unused = torch::zeros({3}).requires_grad_(true);  // an expert no token reached
  GradientMarks marks({{0, {w0}}, {1, {w1a, w1b}}, {2, {w2, unused}}}, recorder());
  backward(torch::ones({3}));
  EXPECT_TRUE(marks.of(0) && marks.of(1));
  EXPECT_FALSE(marks.of(2));
  EXPECT_FALSE(marks.of(7));  // not watched at all
}

TEST_F(GradientMarksTest, TheHooksGoWithTheObject) {
  { GradientMarks marks(layers(), recorder()); }
  backward(torch::ones({3}));
  EXPECT_TRUE(taken.empty());
}

}  // namespace
}  // namespace rp::engine
