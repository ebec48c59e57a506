// The ControlChannel contract on the in-process implementation: threads as ranks.
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "control/inproc/inproc_channel.h"
#include "support/channel_conformance.h"

namespace rp::control {
namespace {

template <typename Fn>
void onThreadsAsRanks(int ranks, Fn&& body) {
  InProcHub hub(ranks);
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r) {
    threads.emplace_back([&hub, r, &body] {
      InProcChannel channel(hub, r);
      body(channel);
    });
  }
  for (auto& t : threads) t.join();
}

class InProcConformance : public ::testing::TestWithParam<int> {};

TEST_P(InProcConformance, RingInOrder) {
  onThreadsAsRanks(GetParam(), test::conformanceRingInOrder);
}
TEST_P(InProcConformance, TimeoutNamesThePeer) {
  onThreadsAsRanks(GetParam(), test::conformanceTimeoutNamesThePeer);
}
TEST_P(InProcConformance, MismatchIsProtocolError) {
  onThreadsAsRanks(GetParam(), test::conformanceMismatchIsProtocolError);
}

INSTANTIATE_TEST_SUITE_P(Ranks, InProcConformance, ::testing::Values(2, 3, 4));

TEST(Tags, AreUniqueAndInMpiRange) {
  for (std::size_t i = 0; i < kAllTags.size(); ++i) {
    EXPECT_GT(mpiTag(kAllTags[i]), 0);
    EXPECT_LE(mpiTag(kAllTags[i]), 32767);
    for (std::size_t j = i + 1; j < kAllTags.size(); ++j) EXPECT_NE(mpiTag(kAllTags[i]), mpiTag(kAllTags[j]));
  }
}

}  // namespace
}  // namespace rp::control
