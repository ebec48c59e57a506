// The ControlChannel contract, written once and run on every implementation (inproc threads in
// tests/unit/test_control_channel.cpp, real processes in tests/mpi/test_control_channel_mpi.cpp).
// Each function is called on every rank with that rank's channel; failures are gtest failures.
#pragma once

#include <chrono>
#include <cstdint>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "control/channel.h"

namespace rp::test {

// Every rank sends five readiness messages to the next rank and receives the previous rank's, in order.
inline void conformanceRingInOrder(control::ControlChannel& c) {
  const int next = (c.rank() + 1) % c.size(), prev = (c.rank() + c.size() - 1) % c.size();
  for (std::uint32_t mb = 0; mb < 5; ++mb) {
    control::sendReady(c, next, {control::kProtocolVersion, mb, 7, c.rank()});
  }
  for (std::uint32_t mb = 0; mb < 5; ++mb) {
    EXPECT_NO_THROW(control::waitReady(c, prev, {control::kProtocolVersion, mb, 7, prev}, {30.0, 30.0})) << "mb " << mb;
  }
}

// Waiting for a message nobody sends times out with a PeerError naming the peer and what was awaited.
inline void conformanceTimeoutNamesThePeer(control::ControlChannel& c) {
  const int prev = (c.rank() + c.size() - 1) % c.size();
  try {
    control::waitReady(c, prev, {control::kProtocolVersion, 3, 4, 5}, {0.2, 0.2},
                       [] { return std::string("peer busy"); });
    ADD_FAILURE() << "expected PeerError";
  } catch (const control::PeerError& e) {
    const std::string what = e.what();
    EXPECT_NE(
        what.find("stalled: waited 0 s for rank " + std::to_string(prev) + " to finish job 5 microbatch 3 of step 5"),
        std::string::npos)
        << what;
    EXPECT_NE(what.find("peer busy"), std::string::npos) << what;
  }
}

// A message for another job is a protocol error, not silently accepted.
inline void conformanceMismatchIsProtocolError(control::ControlChannel& c) {
  const int next = (c.rank() + 1) % c.size(), prev = (c.rank() + c.size() - 1) % c.size();
  control::sendReady(c, next, {control::kProtocolVersion, 0, 1, 9});
  try {
    control::waitReady(c, prev, {control::kProtocolVersion, 0, 1, 2}, {30.0, 30.0});
    ADD_FAILURE() << "expected PeerError";
  } catch (const control::PeerError& e) {
    EXPECT_NE(std::string(e.what()).find("protocol error: from rank " + std::to_string(prev)), std::string::npos)
        << e.what();
  }
}

// Receives that time out lose nothing: each rank sends 2000 numbered messages to the next while the next
// polls for them with deadlines of 0-63 us, so deadlines expire while messages arrive (tens of times per run
// under MPI); every message is still received, once, in order (an MPI receive cancelled after its message
// matched must deliver it, not drop it). The race is narrow: a regression test, not a proof.
inline void conformanceShortDeadlinesLoseNothing(control::ControlChannel& c) {
  constexpr std::uint32_t kMessages = 2000;
  const int next = (c.rank() + 1) % c.size(), prev = (c.rank() + c.size() - 1) % c.size();
  std::uint32_t sent = 0, expected = 0;
  while (expected < kMessages) {
    if (sent < kMessages) {
      c.send(next, control::Tag::kTimings, &sent, sizeof(sent));
      ++sent;
    }
    std::uint32_t got = 0;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::microseconds((sent * 7919u) % 64u);
    if (!c.receive(prev, control::Tag::kTimings, &got, sizeof(got), deadline)) continue;  // tens per run
    // On a mismatch, go on from what arrived: every rank must still send and receive everything (no hang).
    EXPECT_EQ(got, expected) << "message " << expected << " from rank " << prev << " lost or reordered";
    expected = got + 1;
  }
  c.barrier();
}

// Collectives: barrier, broadcast, allreduce (sum/min/max over every element type), gather of payloads of
// different sizes.
inline void conformanceCollectives(control::ControlChannel& c) {
  const int n = c.size(), r = c.rank();
  c.barrier();
  std::int64_t value = r == n - 1 ? 1234567890123 : -1;
  c.broadcast(&value, sizeof(value), n - 1);
  EXPECT_EQ(value, 1234567890123);
  double sum[2] = {static_cast<double>(r + 1), 0.5};
  c.allreduce(sum, 2, control::Reduce::kSum);
  EXPECT_EQ(sum[0], n * (n + 1) / 2.0);
  EXPECT_EQ(sum[1], 0.5 * n);
  std::int32_t low = 10 + r, high = 10 + r;
  c.allreduce(&low, 1, control::Reduce::kMin);
  c.allreduce(&high, 1, control::Reduce::kMax);
  EXPECT_EQ(low, 10);
  EXPECT_EQ(high, 10 + n - 1);
  std::vector<float> grads(1000, static_cast<float>(r));
  c.allreduce(grads.data(), grads.size(), control::Reduce::kSum);
  EXPECT_EQ(grads[999], static_cast<float>(n * (n - 1) / 2));
  std::int64_t count = 1;
  c.allreduce(&count, 1, control::Reduce::kSum);
  EXPECT_EQ(count, n);
  const std::vector<std::uint8_t> mine(static_cast<std::size_t>(r) + 1, static_cast<std::uint8_t>(r));
  const auto all = c.gather(mine.data(), mine.size(), 0);
  if (r == 0) {
    ASSERT_EQ(all.size(), static_cast<std::size_t>(n));
    for (int q = 0; q < n; ++q) {
      EXPECT_EQ(all[static_cast<std::size_t>(q)],
                std::vector<std::uint8_t>(static_cast<std::size_t>(q) + 1, static_cast<std::uint8_t>(q)));
    }
  } else {
    EXPECT_TRUE(all.empty());
  }
}

// Started all-reduces (startAllreduce) finish, in any order of waiting, with the blocking call's sums, and a
// blocking collective may run while they are in flight; polled with test() they complete without wait().
inline void conformanceStartedAllreduce(control::ControlChannel& c) {
  const int n = c.size(), r = c.rank();
  std::vector<float> grads(100'000, static_cast<float>(r + 1));  // beyond MPI's eager sizes
  std::int32_t high = 10 + r;
  auto first = c.startAllreduce(grads.data(), grads.size(), control::Element::kFloat32, control::Reduce::kSum);
  auto second = c.startAllreduce(&high, 1, control::Element::kInt32, control::Reduce::kMax);
  std::int64_t count = 1;
  c.allreduce(&count, 1, control::Reduce::kSum);  // a blocking one between the start and the wait
  EXPECT_EQ(count, n);
  second->wait();
  first->wait();
  EXPECT_EQ(high, 10 + n - 1);
  EXPECT_EQ(grads.front(), static_cast<float>(n * (n + 1) / 2));
  EXPECT_EQ(grads.back(), static_cast<float>(n * (n + 1) / 2));
  double sum = r;
  auto polled = c.startAllreduce(&sum, 1, control::Element::kFloat64, control::Reduce::kSum);
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!polled->test() && std::chrono::steady_clock::now() < until) std::this_thread::yield();
  EXPECT_TRUE(polled->test()) << "test() alone did not finish the all-reduce within 10 s";
  EXPECT_EQ(sum, n * (n - 1) / 2.0);
}

// Reduce-scatter and all-gather over uneven blocks (one rank's may be empty), in place: rank r gets the sum of
// every rank's block r at the start of its buffer; an all-gather puts every rank's block r at block r.
inline void conformanceReduceScatterAndAllgather(control::ControlChannel& c) {
  const int n = c.size(), r = c.rank();
  std::vector<std::size_t> counts, offsets;
  std::size_t total = 0;
  for (int q = 0; q < n; ++q) {
    counts.push_back(q == 1 ? 0 : 50'000 + static_cast<std::size_t>(q) * 7);  // beyond MPI's eager sizes
    offsets.push_back(total);
    total += counts.back();
  }
  // Element i of rank q's buffer is q * 1000 + i % 1000: exact in float32 summed over any n here.
  std::vector<float> grads(total);
  for (std::size_t i = 0; i < total; ++i) grads[i] = static_cast<float>(r * 1000 + static_cast<int>(i % 1000));
  auto scatter = c.startReduceScatter(grads.data(), counts, control::Element::kFloat32, control::Reduce::kSum);
  std::int64_t between = 1;
  c.allreduce(&between, 1, control::Reduce::kSum);  // a blocking one between the start and the wait
  scatter->wait();
  EXPECT_EQ(between, n);
  const float ranks = static_cast<float>(n * (n - 1) / 2 * 1000);
  const std::size_t mine = offsets[static_cast<std::size_t>(r)];
  for (std::size_t i = 0; i < counts[static_cast<std::size_t>(r)]; ++i) {
    const float expected = ranks + static_cast<float>(n * static_cast<int>((mine + i) % 1000));
    if (grads[i] != expected) {
      ADD_FAILURE() << "rank " << r << ": reduced element " << i << " of its block is " << grads[i] << ", expected "
                    << expected;
      break;
    }
  }
  // All-gather: rank q's block holds q + 0.5 everywhere in it; every rank ends with all of them.
  std::vector<double> weights(total, -1.0);
  for (std::size_t i = 0; i < counts[static_cast<std::size_t>(r)]; ++i) weights[mine + i] = r + 0.5;
  c.startAllgather(weights.data(), counts, control::Element::kFloat64)->wait();
  for (int q = 0; q < n; ++q) {
    for (std::size_t i = 0; i < counts[static_cast<std::size_t>(q)]; ++i) {
      if (weights[offsets[static_cast<std::size_t>(q)] + i] != q + 0.5) {
        ADD_FAILURE() << "rank " << r << ": element " << i << " of rank " << q << "'s block is "
                      << weights[offsets[static_cast<std::size_t>(q)] + i];
        return;
      }
    }
  }
}

// A duplicate carries its own messages; a split groups ranks by color, ordered by key.
inline void conformanceDuplicateAndSplit(control::ControlChannel& c) {
  const int n = c.size(), r = c.rank();
  const auto dup = c.duplicate();
  EXPECT_EQ(dup->rank(), r);
  EXPECT_EQ(dup->size(), n);
  const int next = (r + 1) % n, prev = (r + n - 1) % n;
  control::sendReady(*dup, next, {control::kProtocolVersion, 1, 2, 3});
  control::StageReady none;
  EXPECT_FALSE(c.receive(prev, control::Tag::kStageReady, &none, sizeof(none),
                         std::chrono::steady_clock::now() + std::chrono::milliseconds(50)))
      << "a message on the duplicate reached the original";
  EXPECT_NO_THROW(control::waitReady(*dup, prev, {control::kProtocolVersion, 1, 2, 3}, {30.0, 30.0}));
  // Even and odd ranks, each group in reverse rank order.
  const auto half = c.split(r % 2, -r);
  const int members = (n - r % 2 + 1) / 2;
  EXPECT_EQ(half->size(), members);
  EXPECT_EQ(half->rank(), members - 1 - r / 2);
  std::int32_t sum = r;
  half->allreduce(&sum, 1, control::Reduce::kSum);
  std::int32_t expected = 0;
  for (int q = r % 2; q < n; q += 2) expected += q;
  EXPECT_EQ(sum, expected);
  c.barrier();
}

// One more thread may send while the owner receives and runs collectives (the tensor plane's readiness
// sender, transport/readiness.h): nothing is lost or reordered, and the collectives are unaffected.
inline void conformanceOneMoreSender(control::ControlChannel& c) {
  const int n = c.size(), r = c.rank(), next = (r + 1) % n, prev = (r + n - 1) % n;
  constexpr std::uint32_t kMessages = 50;
  std::thread sender([&] {
    for (std::uint32_t mb = 0; mb < kMessages; ++mb) control::sendReady(c, next, {control::kProtocolVersion, mb, 9, r});
  });
  for (std::uint32_t mb = 0; mb < kMessages; ++mb) {
    if (mb % 10 == 0) {
      std::int32_t sum = 1;
      c.allreduce(&sum, 1, control::Reduce::kSum);
      EXPECT_EQ(sum, n);
    }
    EXPECT_NO_THROW(control::waitReady(c, prev, {control::kProtocolVersion, mb, 9, prev}, {30.0, 30.0})) << "mb " << mb;
  }
  sender.join();
  c.barrier();
}

}  // namespace rp::test
