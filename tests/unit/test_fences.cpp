// Note [Layer fences] in one process: counters order waiters after setters, a wait that outlives the stall
// timeout names the late rank and its last operation (activity board), and the board reads consistently.
#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "control/channel.h"
#include "engine/activity.h"
#include "engine/fences.h"
#include "engine/regions.h"

namespace rp::engine {
namespace {

struct Store {
  explicit Store(int layers, int ranks, int versions = 1)
      : fenceBytes(Fences::regionBytes(layers, ranks, versions) / 8, 0),
        boardBytes(ActivityBoard::regionBytes(ranks) / 8 + 1, 0) {}
  std::vector<std::int64_t> fenceBytes;
  std::vector<std::int64_t> boardBytes;
};

// A waiter passes only once every rank published: with rank 0's copy alone it stalls naming rank 1 (a stall
// timeout of 0.05 s makes "not yet" an event, not a window), and one waiting on another thread is released by
// rank 1's copy.
TEST(Fences, AWaiterProceedsOnlyAfterEveryRankPublished) {
  Store store(3, 2);
  Fences fences(store.fenceBytes.data(), 3, 2, {10.0, 10.0});
  const Fences impatient(store.fenceBytes.data(), 3, 2, {0.05, 0.05});  // the same counters
  EXPECT_TRUE(fences.copiedByAll(1, 0));
  EXPECT_FALSE(fences.copiedByAll(1, 1));
  std::atomic<bool> passed{false};
  fences.setCopied(1, 0, 1);
  try {
    impatient.waitCopiedByAll(1, 1);  // iteration 1's upload of layer 1 needs both ranks' copies
    ADD_FAILURE() << "passed with rank 1's slice not published";
  } catch (const control::PeerError& e) {
    EXPECT_NE(std::string(e.what()).find("rank 1's weight copy of layer 1 to reach 1 (it is 0)"), std::string::npos)
        << e.what();
  }
  std::thread waiter([&] {
    fences.waitCopiedByAll(1, 1);
    passed = true;
  });
  fences.setCopied(1, 1, 1);
  waiter.join();
  EXPECT_TRUE(passed.load());
  EXPECT_TRUE(fences.copiedByAll(1, 1));
  EXPECT_FALSE(fences.copiedByAll(0, 1)) << "other layers are independent";
}

// Note [Upload as published]: a stage's upload queues each layer as soon as every rank published it, so the
// first layers' copies run while the optimizer still writes the later ones: layer 1 is handed on while layer 2
// is still unpublished (the impatient wait stalls on it, naming rank 1), then the rest in order.
TEST(Fences, EachLayerIsHandedOnAsSoonAsItIsPublishedNotAfterTheRange) {
  Store store(4, 2);
  Fences fences(store.fenceBytes.data(), 4, 2, {10.0, 10.0});
  const Fences impatient(store.fenceBytes.data(), 4, 2, {0.05, 0.05});  // the same counters
  std::vector<int> order;
  for (int r = 0; r < 2; ++r) fences.setCopied(1, r, 1);
  fences.setCopied(2, 0, 1);  // rank 1's slice of layer 2 is not published yet
  try {
    impatient.forEachCopiedByAll(1, 4, 1, [&](int l) { order.push_back(l); });
    ADD_FAILURE() << "layer 2 handed on with rank 1's slice not published";
  } catch (const control::PeerError& e) {
    EXPECT_NE(std::string(e.what()).find("rank 1's weight copy of layer 2"), std::string::npos) << e.what();
  }
  EXPECT_EQ(order, (std::vector<int>{1})) << "layer 1 is published, layer 2 not by every rank";
  order.clear();
  std::thread upload([&] { fences.forEachCopiedByAll(1, 4, 1, [&](int l) { order.push_back(l); }); });
  fences.setCopied(2, 1, 1);
  for (int r = 0; r < 2; ++r) fences.setCopied(3, r, 1);
  upload.join();
  EXPECT_EQ(order, (std::vector<int>{1, 2, 3}));
}

TEST(Fences, CountersAccumulateUploadsAndDownloads) {
  Store store(2, 1);
  Fences fences(store.fenceBytes.data(), 2, 1, {0.05, 0.05});
  fences.addUpload(0, 0);
  fences.addUpload(0, 0);
  fences.addDownload(1, 0);
  EXPECT_NO_THROW(fences.waitUploads(0, 0, 2));
  EXPECT_THROW(fences.waitUploads(0, 0, 3), control::PeerError);
  EXPECT_NO_THROW(fences.waitDownloads(1, 0));
  EXPECT_THROW(fences.waitDownloads(1, 1), control::PeerError) << "step 2's download has not landed";
  EXPECT_THROW(fences.waitDownloads(0, 0), control::PeerError) << "other layers are independent";
}

// Staleness k >= 2 keeps k versions: an iteration's uploads and downloads count on its version (t mod V) only,
// the loss buffers are V + 1, and a resumed run counts the iterations before it on their versions.
TEST(Fences, VersionsCountApart) {
  Store store(1, 1, 2);
  Fences fences(store.fenceBytes.data(), 1, 1, {0.05, 0.05}, nullptr, 2);
  fences.addDownload(0, 1);  // step 2's download lands before step 1's
  EXPECT_NO_THROW(fences.waitDownloads(0, 1));
  EXPECT_THROW(fences.waitDownloads(0, 0), control::PeerError) << "step 1 is on the other version";
  EXPECT_THROW(fences.waitDownloads(0, 3), control::PeerError) << "step 4 is the next download into version 1";
  fences.addUpload(0, 1);
  EXPECT_THROW(fences.waitUploads(0, 0, 1), control::PeerError);
  EXPECT_NO_THROW(fences.waitUploads(0, 3, 1));
  fences.setFusedDone(2);
  EXPECT_NO_THROW(fences.waitFusedDone(2));
  EXPECT_THROW(fences.waitFusedDone(0), control::PeerError);
  EXPECT_THROW(fences.waitFusedDone(5), control::PeerError) << "step 6 reuses step 3's loss buffer";
  fences.startAt(5);  // steps 1, 3, 5 downloaded into version 0, steps 2, 4 into version 1
  EXPECT_NO_THROW(fences.waitDownloads(0, 4));
  EXPECT_NO_THROW(fences.waitDownloads(0, 3));
  EXPECT_THROW(fences.waitDownloads(0, 5), control::PeerError);
  EXPECT_THROW(fences.waitDownloads(0, 6), control::PeerError);
  EXPECT_NO_THROW(fences.waitFusedDone(4));
  EXPECT_THROW(fences.waitFusedDone(5), control::PeerError);
}

// Recompute ahead waits for the fused stage to have started a microbatch: later microbatches and later steps
// count as started, earlier ones do not; a resumed run starts before microbatch 0 of its first step.
TEST(Fences, FusedStartedOrdersByStepThenMicrobatch) {
  Store store(2, 1);
  Fences fences(store.fenceBytes.data(), 2, 1, {0.05, 0.05});
  fences.startAt(7);
  EXPECT_THROW(fences.waitFusedStarted(7, 0), control::PeerError);
  fences.setFusedStarted(7, 3);
  EXPECT_NO_THROW(fences.waitFusedStarted(7, 3));
  EXPECT_NO_THROW(fences.waitFusedStarted(6, 15));
  EXPECT_THROW(fences.waitFusedStarted(7, 4), control::PeerError);
  fences.setFusedStarted(8, 0);
  EXPECT_NO_THROW(fences.waitFusedStarted(7, 1000));
  EXPECT_THROW(fences.waitFusedStarted(8, 1), control::PeerError);
}

TEST(Fences, AStallNamesTheLateRankAndItsLastOperation) {
  Store store(2, 2);
  ActivityBoard board(store.boardBytes.data(), 2);
  Fences fences(store.fenceBytes.data(), 2, 2, {0.1, 0.1}, &board);
  board.set(1, 0, "fwd 0-1 mb 2 (step 5)");
  board.set(1, 1, "AdamW (step 4)");
  fences.setConsumed(0, 0, 5);
  try {
    fences.waitConsumedByAll(0, 5);
    FAIL() << "expected PeerError";
  } catch (const control::PeerError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("stalled: waited 0 s for rank 1's optimizer taking layer 0's gradients to reach 5"),
              std::string::npos)
        << what;
    EXPECT_NE(what.find("rank 1: worker: fwd 0-1 mb 2 (step 5)"), std::string::npos) << what;
    EXPECT_NE(what.find("optimizer: AdamW (step 4)"), std::string::npos) << what;
  }
}

// A rank's per-layer times: layers it did not run stay "not measured" (not 0 ms, which the coordinator
// would average in as a measurement); a backward span is spread over its layers by weight.
TEST(LayerTimes, LayersARankDidNotRunStayNotMeasured) {
  std::vector<double> ms(4, detail::kNotMeasured);
  detail::addMs(ms[0], 2.0);
  detail::addMs(ms[0], 1.0);
  detail::spread(6.0, 1, 3, {1.0, 1.0, 2.0, 1.0}, ms);
  EXPECT_EQ(ms[0], 3.0);
  EXPECT_EQ(ms[1], 2.0);
  EXPECT_EQ(ms[2], 4.0);
  EXPECT_LT(ms[3], 0.0);
}

// Two nodes of two ranks laid out round-robin by the launcher (mpirun --map-by node): world ranks 0 and 2 on
// node 0, 1 and 3 on node 1. Node 0 describes rank 2 from its own board (local rank 1), ranks 1 and 3 by host.
TEST(ActivityBoard, DescribesAWorldRankFromItsNodesBoardOrByHost) {
  Store store(1, 2);
  ActivityBoard board(store.boardBytes.data(), 2);
  board.set(1, 0, "bwd 3-5 mb 0 (step 2)");
  WorldIdentity id;
  id.rank = 0, id.size = 4, id.localSize = 2, id.node = 0, id.nodeCount = 2;
  id.places = {{0, 0, "a"}, {1, 0, "b"}, {0, 1, "a"}, {1, 1, "b"}};
  EXPECT_EQ(describeWorldRank(board, id, 2).rfind("rank 2: worker: bwd 3-5 mb 0 (step 2)", 0), 0u)
      << describeWorldRank(board, id, 2);
  EXPECT_EQ(describeWorldRank(board, id, 1), "rank 1 runs on node 1 (b)");
  EXPECT_EQ(describeWorldRank(board, id, 3), "rank 3 runs on node 1 (b)");
  EXPECT_EQ(describeWorldRank(board, id, 0).rfind("rank 0: worker: (nothing yet)", 0), 0u);
}

// Note [Heartbeats]: a rank whose process stops beating is silent, named in the world's numbering; one whose
// Heartbeat runs is not, and a rank that never beat (not started) is not reported.
TEST(ActivityBoard, ARankThatStopsBeatingIsSilent) {
  Store store(1, 3);
  ActivityBoard board(store.boardBytes.data(), 3);
  board.beat(1);  // then stops, as a process under kill -STOP
  Heartbeat running(board, 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(400));
  const auto silent = board.silent(0.3);
  ASSERT_EQ(silent.size(), 1u);
  EXPECT_EQ(silent[0].first, 1);
  EXPECT_GE(silent[0].second, 0.3);
  EXPECT_TRUE(board.silentRanks().empty()) << "not silent for kSilentSeconds yet";
  std::this_thread::sleep_for(std::chrono::duration<double>(ActivityBoard::kSilentSeconds));
  const std::string text = board.silentRanks([](int local) { return local + 4; });
  EXPECT_NE(text.find("rank 5 has not run for 2."), std::string::npos) << text;
  EXPECT_EQ(text.find("rank 4 "), std::string::npos) << text;
  { Heartbeat finished(board, 2); }  // a rank that ended its run is never silent
  std::this_thread::sleep_for(std::chrono::milliseconds(400));
  for (const auto& [rank, ago] : board.silent(0.3)) EXPECT_NE(rank, 2) << ago;
}

// Every read overlapping the writer sees one whole write: 60 a's or 60 b's, never a mix and never nothing
// (the board holds a write from before the reader starts). A board that drops writes shows "(nothing yet)" and
// one that never publishes the later writes keeps showing the first: both fail.
TEST(ActivityBoard, ConcurrentWritesNeverTear) {
  Store store(1, 1);
  ActivityBoard board(store.boardBytes.data(), 1);
  const std::string as(60, 'a'), bs(60, 'b');
  board.set(0, 0, bs);
  std::atomic<bool> stop{false};
  std::atomic<int> writes{0};
  std::thread writer([&] {
    for (int i = 1; !stop; ++i) {
      board.set(0, 0, i % 2 ? as : bs);
      writes = i;
      std::this_thread::yield();
    }
  });
  int seenA = 0;
  for (int i = 0; i < 2000 || (seenA == 0 && writes < 1000000); ++i) {
    const std::string d = board.describe(0);
    const bool allA = d.find(as) != std::string::npos;
    const bool allB = d.find(bs) != std::string::npos;
    ASSERT_TRUE(allA != allB) << d;
    seenA += allA ? 1 : 0;
  }
  stop = true;
  writer.join();
  EXPECT_GT(seenA, 0) << "no read saw a write made after the reader started (" << writes << " writes)";
}

}  // namespace
}  // namespace rp::engine
