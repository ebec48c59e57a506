// The ControlChannel contract, written once and run on every implementation (inproc threads in
// tests/unit/test_control_channel.cpp, real processes in tests/mpi/test_control_channel_mpi.cpp).
// Each function is called on every rank with that rank's channel; failures are gtest failures.
#pragma once

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

}  // namespace rp::test
