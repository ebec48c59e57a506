#include "coordinator/directive.h"

#include <string>

#include "common/error.h"
#include "control/channel.h"

namespace rp::coordinator {
namespace {

// Layout: version, step, planChanged, stop, #forward, (begin, end)*, fused begin, fused end, #backward,
// (begin, end)*, counterEnd, #jobs, (kind, stage, begin, end, worker)*.
void put(std::vector<std::int64_t>& out, const schedule::Range& r) {
  out.push_back(r.begin);
  out.push_back(r.end);
}

class Reader {
 public:
  Reader(const std::vector<std::int64_t>& words, int fromRank) : words_(words), from_(fromRank) {}
  std::int64_t next(const char* what) {
    if (at_ >= words_.size()) {
      RP_THROW(control::PeerError, "directive from rank {} is truncated at word {} ({})", from_, at_, what);
    }
    return words_[at_++];
  }
  // A count or index in [lo, hi].
  int bounded(const char* what, std::int64_t lo, std::int64_t hi) {
    const std::int64_t v = next(what);
    if (v < lo || v > hi) {
      RP_THROW(control::PeerError, "directive from rank {}: {} = {} is outside [{}, {}]", from_, what, v, lo, hi);
    }
    return static_cast<int>(v);
  }
  schedule::Range range(int layers) {
    const int begin = bounded("layer", 0, layers);
    return {begin, bounded("layer", 0, layers)};
  }
  void finish() const {
    if (at_ != words_.size()) {
      RP_THROW(control::PeerError, "directive from rank {} has {} words after its end", from_, words_.size() - at_);
    }
  }

 private:
  const std::vector<std::int64_t>& words_;
  int from_;
  std::size_t at_ = 0;
};

}  // namespace

std::vector<std::int64_t> encode(const Directive& d) {
  std::vector<std::int64_t> out{kDirectiveVersion, d.step, d.planChanged ? 1 : 0, d.stop ? 1 : 0};
  out.push_back(static_cast<std::int64_t>(d.plan.forward.size()));
  for (const auto& r : d.plan.forward) put(out, r);
  put(out, d.plan.fused);
  out.push_back(static_cast<std::int64_t>(d.plan.backward.size()));
  for (const auto& r : d.plan.backward) put(out, r);
  out.push_back(d.table.counterEnd);
  out.push_back(static_cast<std::int64_t>(d.table.jobs.size()));
  for (const auto& j : d.table.jobs) {
    out.push_back(static_cast<std::int64_t>(j.kind));
    out.push_back(j.stage);
    put(out, j.layers);
    out.push_back(j.worker);
  }
  return out;
}

Directive decode(const std::vector<std::int64_t>& words, int layerCount, int workers, int fromRank) {
  Reader in(words, fromRank);
  const std::int64_t version = in.next("version");
  if (version != kDirectiveVersion) {
    RP_THROW(control::PeerError,
             "directive from rank {} has version {}, this binary speaks version {}: every rank must run the same "
             "roundpipe build",
             fromRank, version, kDirectiveVersion);
  }
  Directive d;
  d.step = in.next("step");
  d.planChanged = in.bounded("plan_changed", 0, 1) == 1;
  d.stop = in.bounded("stop", 0, 1) == 1;
  for (int n = in.bounded("forward stages", 0, layerCount), i = 0; i < n; ++i)
    d.plan.forward.push_back(in.range(layerCount));
  d.plan.fused = in.range(layerCount);
  for (int n = in.bounded("backward stages", 0, layerCount), i = 0; i < n; ++i)
    d.plan.backward.push_back(in.range(layerCount));
  d.table.counterEnd = in.next("counter");
  const int jobs = in.bounded("jobs", 1, 2 * layerCount + 1);
  for (int i = 0; i < jobs; ++i) {
    schedule::Job j{};
    j.kind = static_cast<schedule::JobKind>(in.bounded("job kind", 0, 2));
    j.stage = in.bounded("job stage", 0, layerCount);
    j.layers = in.range(layerCount);
    j.worker = in.bounded("job worker", 0, workers - 1);
    d.table.jobs.push_back(j);
  }
  in.finish();
  try {
    schedule::validate(d.plan, layerCount, "directive");
  } catch (const InputError& e) {
    RP_THROW(control::PeerError, "directive from rank {} carries an invalid plan: {}", fromRank, e.what());
  }
  return d;
}

}  // namespace rp::coordinator
