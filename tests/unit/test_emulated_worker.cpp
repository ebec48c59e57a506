// The emulated device (Note [Emulated device]): compute spans take their FLOPs at the profile's rate, copies
// take their bytes over the link direction they use and follow the compute they are ordered after, an urgent
// copy goes ahead of weight chunks that wait for their compute, the compute orders itself after a copy without
// the host waiting, and memory is accounted, not allocated. The device's own spans and marks carry its model's
// times, so these checks compare exact model times (to a microsecond), never the host's speed; where the model
// follows a host thread (the copy thread issuing the next chunk), the case leaves that thread a chunk's time.
#include <chrono>
#include <cstdint>
#include <ctime>
#include <memory>
#include <vector>

#include <gtest/gtest.h>

#include "common/error.h"
#include "device/emulated/emulated_worker.h"

namespace rp::device::emulated {
namespace {

using Ms = std::chrono::duration<double, std::milli>;

// 1 TFLOP/s, 1 GB/s a direction (or `link` bytes/s), 1 GB, 10 µs a kernel; pageable copies at half the link.
WorkerOptions profile(bool hostTraffic = false, double link = 1e9) {
  WorkerOptions o;
  o.chunkBytes = 4u << 20;
  o.emulated = {"test", "Test GPU", 1e12, link, 1e9, 10e-6, hostTraffic, /*spinWaits=*/false, /*pinned=*/true, link / 2};
  return o;
}

double threadCpuSeconds() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

double ms(Clock::duration d) {
  return Ms(d).count();
}

std::vector<DeviceSpan> ofKind(const std::vector<DeviceSpan>& spans, DeviceSpan::Kind kind) {
  std::vector<DeviceSpan> out;
  for (const auto& s : spans) {
    if (s.kind == kind) out.push_back(s);
  }
  return out;
}

TEST(EmulatedWorker, ComputeTakesItsFlopsAtTheProfileRateAndItsKernelsAtTheFloor) {
  EmulatedWorker worker(profile());
  EXPECT_TRUE(worker.modelsCompute());
  worker.expectCompute({50e9, 0});  // 50 ms first: the marks below are the device's, not the host's "now"
  const auto before = worker.mark();
  worker.expectCompute({20e9, 100});  // 20 ms + 1 ms
  const auto middle = worker.mark();
  worker.expectCompute({5e9, 0});  // 5 ms, queued behind the first: the host is ahead of the device
  const auto after = worker.mark();
  EXPECT_NEAR(worker.elapsedMs(*before, *middle), 21.0, 1e-3);
  EXPECT_NEAR(worker.elapsedMs(*middle, *after), 5.0, 1e-3);
  const auto spans = worker.takeDeviceSpans();
  ASSERT_EQ(spans.size(), 1u) << "back-to-back compute is one span";
  EXPECT_NEAR(ms(spans[0].end - spans[0].start), 76.0, 1e-3);
  EXPECT_TRUE(worker.takeDeviceSpans().empty()) << "taken once";
}

TEST(EmulatedWorker, ADownloadFollowsTheComputeAndTakesItsBytesOverTheDownLink) {
  EmulatedWorker worker(profile());
  std::vector<std::uint8_t> host(8u << 20, 0xab);
  const auto pin = worker.pinHost(host.data(), host.size(), "test");
  worker.expectCompute({10e9, 0});  // 10 ms
  const auto mark = worker.mark();
  worker.expectCompute({30e9, 0});  // 30 ms more, which the marked download does not wait for
  Ticket marked = worker.copyUrgentAfter(host.data(), nullptr, 2'000'000, *mark);  // 2 ms
  Ticket all = worker.copyUrgent(host.data() + 2'000'000, nullptr, 1'000'000);  // after all compute: 1 ms
  EXPECT_FALSE(all.done()) << "a copy completes when it lands, not when it is issued";
  marked.wait();
  all.wait();
  EXPECT_EQ(host[0], 0xab) << "without host traffic a copy touches no host memory";
  const auto spans = worker.takeDeviceSpans();
  const auto compute = ofKind(spans, DeviceSpan::Kind::kCompute);
  const auto down = ofKind(spans, DeviceSpan::Kind::kDownload);
  ASSERT_EQ(compute.size(), 1u);
  ASSERT_EQ(down.size(), 2u);
  EXPECT_TRUE(ofKind(spans, DeviceSpan::Kind::kUpload).empty());
  EXPECT_NEAR(ms(down[0].start - compute[0].start), 10.0, 1e-3) << "the marked download starts at its mark";
  EXPECT_NEAR(ms(down[0].end - down[0].start), 2.0, 1e-3);
  EXPECT_NEAR(ms(down[1].start - compute[0].end), 0.0, 1e-3) << "the other waits for all the compute";
  EXPECT_NEAR(ms(down[1].end - down[1].start), 1.0, 1e-3);
}

// The link at 0.1 GB/s, so that a 4 MiB chunk lasts 42 ms: the copy thread issues chunk i + 2 as chunk i lands
// (two in flight, Note [Chunks in flight]), and the chunks stay back to back unless it is late by a whole chunk
// (a host that late leaves the link idle, in the model as on a card; two suites on two cores once made a thread
// 4.5 ms late, when a chunk lasted 4 ms).
TEST(EmulatedWorker, AnUrgentUploadGoesAheadOfWeightChunksWaitingForTheirComputeAndTheDirectionsOverlap) {
  EmulatedWorker worker(profile(/*hostTraffic=*/false, /*link=*/1e8));
  std::vector<std::uint8_t> host(32u << 20, 1);
  const auto pin = worker.pinHost(host.data(), host.size(), "test");
  const auto slot = worker.allocate(16u << 20);
  const auto early = worker.mark();
  worker.expectCompute({50e9, 0});  // 50 ms
  const auto release = worker.mark();
  Ticket weights;
  worker.copyBulk(weights, slot.get(), host.data(), 12u << 20, release);  // 3 chunks of 4 MiB after the compute
  // An activation ready now (ordered after the compute before the 50 ms), issued after the chunks were queued.
  Ticket activation = worker.copyUrgentAfter(static_cast<std::uint8_t*>(slot.get()) + (12u << 20),
                                             host.data() + (12u << 20), 1'000'000, *early);
  Ticket gradient = worker.copyUrgent(host.data() + (20u << 20), nullptr, 1'000'000);
  weights.wait();
  activation.wait();
  gradient.wait();
  const auto spans = worker.takeDeviceSpans();
  const auto compute = ofKind(spans, DeviceSpan::Kind::kCompute);
  const auto up = ofKind(spans, DeviceSpan::Kind::kUpload);
  const auto down = ofKind(spans, DeviceSpan::Kind::kDownload);
  ASSERT_EQ(up.size(), 4u);
  ASSERT_EQ(down.size(), 1u);
  // The chunks: back to back from the release mark, each 4 MiB at 0.1 GB/s (the urgent copy: 1 MB, 10 ms).
  std::vector<DeviceSpan> chunks, urgent;
  for (const auto& s : up) (s.end - s.start > Clock::duration(std::chrono::milliseconds(20)) ? chunks : urgent).push_back(s);
  ASSERT_EQ(chunks.size(), 3u);
  ASSERT_EQ(urgent.size(), 1u);
  EXPECT_NEAR(ms(chunks[0].start - compute[0].end), 0.0, 1e-3);
  for (std::size_t i = 0; i < chunks.size(); ++i) EXPECT_NEAR(ms(chunks[i].end - chunks[i].start), 41.94304, 1e-3);
  for (std::size_t i = 1; i < chunks.size(); ++i) EXPECT_NEAR(ms(chunks[i].start - chunks[i - 1].end), 0.0, 1e-3);
  // The activation goes first: the chunks wait for their compute and do not hold the link meanwhile.
  EXPECT_LT(urgent[0].end, chunks[0].start + Clock::duration(std::chrono::microseconds(1)))
      << "the urgent upload waited behind weight chunks that were waiting for their compute";
  // The download uses the other direction: it overlaps the weights' upload.
  EXPECT_LT(down[0].start, chunks[0].end);
  EXPECT_NEAR(ms(down[0].start - compute[0].end), 0.0, 1e-3);
}

TEST(EmulatedWorker, ComputeAfterACopyWaitsOnTheDeviceNotOnTheHost) {
  EmulatedWorker worker(profile());
  // 200 MB lands 200 ms after it is issued; neither side is touched (no host traffic), so neither is written.
  constexpr std::size_t kBytes = 200'000'000;
  const std::unique_ptr<std::uint8_t[]> host(new std::uint8_t[kBytes]);
  const auto pin = worker.pinHost(host.get(), kBytes, "test");
  const auto slot = worker.allocate(kBytes);
  Ticket fetch = worker.copyUrgent(slot.get(), host.get(), kBytes);
  worker.computeAfter(fetch);
  worker.expectCompute({1e9, 0});  // 1 ms
  EXPECT_FALSE(fetch.done()) << "computeAfter made the host wait for the copy";
  const auto spans = worker.takeDeviceSpans();
  const auto up = ofKind(spans, DeviceSpan::Kind::kUpload);
  const auto compute = ofKind(spans, DeviceSpan::Kind::kCompute);
  ASSERT_EQ(up.size(), 1u);
  ASSERT_EQ(compute.size(), 1u);
  EXPECT_NEAR(ms(up[0].end - up[0].start), 200.0, 1e-3);
  EXPECT_NEAR(ms(compute[0].start - up[0].end), 0.0, 1e-3) << "the compute starts when the copy lands";
  fetch.wait();
}

TEST(EmulatedWorker, MemoryIsAccountedAgainstTheProfileNotAllocated) {
  EmulatedWorker worker(profile());
  const std::size_t before = worker.freeMemory();
  EXPECT_NEAR(static_cast<double>(before), 1e9, 1.0);
  {
    const auto a = worker.allocate(600'000'000);
    EXPECT_NEAR(static_cast<double>(worker.freeMemory()), 4e8, 1.0);
    EXPECT_THROW(worker.allocate(500'000'000), InputError) << "more than the card holds";
  }
  EXPECT_EQ(worker.freeMemory(), before) << "freed with its last holder";
  EXPECT_NE(worker.describe().find("emulated Test GPU"), std::string::npos);
  EXPECT_EQ(worker.placement().backend, Backend::kEmulated);
  EXPECT_THROW(worker.shareRing(2, 16), InputError);
  EXPECT_THROW(worker.linksId(), InputError);
}

// Note [Emulated compute memory]: the compute may hold what the card leaves beside the slots, or the cap.
TEST(EmulatedWorker, TheComputeHoldsWhatTheCardLeavesBesideTheSlotsOrTheCap) {
  EmulatedWorker worker(profile());  // 1 GB
  const auto slots = worker.allocate(400'000'000);
  EXPECT_TRUE(worker.holdCompute(500'000'000));
  EXPECT_FALSE(worker.holdCompute(200'000'000)) << "0.6 GB left beside the slots, 0.5 held";
  worker.releaseCompute(300'000'000);
  EXPECT_EQ(worker.takePeakComputeBytes(), 500'000'000u);
  EXPECT_EQ(worker.takePeakComputeBytes(), 200'000'000u) << "the peak starts again from what is held";
  worker.capComputeMemory(250'000'000);
  EXPECT_FALSE(worker.holdCompute(100'000'000)) << "past the cap";
  EXPECT_TRUE(worker.holdCompute(50'000'000));
}

TEST(EmulatedWorker, WithHostTrafficACopyReadsAndWritesTheHostMemoryADmaWould) {
  for (const bool traffic : {false, true}) {
    EmulatedWorker worker(profile(traffic));
    std::vector<std::uint8_t> host(1u << 20, 0xcd);
    const auto pin = worker.pinHost(host.data(), host.size(), "test");
    worker.copyUrgent(host.data(), nullptr, host.size()).wait();  // a download writes the whole range
    EXPECT_EQ(host.front(), traffic ? 0 : 0xcd);
    EXPECT_EQ(host.back(), traffic ? 0 : 0xcd);
  }
}

// Note [What a GPU host pays]: with pipeline.emulated_waits = "spin" a wait for the device costs the waiting
// thread a core for its length, as CUDA's events without cudaEventBlockingSync did; by default it sleeps.
TEST(EmulatedWorker, SpinningWaitsCostTheirThreadACoreAndBlockingOnesNothing) {
  for (const bool spin : {false, true}) {
    WorkerOptions o = profile();
    o.emulated.spinWaits = spin;
    EmulatedWorker worker(o);
    worker.expectCompute({10e9, 0});  // first: the marks below are the device's, not the host's "now"
    const auto from = worker.mark();
    worker.expectCompute({300e9, 0});  // 300 ms
    const auto to = worker.mark();
    const double cpu = threadCpuSeconds();
    EXPECT_NEAR(worker.elapsedMs(*from, *to), 300.0, 1e-3);
    const double spent = threadCpuSeconds() - cpu;
    // A spinning thread on a loaded machine gets part of a core: a sixth of the wait is asked for.
    if (spin) {
      EXPECT_GT(spent, 0.05) << "a spinning wait of 0.3 s spent " << spent << " s of CPU";
    } else {
      EXPECT_LT(spent, 0.02) << "a blocking wait of 0.3 s spent " << spent << " s of CPU";
    }
  }
}

// With pipeline.emulated_pinned = false host memory stays pageable, as where cudaHostRegister fails: its copies
// take the pageable rate, and the thread that issues a download into it waits until it landed and writes it.
TEST(EmulatedWorker, PageableCopiesTakeThePageableRateAndTheirIssuingThread) {
  WorkerOptions o = profile();
  o.emulated.pinned = false;  // pageable at 0.5 GB/s
  EmulatedWorker worker(o);
  std::vector<std::uint8_t> host(2'000'000, 0xab);
  const auto pin = worker.pinHost(host.data(), host.size(), "test");
  const auto device = worker.allocate(host.size());
  worker.copyUrgent(device.get(), host.data(), 1'000'000).wait();  // up: 2 ms at the pageable rate
  const auto start = Clock::now();
  Ticket down = worker.copyUrgent(host.data(), device.get(), 1'000'000);  // down: 2 ms, staged by this thread
  EXPECT_TRUE(down.done() || Clock::now() - start >= std::chrono::microseconds(1900))
      << "a download into pageable memory returned before it landed";
  down.wait();
  EXPECT_EQ(host.front(), 0) << "the staging wrote the download's destination";
  EXPECT_EQ(host[1'000'000], 0xab) << "and nothing past it";
  const auto spans = worker.takeDeviceSpans();
  const auto up = ofKind(spans, DeviceSpan::Kind::kUpload), dn = ofKind(spans, DeviceSpan::Kind::kDownload);
  ASSERT_EQ(up.size(), 1u);
  ASSERT_EQ(dn.size(), 1u);
  EXPECT_NEAR(ms(up[0].end - up[0].start), 2.0, 1e-3);
  EXPECT_NEAR(ms(dn[0].end - dn[0].start), 2.0, 1e-3);
  // Pinned, the same copies take the link's rate.
  EmulatedWorker pinned(profile());
  const auto pinnedPin = pinned.pinHost(host.data(), host.size(), "test");
  const auto pinnedDevice = pinned.allocate(host.size());
  pinned.copyUrgent(pinnedDevice.get(), host.data(), 1'000'000).wait();
  const auto pinnedUp = ofKind(pinned.takeDeviceSpans(), DeviceSpan::Kind::kUpload);
  ASSERT_EQ(pinnedUp.size(), 1u);
  EXPECT_NEAR(ms(pinnedUp[0].end - pinnedUp[0].start), 1.0, 1e-3);
}

}  // namespace
}  // namespace rp::device::emulated
