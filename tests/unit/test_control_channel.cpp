// The ControlChannel contract on the in-process implementation: threads as ranks.
#include <chrono>
#include <string>
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

TEST_P(InProcConformance, ShortDeadlinesLoseNothing) {
  onThreadsAsRanks(GetParam(), test::conformanceShortDeadlinesLoseNothing);
}

TEST_P(InProcConformance, Collectives) {
  onThreadsAsRanks(GetParam(), test::conformanceCollectives);
}
TEST_P(InProcConformance, StartedAllreduce) {
  onThreadsAsRanks(GetParam(), test::conformanceStartedAllreduce);
}
TEST_P(InProcConformance, ReduceScatterAndAllgather) {
  onThreadsAsRanks(GetParam(), test::conformanceReduceScatterAndAllgather);
}
TEST_P(InProcConformance, DuplicateAndSplit) {
  onThreadsAsRanks(GetParam(), test::conformanceDuplicateAndSplit);
}
TEST_P(InProcConformance, OneMoreSender) {
  onThreadsAsRanks(GetParam(), test::conformanceOneMoreSender);
}

INSTANTIATE_TEST_SUITE_P(Ranks, InProcConformance, ::testing::Values(2, 3, 4));

// A rank that fails leaves the hub (as MPI_Abort ends the other processes): a collective, a receive and a
// sub-group's collective waiting on it end at once in a PeerError naming it and why, not at their deadlines.
TEST(InProcHub, ARankThatLeavesEndsTheOthersWaits) {
  InProcHub hub(3);
  const auto early = hub.child(5, 0, 2);
  std::vector<std::string> errors(3);
  std::vector<std::thread> threads;
  const auto start = std::chrono::steady_clock::now();
  const auto never = start + std::chrono::hours(1);
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      InProcChannel channel(hub, r);
      try {
        if (r == 0) channel.barrier();
        int value = 0;
        if (r == 1) channel.receive(2, Tag::kDirective, &value, sizeof(value), never);
      } catch (const PeerError& e) {
        errors[static_cast<std::size_t>(r)] = e.what();
      }
    });
  }
  while (hub.waiting() < 2 && std::chrono::steady_clock::now() < start + std::chrono::seconds(20)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_EQ(hub.waiting(), 2) << "ranks 0 and 1 are not both waiting";  // so the failure wakes them, not meets them
  hub.abandon(2, "out of memory");
  for (auto& t : threads) t.join();
  for (int r = 0; r < 2; ++r) {
    EXPECT_NE(errors[static_cast<std::size_t>(r)].find("rank 2 failed: out of memory"), std::string::npos)
        << "rank " << r << ": " << errors[static_cast<std::size_t>(r)];
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
  // A sub-group made before or after the failure inherits it.
  for (const auto& group : {early, hub.child(7, 0, 2)}) {
    InProcChannel channel(group, 0);
    EXPECT_THROW(channel.barrier(), PeerError);
  }
}

// The stall inspector: a warning naming what is late and who, then (if still late) the abort with the same.
TEST(StallPolicy, WarnsOnceThenAbortsNamingTheLatePeer) {
  int attempts = 0;
  testing::internal::CaptureStderr();
  try {
    waitOrStall(
        {0.05, 0.15},
        [&](ControlChannel::Deadline deadline) {
          ++attempts;
          std::this_thread::sleep_until(deadline);
          return false;
        },
        [] { return std::string("rank 2's fence"); }, [] { return std::string("rank 2: worker: bwd 0-3"); });
    ADD_FAILURE() << "expected PeerError";
  } catch (const PeerError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("stalled: waited 0 s for rank 2's fence (pipeline.stall_timeout_s)\n  rank 2: worker: bwd 0-3"),
              std::string::npos)
        << what;
  }
  const std::string log = testing::internal::GetCapturedStderr();
  EXPECT_NE(log.find("still waiting after 0 s for rank 2's fence; the job aborts at 0 s"), std::string::npos) << log;
  EXPECT_NE(log.find("rank 2: worker: bwd 0-3"), std::string::npos) << log;
  EXPECT_EQ(attempts, 2);
}

TEST(StallPolicy, ALateArrivalAfterTheWarningIsNotAnError) {
  int attempts = 0;
  testing::internal::CaptureStderr();
  EXPECT_NO_THROW(waitOrStall(
      {0.01, 10.0}, [&](ControlChannel::Deadline) { return ++attempts == 2; }, [] { return std::string("x"); }));
  EXPECT_NE(testing::internal::GetCapturedStderr().find("still waiting"), std::string::npos);
  EXPECT_EQ(attempts, 2);
  // A warning time at or above the timeout means: no warning, abort only.
  attempts = 0;
  EXPECT_THROW(
      waitOrStall(
          {1.0, 0.01}, [&](ControlChannel::Deadline) { return ++attempts < 0; }, [] { return std::string("x"); }),
      PeerError);
  EXPECT_EQ(attempts, 1);
}

TEST(Tags, AreUniqueAndInMpiRange) {
  for (std::size_t i = 0; i < kAllTags.size(); ++i) {
    EXPECT_GT(mpiTag(kAllTags[i]), 0);
    EXPECT_LE(mpiTag(kAllTags[i]), 32767);
    for (std::size_t j = i + 1; j < kAllTags.size(); ++j) EXPECT_NE(mpiTag(kAllTags[i]), mpiTag(kAllTags[j]));
  }
}

}  // namespace
}  // namespace rp::control
