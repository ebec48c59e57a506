#include "schedule/sim.h"

#include <algorithm>
#include <numeric>

#include <fmt/format.h>

#include "common/error.h"
#include "schedule/dispatch.h"
#include "schedule/earliest_finish.h"

namespace rp::schedule {
namespace {

struct Builder {
  std::vector<SimOp> ops;
  std::vector<int> dep;                 // the op that must finish (or, depStart, start) first (-1 = none)
  std::vector<bool> depStart;           // a recompute ahead: its saved input exists once the fused op started
  std::vector<std::vector<int>> order;  // per worker, op indices in execution order
  std::vector<double> duration;
  std::vector<int> warmup;  // per worker: forwards before the forward->backward switch (-1 = none)

  int add(int worker, int mb, int stage, bool backward, double time, int after, std::string label,
          bool afterStart = false) {
    ops.push_back({worker, mb, stage, backward, 0, 0, std::move(label)});
    dep.push_back(after);
    depStart.push_back(afterStart);
    duration.push_back(time);
    order[static_cast<std::size_t>(worker)].push_back(static_cast<int>(ops.size()) - 1);
    return static_cast<int>(ops.size()) - 1;
  }
};

double sum(const std::vector<double>& v, int a, int b) {
  double s = 0;
  for (int l = a; l < b; ++l) s += v[static_cast<std::size_t>(l)];
  return s;
}

// RoundPipe: each round is one runtime iteration's dispatch (the counter continues across rounds). A backward
// job with recompute ahead R runs, in the runtime's order, the recompute of microbatches 0..R-1, then for each
// m the backward of m followed by the recompute of m+R (Note [Recompute ahead], src/engine/job_executor.cpp).
void buildRoundPipe(const SimSetup& s, const SimCosts& c, Builder& b) {
  validate(s.plan, c.layerCount(), "simulator plan");
  if (s.recomputeAhead < 0) RP_THROW(InputError, "simulator: recompute ahead {} is negative", s.recomputeAhead);
  const auto M = static_cast<std::size_t>(s.microbatches);
  std::int64_t counter = 0;
  const LayerCosts layers = partitionerCosts(c);
  DispatchCosts known{layers.forward, layers.backward, {}, s.microbatches};
  for (int w = 0; w < s.workers; ++w) known.speed.push_back(s.speedOf(w));
  WorkerClocks clocks;
  for (int round = 0; round < s.rounds; ++round) {
    const DispatchTable table = s.dispatch == DispatchRule::kEarliestFinish
                                    ? dispatchEarliestFinish(s.plan, known, counter, clocks)
                                    : dispatch(s.plan, s.workers, counter);
    counter = table.counterEnd;
    std::vector<int> previous(M, -1), fused(M, -1);
    for (std::size_t k = 0; k < table.jobs.size(); ++k) {
      const Job& job = table.jobs[k];
      const int a = job.layers.begin, e = job.layers.end;
      // Forward: the layers' forward. Fused: forward, the head's loss, backward. Backward: recompute + backward.
      // All at this worker's speed.
      const double speed = s.speedOf(job.worker);
      const double recompute = job.kind == JobKind::kForward ? 0.0 : sum(c.forward, a, e) / speed;
      const double backward = job.kind == JobKind::kForward ? 0.0 : sum(c.backward, a, e) / speed;
      const double compute = job.kind == JobKind::kForward ? sum(c.forward, a, e) / speed : recompute + backward;
      const double transfer = c.weightTransfer.empty()
                                  ? 0.0
                                  : sum(c.weightTransfer, a, e) *
                                        (job.kind == JobKind::kForward || !c.weightGradients ? 1.0 : 2.0) /
                                        static_cast<double>(s.microbatches);
      const double time = std::max(compute, transfer);
      const char* kind = job.kind == JobKind::kForward ? "F" : job.kind == JobKind::kFused ? "T" : "B";
      auto mbOf = [&](std::size_t m) { return round * s.microbatches + static_cast<int>(m); };
      if (job.kind != JobKind::kBackward || s.recomputeAhead == 0) {
        for (std::size_t m = 0; m < M; ++m) {
          previous[m] = b.add(job.worker, mbOf(m), static_cast<int>(k), job.kind != JobKind::kForward, time,
                              previous[m], fmt::format("{}{} mb{}", kind, job.stage, mbOf(m)));
          if (job.kind == JobKind::kFused) fused[m] = previous[m];
        }
        continue;
      }
      // A transfer-bound job stretches both parts alike.
      const double stretch = compute > 0 ? time / compute : 1.0;
      const double recomputeTime = recompute * stretch, backwardTime = compute > 0 ? backward * stretch : time;
      auto addRecompute = [&](std::size_t m) {
        b.add(job.worker, mbOf(m), static_cast<int>(k), true, recomputeTime, fused[m],
              fmt::format("R{} mb{}", job.stage, mbOf(m)), /*afterStart=*/true);
      };
      const auto ahead = static_cast<std::size_t>(s.recomputeAhead);
      for (std::size_t m = 0; m < std::min(ahead, M); ++m) addRecompute(m);
      for (std::size_t m = 0; m < M; ++m) {
        previous[m] = b.add(job.worker, mbOf(m), static_cast<int>(k), true, backwardTime, previous[m],
                            fmt::format("{}{} mb{}", kind, job.stage, mbOf(m)));
        if (m + ahead < M) addRecompute(m + ahead);
      }
    }
  }
}

// Baselines: stage s of `stages` holds stageLayers[s] decoder layers (the embedding joins stage 0, the head the
// last stage) and runs on worker s mod workers. `order(w)` lists worker w's operations as (stage, mb, backward).
struct BoundOp {
  int stage, mb;
  bool backward;
};

void buildBound(const SimSetup& s, const SimCosts& c, Builder& b, const std::vector<std::vector<BoundOp>>& orders,
                const std::vector<int>& warmup) {
  const int stages = static_cast<int>(s.stageLayers.size());
  std::vector<int> begin(static_cast<std::size_t>(stages) + 1, 1);
  for (int st = 0; st < stages; ++st)
    begin[static_cast<std::size_t>(st) + 1] =
        begin[static_cast<std::size_t>(st)] + s.stageLayers[static_cast<std::size_t>(st)];
  if (begin.back() != c.layerCount() - 1) {
    RP_THROW(InputError, "simulator: the stages hold {} decoder layers, the model has {}", begin.back() - 1,
             c.layerCount() - 2);
  }
  begin.front() = 0;
  begin.back() = c.layerCount();
  auto range = [&](int st) {
    return std::pair{begin[static_cast<std::size_t>(st)], begin[static_cast<std::size_t>(st) + 1]};
  };
  const auto microbatches = static_cast<std::size_t>(s.microbatches * s.rounds);
  std::vector<std::vector<int>> fwd(static_cast<std::size_t>(stages), std::vector<int>(microbatches, -1));
  auto bwd = fwd;
  // Two passes: create the operations in worker order, then fill in their dependencies.
  for (std::size_t w = 0; w < orders.size(); ++w) {
    for (const BoundOp& op : orders[w]) {
      const auto [a, e] = range(op.stage);
      const double time = (op.backward ? sum(c.backward, a, e) + (s.recomputeBaselines ? sum(c.forward, a, e) : 0.0)
                                       : sum(c.forward, a, e)) /
                          s.speedOf(static_cast<int>(w));
      const int id = b.add(static_cast<int>(w), op.mb, op.stage, op.backward, time, -1,
                           fmt::format("{}{} mb{}", op.backward ? "B" : "F", op.stage, op.mb));
      (op.backward ? bwd : fwd)[static_cast<std::size_t>(op.stage)][static_cast<std::size_t>(op.mb)] = id;
    }
  }
  for (std::size_t i = 0; i < b.ops.size(); ++i) {
    const SimOp& op = b.ops[i];
    const auto st = static_cast<std::size_t>(op.stage), mb = static_cast<std::size_t>(op.microbatch);
    if (!op.backward) {
      b.dep[i] = op.stage == 0 ? -1 : fwd[st - 1][mb];
    } else {
      b.dep[i] = op.stage == stages - 1 ? fwd[st][mb] : bwd[st + 1][mb];
    }
  }
  b.warmup = warmup;
}

std::vector<std::vector<BoundOp>> gpipeOrder(int p, int m) {
  std::vector<std::vector<BoundOp>> out(static_cast<std::size_t>(p));
  for (int w = 0; w < p; ++w) {
    for (int k = 0; k < m; ++k) out[static_cast<std::size_t>(w)].push_back({w, k, false});
    for (int k = 0; k < m; ++k) out[static_cast<std::size_t>(w)].push_back({w, k, true});
  }
  return out;
}

std::vector<std::vector<BoundOp>> oneFOneBOrder(int p, int m, std::vector<int>& warmup) {
  std::vector<std::vector<BoundOp>> out(static_cast<std::size_t>(p));
  for (int w = 0; w < p; ++w) {
    const int warm = std::min(p - 1 - w, m);
    warmup.push_back(warm);
    auto& o = out[static_cast<std::size_t>(w)];
    int f = 0, bk = 0;
    for (; f < warm; ++f) o.push_back({w, f, false});
    while (f < m) {
      o.push_back({w, f++, false});
      o.push_back({w, bk++, true});
    }
    while (bk < m) o.push_back({w, bk++, true});
  }
  return out;
}

// Megatron's interleaved 1F1B (virtual pipeline stages): chunk c of worker w is stage c·p + w; the k-th
// forward of a worker is microbatch (k / (p·v))·p + k % p of chunk (k / p) % v, backwards take the chunks
// in reverse; (p − w − 1)·2 + (v − 1)·p warm-up forwards, then one forward and one backward alternately.
std::vector<std::vector<BoundOp>> interleavedOrder(int p, int v, int m, std::vector<int>& warmup) {
  std::vector<std::vector<BoundOp>> out(static_cast<std::size_t>(p));
  const int total = m * v;
  for (int w = 0; w < p; ++w) {
    auto op = [&](int k, bool backward) {
      const int chunk = backward ? v - 1 - (k / p) % v : (k / p) % v;
      return BoundOp{chunk * p + w, (k / (p * v)) * p + k % p, backward};
    };
    const int warm = std::min(total, (p - w - 1) * 2 + (v - 1) * p);
    warmup.push_back(warm);
    auto& o = out[static_cast<std::size_t>(w)];
    int f = 0, bk = 0;
    for (; f < warm; ++f) o.push_back(op(f, false));
    while (f < total) {
      o.push_back(op(f++, false));
      o.push_back(op(bk++, true));
    }
    while (bk < total) o.push_back(op(bk++, true));
  }
  return out;
}

}  // namespace

SimSchedule parseSimSchedule(const std::string& name, const std::string& what) {
  if (name == "gpipe") return SimSchedule::kGpipe;
  if (name == "1f1b") return SimSchedule::kOneFOneB;
  if (name == "interleaved-1f1b") return SimSchedule::kInterleaved;
  if (name == "roundpipe") return SimSchedule::kRoundPipe;
  RP_THROW(InputError, "{} = \"{}\": expected gpipe, 1f1b, interleaved-1f1b or roundpipe", what, name);
}

const char* simScheduleName(SimSchedule s) {
  switch (s) {
    case SimSchedule::kGpipe:
      return "gpipe";
    case SimSchedule::kOneFOneB:
      return "1f1b";
    case SimSchedule::kInterleaved:
      return "interleaved-1f1b";
    case SimSchedule::kRoundPipe:
      return "roundpipe";
  }
  return "?";
}

LayerCosts partitionerCosts(const SimCosts& c) {
  LayerCosts out;
  for (int l = 0; l < c.layerCount(); ++l) {
    out.forward.push_back(c.forward[static_cast<std::size_t>(l)]);
    out.backward.push_back(c.forward[static_cast<std::size_t>(l)] + c.backward[static_cast<std::size_t>(l)]);
    out.bytes.push_back(1.0);
    out.backwardBytes.push_back(1.0);
  }
  return out;
}

SimCosts uniformCosts(int decoderLayers, double fwd, double bwd, double headFwd, double headBwd, double hop) {
  SimCosts c;
  c.forward.push_back(0.0);
  c.backward.push_back(0.0);
  for (int l = 0; l < decoderLayers; ++l) {
    c.forward.push_back(fwd);
    c.backward.push_back(bwd);
  }
  c.forward.push_back(headFwd);
  c.backward.push_back(headBwd);
  c.hop = hop;
  return c;
}

double SimResult::idle() const {
  double busy = 0;
  for (const auto& w : workers) busy += w.busy;
  return makespan * static_cast<double>(workers.size()) - busy;
}

double SimResult::bubbleRatio() const {
  return makespan > 0 ? idle() / (makespan * static_cast<double>(workers.size())) : 0.0;
}

SimResult simulate(const SimSetup& s, const SimCosts& c) {
  if (s.workers < 1 || s.microbatches < 1 || s.rounds < 1) {
    RP_THROW(InputError, "simulator: workers ({}), microbatches ({}) and rounds ({}) must be >= 1", s.workers,
             s.microbatches, s.rounds);
  }
  if (!s.workerSpeed.empty()) {
    if (static_cast<int>(s.workerSpeed.size()) != s.workers) {
      RP_THROW(InputError, "simulator: {} worker speeds (--worker-speeds) for {} workers: one per worker, or none",
               s.workerSpeed.size(), s.workers);
    }
    for (std::size_t w = 0; w < s.workerSpeed.size(); ++w) {
      if (!(s.workerSpeed[w] > 0 && s.workerSpeed[w] < 1e6)) {
        RP_THROW(InputError, "simulator: worker {}'s speed is {}; expected a positive factor (1 = nominal)", w,
                 s.workerSpeed[w]);
      }
    }
  }
  if (c.forward.size() != c.backward.size() || c.layerCount() < 2) {
    RP_THROW(InputError, "simulator: {} forward and {} backward layer costs (need equal counts, >= 2)",
             c.forward.size(), c.backward.size());
  }
  Builder b;
  b.order.resize(static_cast<std::size_t>(s.workers));
  const int p = s.workers;
  if (s.schedule == SimSchedule::kRoundPipe) {
    buildRoundPipe(s, c, b);
  } else {
    const int v = s.schedule == SimSchedule::kInterleaved ? s.virtualStages : 1;
    if (static_cast<int>(s.stageLayers.size()) != p * v) {
      RP_THROW(InputError, "simulator: {} needs {} stages ({} workers x {} chunks), got {}",
               simScheduleName(s.schedule), p * v, p, v, s.stageLayers.size());
    }
    const int m = s.microbatches * s.rounds;
    std::vector<int> warmup;
    if (s.schedule == SimSchedule::kGpipe) {
      warmup.assign(static_cast<std::size_t>(p), m);
      buildBound(s, c, b, gpipeOrder(p, m), warmup);
    } else if (s.schedule == SimSchedule::kOneFOneB) {
      buildBound(s, c, b, oneFOneBOrder(p, m, warmup), warmup);
    } else {
      if (m % p != 0) {
        RP_THROW(InputError, "simulator: interleaved-1f1b needs microbatches ({}) to be a multiple of workers ({})", m,
                 p);
      }
      buildBound(s, c, b, interleavedOrder(p, v, m, warmup), warmup);
    }
  }

  // Each worker runs its operations in order, each as soon as its dependency (plus a hop) and the worker allow.
  SimResult r;
  std::vector<double> free(static_cast<std::size_t>(p), 0.0);
  std::vector<std::size_t> next(static_cast<std::size_t>(p), 0);
  std::vector<bool> done(b.ops.size(), false);
  std::size_t finished = 0;
  while (finished < b.ops.size()) {
    bool progress = false;
    for (int w = 0; w < p; ++w) {
      auto& list = b.order[static_cast<std::size_t>(w)];
      auto& at = next[static_cast<std::size_t>(w)];
      while (at < list.size()) {
        const auto i = static_cast<std::size_t>(list[at]);
        const int d = b.dep[i];
        if (d >= 0 && !done[static_cast<std::size_t>(d)]) break;
        double ready = 0.0;
        if (d >= 0 && b.depStart[i]) {
          ready = b.ops[static_cast<std::size_t>(d)].start;  // a saved input: no hop on the critical path
        } else if (d >= 0) {
          const SimOp& before = b.ops[static_cast<std::size_t>(d)];
          const bool hop = before.worker != w;
          ready = before.end + (hop ? c.hop : 0.0);
          if (hop) {
            r.commTotal += c.hop;
            // Idle spent only on the transfer: after both the worker and the predecessor were done.
            r.commExposed += std::max(0.0, ready - std::max(free[static_cast<std::size_t>(w)], before.end));
          }
        }
        SimOp& op = b.ops[i];
        op.start = std::max(free[static_cast<std::size_t>(w)], ready);
        op.end = op.start + b.duration[i];
        free[static_cast<std::size_t>(w)] = op.end;
        done[i] = true;
        ++finished;
        ++at;
        progress = true;
      }
    }
    RP_CHECK(progress, "simulator deadlock: {} of {} operations ran", finished, b.ops.size());
  }
  for (const auto& op : b.ops) r.makespan = std::max(r.makespan, op.end);
  r.workers.resize(static_cast<std::size_t>(p));
  for (int w = 0; w < p; ++w) {
    WorkerStats& st = r.workers[static_cast<std::size_t>(w)];
    const auto& list = b.order[static_cast<std::size_t>(w)];
    if (list.empty()) {
      st.drain = r.makespan;
      continue;
    }
    st.fill = b.ops[static_cast<std::size_t>(list.front())].start;
    st.drain = r.makespan - b.ops[static_cast<std::size_t>(list.back())].end;
    double gaps = 0;
    for (std::size_t k = 0; k < list.size(); ++k) {
      const SimOp& op = b.ops[static_cast<std::size_t>(list[k])];
      st.busy += op.end - op.start;
      if (k > 0) gaps += op.start - b.ops[static_cast<std::size_t>(list[k - 1])].end;
    }
    // Switch: the gaps between the last warm-up forward and the first backward (schedules that have one);
    // RoundPipe: the gap wherever a forward job's operation is followed by a backward or fused job's (once a
    // round on each worker).
    const int warm = b.warmup.empty() ? -1 : b.warmup[static_cast<std::size_t>(w)];
    if (s.schedule == SimSchedule::kRoundPipe) {
      for (std::size_t k = 1; k < list.size(); ++k) {
        const SimOp& before = b.ops[static_cast<std::size_t>(list[k - 1])];
        const SimOp& op = b.ops[static_cast<std::size_t>(list[k])];
        if (!before.backward && op.backward) st.switchIdle += op.start - before.end;
      }
    } else if (warm > 0) {
      std::size_t firstBackward = 0;
      while (firstBackward < list.size() && !b.ops[static_cast<std::size_t>(list[firstBackward])].backward)
        ++firstBackward;
      for (std::size_t k = static_cast<std::size_t>(warm); k <= firstBackward && k < list.size(); ++k) {
        st.switchIdle +=
            b.ops[static_cast<std::size_t>(list[k])].start - b.ops[static_cast<std::size_t>(list[k - 1])].end;
      }
    }
    st.intra = gaps - st.switchIdle;
  }
  r.ops = std::move(b.ops);
  return r;
}

}  // namespace rp::schedule
