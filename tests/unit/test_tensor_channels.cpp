// The tensor plane's backends below the engine (docs/protocol.md, "Tensor plane"), with threads as the ranks
// of one node: the device-direct backend hands a stage output to the next worker through the producer's ring
// (not the host arena), keeps saved tensors in the arena, double-buffers by iteration parity; the in-process
// backend refuses a get that does not match its put's readers (which is how the engine's equivalence tests
// check that it names them); the peer-link backend hands off over the workers' links in each pair's send order;
// a microbatch's readiness message goes out only once its puts' copies have landed, in the order signalled,
// without the signalling thread waiting (Note [Readiness sender]).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <mutex>
#include <regex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "common/error.h"
#include "control/inproc/inproc_channel.h"
#include "device/cpu/cpu_worker.h"
#include "transport/readiness.h"
#include "transport/tensor_channel.h"

namespace rp::transport {
namespace {

constexpr std::size_t kBytes = 64;
constexpr int kMicrobatches = 2;

std::vector<std::uint8_t> filled(std::uint8_t value) {
  return std::vector<std::uint8_t>(kBytes, value);
}

// Runs `body(rank, channel)` on `ranks` threads, each with its own CPU worker and a channel `factory` built
// collectively; returns the errors the ranks threw ("rank r: what").
std::vector<std::string> onRanks(int ranks, const TensorChannelFactory& factory,
                                 const std::function<void(int, TensorChannel&)>& body) {
  control::InProcHub hub(ranks);
  std::vector<std::string> errors;
  std::mutex mutex;
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r) {
    threads.emplace_back([&, r] {
      try {
        control::InProcChannel node(hub, r);
        device::CpuWorker worker({});
        auto channel = factory({node, worker, memory::shareInProcess, {60.0, 60.0}, 4, kMicrobatches, kBytes});
        body(r, *channel);  // reads are complete when get returns: a ring may go while its peer lives on
      } catch (const std::exception& e) {
        std::lock_guard<std::mutex> lock(mutex);
        errors.push_back("rank " + std::to_string(r) + ": " + e.what());
      }
    });
  }
  for (auto& t : threads) t.join();
  return errors;
}

control::StageReady ready(std::int64_t step, int mb) {
  return {control::kProtocolVersion, static_cast<std::uint32_t>(mb), step, 0};
}

TEST(DeviceDirect, HandsOffThroughTheRingAndSavesThroughTheArena) {
  std::vector<std::uint8_t> handOff, saved, handOffAsSaved;
  const auto errors = onRanks(2, deviceDirect, [&](int rank, TensorChannel& channel) {
    const TensorId out{0, 2, 1, TensorKind::kActivation}, checkpoint{0, 1, 1, TensorKind::kActivation};
    if (rank == 0) {
      channel.put(out, filled(7).data(), kBytes, {1, false});
      channel.put(checkpoint, filled(9).data(), kBytes, {-1, true});
      channel.signal(1, ready(0, 1));
      return;
    }
    channel.await(0, ready(0, 1), [] { return std::string("rank 0"); });
    handOff.resize(kBytes);
    saved.resize(kBytes);
    handOffAsSaved.resize(kBytes);
    channel.get(out, handOff.data(), kBytes, 0);
    channel.get(checkpoint, saved.data(), kBytes, kSaved);
    channel.get(out, handOffAsSaved.data(), kBytes, kSaved);  // the arena never saw the hand-off
  });
  ASSERT_TRUE(errors.empty()) << errors.front();
  EXPECT_EQ(handOff, filled(7));
  EXPECT_EQ(saved, filled(9));
  EXPECT_EQ(handOffAsSaved, filled(0));
}

// Iteration t+1's hand-off of a microbatch does not overwrite iteration t's (Note [Hand-off slots]), and a
// hand-off marked saved as well is in both places.
TEST(DeviceDirect, DoubleBuffersByIterationParity) {
  std::vector<std::vector<std::uint8_t>> got(3, std::vector<std::uint8_t>(kBytes));
  const auto errors = onRanks(2, deviceDirect, [&](int rank, TensorChannel& channel) {
    const TensorId even{4, 1, 0, TensorKind::kGradient}, odd{5, 1, 0, TensorKind::kGradient};
    if (rank == 1) {
      channel.put(even, filled(1).data(), kBytes, {0, true});
      channel.put(odd, filled(2).data(), kBytes, {0, false});
      channel.signal(0, ready(5, 0));
      return;
    }
    channel.await(1, ready(5, 0), [] { return std::string("rank 1"); });
    channel.get(even, got[0].data(), kBytes, 1);
    channel.get(odd, got[1].data(), kBytes, 1);
    channel.get(even, got[2].data(), kBytes, kSaved);
  });
  ASSERT_TRUE(errors.empty()) << errors.front();
  EXPECT_EQ(got[0], filled(1));
  EXPECT_EQ(got[1], filled(2));
  EXPECT_EQ(got[2], filled(1));
}

TEST(DeviceDirect, AHandOffOfTheWrongSizeIsNamed) {
  const auto errors = onRanks(2, deviceDirect, [&](int rank, TensorChannel& channel) {
    if (rank == 0) channel.put({0, 1, 0, TensorKind::kActivation}, filled(1).data(), kBytes / 2, {1, false});
  });
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_NE(
      errors[0].find(
          "rank 0: internal error: hand-off (layer 1, mb 0) of 32 bytes; the slots hold 2 microbatches of 64 bytes"),
      std::string::npos)
      << errors[0];
}

// A rank that cannot open a peer's ring (CUDA IPC refused, here an injected fault) fails naming why; every other
// rank fails naming it, and none is left waiting in the set-up.
TEST(DeviceDirect, ASetUpFailureOnOneRankEndsEveryRankNamingIt) {
  ASSERT_EQ(::setenv("RP_FAULT_INJECT", "throw:1:0:open-ring", 1), 0);
  auto errors = onRanks(3, deviceDirect, [](int, TensorChannel&) {});
  ::unsetenv("RP_FAULT_INJECT");
  ASSERT_EQ(errors.size(), 3u);
  std::sort(errors.begin(), errors.end());
  EXPECT_NE(errors[0].find("rank 0: rank 0: the device-direct tensor channel could not be set up on rank 1 (its error "
                           "names why)"),
            std::string::npos)
      << errors[0];
  EXPECT_NE(errors[1].find("rank 1: rank 1: the device-direct tensor channel could not be set up: opening rank 0's "
                           "ring: fault injection: rank 1 fails at step 0 (open-ring)"),
            std::string::npos)
      << errors[1];
  EXPECT_NE(errors[2].find("rank 2: rank 2: the device-direct tensor channel could not be set up on rank 1"),
            std::string::npos)
      << errors[2];
}

// Note [Link order]: hand-offs go over the pair's link, in order; saved tensors through the arena.
TEST(PeerLinks, HandsOffOverTheLinksAndSavesThroughTheArena) {
  std::vector<std::vector<std::uint8_t>> got(4, std::vector<std::uint8_t>(kBytes));
  const auto errors = onRanks(3, peerLinks, [&](int rank, TensorChannel& channel) {
    const TensorId first{0, 2, 0, TensorKind::kActivation}, second{0, 2, 1, TensorKind::kActivation};
    const TensorId checkpoint{0, 1, 1, TensorKind::kActivation};
    if (rank == 0) {
      channel.put(first, filled(5).data(), kBytes, {2, false});
      channel.put(second, filled(6).data(), kBytes, {2, true});
      channel.put(checkpoint, filled(9).data(), kBytes, {-1, true});
      channel.signal(2, ready(0, 1));
    } else if (rank == 2) {
      channel.await(0, ready(0, 1), [] { return std::string("rank 0"); });
      channel.get(first, got[0].data(), kBytes, 0);
      channel.get(second, got[1].data(), kBytes, 0);
      channel.get(checkpoint, got[2].data(), kBytes, kSaved);
      channel.get(first, got[3].data(), kBytes, kSaved);  // the arena never saw a hand-off not marked saved
    }
  });
  ASSERT_TRUE(errors.empty()) << errors.front();
  EXPECT_EQ(got[0], filled(5));
  EXPECT_EQ(got[1], filled(6));
  EXPECT_EQ(got[2], filled(9));
  EXPECT_EQ(got[3], filled(0));
}

// What NCCL cannot check, the CPU links do: a receive out of the pair's send order is named.
TEST(PeerLinks, AReceiveOutOfTheSendOrderIsNamed) {
  const auto errors = onRanks(2, peerLinks, [&](int rank, TensorChannel& channel) {
    const TensorId first{3, 2, 0, TensorKind::kActivation}, second{3, 2, 1, TensorKind::kActivation};
    std::vector<std::uint8_t> got(kBytes);
    if (rank == 0) {
      channel.put(first, filled(1).data(), kBytes, {1, false});
      channel.put(second, filled(2).data(), kBytes, {1, false});
      channel.signal(1, ready(3, 1));
      return;
    }
    channel.await(0, ready(3, 1), [] { return std::string("rank 0"); });
    channel.get(second, got.data(), kBytes, 0);
  });
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_TRUE(std::regex_search(errors[0], std::regex("rank 1: internal error: rank 1 receives tensor 0x[0-9a-f]+ from "
                                                      "rank 0, whose next send is 0x[0-9a-f]+: a pair's sends and "
                                                      "receives are out of order")))
      << errors[0];
}

// CPU workers' links join threads of one process only; processes need CUDA workers (NCCL).
TEST(PeerLinks, CpuWorkersInDifferentProcessesCannotJoin) {
  device::CpuWorker worker({});
  try {
    worker.joinLinks("cpu-links 1 0", 1, 2, 4, kBytes);
    FAIL() << "joined links made by another process";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("rank 1: CPU workers' peer links join only ranks of one process (threads as "
                                         "ranks), and these were made by process 1: pipeline.tensor_channel = "
                                         "\"nccl\" needs CUDA workers; use \"host\""),
              std::string::npos)
        << e.what();
  }
}

TEST(InProcTensors, AGetThatDoesNotMatchThePutsReadersIsRefused) {
  const auto factory = inProcess(newInProcTensorHub());
  const auto errors = onRanks(2, factory, [&](int rank, TensorChannel& channel) {
    const TensorId out{0, 2, 0, TensorKind::kActivation};
    std::vector<std::uint8_t> into(kBytes);
    if (rank == 0) {
      channel.put(out, filled(3).data(), kBytes, {1, false});
      channel.signal(1, ready(0, 0));
      return;
    }
    channel.await(0, ready(0, 0), [] { return std::string("rank 0"); });
    channel.get(out, into.data(), kBytes, 0);  // as put: fine
    EXPECT_EQ(into, filled(3));
    channel.get(out, into.data(), kBytes, kSaved);
  });
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_NE(errors[0].find("rank 1: internal error: tensor (step 1, layer 2, mb 0) read by rank 1 as saved, but rank 0 "
                           "put it for next 1"),
            std::string::npos)
      << errors[0];
}

// Note [Readiness sender]: the signal of a microbatch whose put is still copying returns at once; the message
// waits for the copy on the sender thread, and one signalled after it (its copies done) does not overtake it.
// Nothing is received while the sender has waited a health period (0.5 s) for the copy: an event, not a window.
TEST(ReadinessSender, SendsOnceTheCopiesLandedInTheOrderSignalled) {
  control::InProcHub hub(2);
  control::InProcChannel producer(hub, 0), consumer(hub, 1);
  ControlReadiness readiness(producer, {60.0, 60.0});
  device::Ticket copy;
  copy.add();  // a put's copy in flight
  std::atomic<bool> waited{false};  // the ticket's health check runs once a wait on it has lasted kHealthPeriod
  copy.setHealthCheck([&] { waited = true; });
  readiness.signal(1, ready(0, 0), {copy});
  readiness.signal(1, ready(0, 1), {});
  control::StageReady got{};
  bool early = false;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (!waited && !early && std::chrono::steady_clock::now() < deadline) {
    early = consumer.receive(0, control::Tag::kStageReady, &got, sizeof(got),
                             std::chrono::steady_clock::now() + std::chrono::milliseconds(10));
  }
  EXPECT_FALSE(early) << "a readiness message went out before its copy landed";
  ASSERT_TRUE(waited.load()) << "the sender thread never waited for the copy";
  EXPECT_FALSE(consumer.receive(0, control::Tag::kStageReady, &got, sizeof(got), std::chrono::steady_clock::now()))
      << "a readiness message went out while the sender waited for its copy";
  copy.complete();
  ControlReadiness received(consumer, {60.0, 60.0});
  received.await(0, ready(0, 0), [] { return std::string("rank 0"); });  // a PeerError if out of order
  received.await(0, ready(0, 1), [] { return std::string("rank 0"); });
}

// A copy that fails never lets its readiness message go; the next signal on the main thread says why.
TEST(ReadinessSender, ACopyThatFailsStopsTheSenderAndTheNextSignalSaysSo) {
  control::InProcHub hub(2);
  control::InProcChannel producer(hub, 0), consumer(hub, 1);
  ControlReadiness readiness(producer, {60.0, 60.0});
  device::Ticket copy;
  copy.add();
  readiness.signal(1, ready(0, 0), {copy});
  copy.complete(std::make_exception_ptr(std::runtime_error("device fault in the download")));
  std::string error;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (error.empty() && std::chrono::steady_clock::now() < deadline) {
    try {
      readiness.signal(1, ready(0, 1), {});
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    } catch (const SystemError& e) {
      error = e.what();
    }
  }
  EXPECT_NE(error.find("a hand-off's copy failed before its readiness message was sent: device fault in the "
                       "download"),
            std::string::npos)
      << error;
  control::StageReady got{};
  EXPECT_FALSE(consumer.receive(0, control::Tag::kStageReady, &got, sizeof(got), std::chrono::steady_clock::now()))
      << "a message went out after a failed copy";
}

}  // namespace
}  // namespace rp::transport
