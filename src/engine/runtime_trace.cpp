// What a pipeline rank reports of its run: its Chrome trace, the device's own spans where it keeps a clock,
// and on rank 0 the merged trace, the bubble report and the memory report. Part of PipelineRuntime (runtime.h).
#include <cstring>
#include <filesystem>
#include <fstream>

#include "common/log.h"
#include "engine/runtime.h"
#include "trace/bubbles.h"
#include "trace/memory_report.h"

namespace rp::engine {

// Note [Emulated device]: the device's own spans (its model's), taken once an iteration's jobs are submitted
// (they may end later: the device runs behind the host), on the trace's device track and summed per kind.
void PipelineRuntime::recordDeviceSpans(std::int64_t step, StepSize& size) {
  const std::vector<device::DeviceSpan> spans = worker_->takeDeviceSpans();
  if (!worker_->modelsCompute()) return;
  double ms[3] = {0, 0, 0};
  static const char* const kNames[3] = {"emulated compute", "emulated upload", "emulated download"};
  static const char* const kCategories[3] = {"device", "device-link", "device-link"};
  for (const auto& span : spans) {
    const auto kind = static_cast<std::size_t>(span.kind);
    ms[kind] += std::chrono::duration<double, std::milli>(span.end - span.start).count();
    const std::int64_t start = timeline_->usAt(span.start);
    timeline_->record({kNames[kind], kCategories[kind], 3, start, timeline_->usAt(span.end) - start, -1.0});
  }
  size.deviceBusyMs = ms[static_cast<std::size_t>(device::DeviceSpan::Kind::kCompute)];
  size.linkUpMs = ms[static_cast<std::size_t>(device::DeviceSpan::Kind::kUpload)];
  size.linkDownMs = ms[static_cast<std::size_t>(device::DeviceSpan::Kind::kDownload)];
  // Every rank's, for the device bound: the busiest worker's (benchmarks/emulated_gpu.sh).
  timeline_->count({"device ms",
                    timeline_->nowUs(),
                    {{"step", static_cast<double>(step + 1)},
                     {"busy", *size.deviceBusyMs},
                     {"up", *size.linkUpMs},
                     {"down", *size.linkDownMs}}});
}

void PipelineRuntime::finishTrace() {
  const std::filesystem::path out(config_.output.dir);
  const std::filesystem::path dir = out / "trace";
  std::filesystem::create_directories(dir);
  const std::string mine = (dir / fmt::format("rank{}.json", worldRank_)).string();
  std::ofstream(mine) << timeline_->toJson() << '\n';
  // Busy by the device's own clock where it keeps one (the emulated device), else the host's compute spans.
  const trace::WorkerActivity a = worker_->modelsCompute() ? trace::activityOf(timeline_->spans(), 3, "device")
                                                           : trace::activityOf(timeline_->spans(), 0);
  const ResidentMemory m = trainingMemory_.value_or(readResidentMemory());
  std::int64_t local[11] = {a.busyUs,
                            a.firstUs,
                            a.lastUs,
                            m.peakBytes,
                            m.sharedBytes,
                            m.fileBytes,
                            m.anonBytes,
                            static_cast<std::int64_t>(2 * jobs_->slots().slotBytes()),
                            static_cast<std::int64_t>(optimizer_->stateBytes()),
                            static_cast<std::int64_t>(jobs_->deviceJobPeak()),
                            static_cast<std::int64_t>(jobs_->uploadedBytes())};
  const auto parts = channel_->gather(local, sizeof(local), 0);
  if (!leader_) return;  // node 0 reports; its workers are world ranks 0..N-1
  std::vector<trace::WorkerActivity> workers;
  std::vector<trace::RankMemory> memory;
  std::vector<std::string> files;
  for (int r = 0; r < workers_; ++r) {
    std::int64_t theirs[11];
    std::memcpy(theirs, parts[static_cast<std::size_t>(r)].data(), sizeof(theirs));
    workers.push_back({theirs[0], theirs[1], theirs[2]});
    trace::RankMemory rm;
    rm.rank = r;
    rm.resident.peakBytes = theirs[3];
    rm.resident.sharedBytes = theirs[4];
    rm.resident.fileBytes = theirs[5];
    rm.resident.anonBytes = theirs[6];
    rm.slotBytes = theirs[7];
    rm.optimizerBytes = theirs[8];
    rm.deviceJobPeakBytes = theirs[9];
    rm.uploadedBytes = theirs[10];
    memory.push_back(rm);
    files.push_back((dir / fmt::format("rank{}.json", r)).string());
  }
  const std::string merged = (out / "trace.json").string();
  trace::mergeTraces(files, merged);
  const auto storeBytes = static_cast<std::int64_t>(store_->layout().total());
  const trace::BubbleReport bubbles = trace::bubbleReport(workers);
  bubbleRatio_ = bubbles.bubbleRatio();
  RP_LOG_INFO("bubble report ({} workers; timeline in {}):\n{}", workers_, merged, bubbles.table());
  RP_LOG_INFO("memory report (node 0; {}):\n{}", (out / "memory.json").string(),
              trace::memoryTable(memory, storeBytes));
  trace::writeMemoryReport((out / "memory.json").string(), memory, storeBytes, deviceLabel_);
}

}  // namespace rp::engine
