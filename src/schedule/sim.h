// A discrete-event simulator of pipeline schedules (docs/simulator.md), torch-free. RoundPipe jobs come from
// the runtime's own planner and dispatch rules (schedule::dispatch, dispatchEarliestFinish), the baselines
// from their textbook orders; every operation runs one stage for one microbatch on one worker, in each
// worker's fixed order, as soon as its predecessor stage of the same microbatch is done (plus one hop of
// transfer time when that ran on another worker) and the worker is free. With recompute ahead (RoundPipe), a
// backward job's microbatch is two operations: its recompute, which may start once the fused stage has
// started that microbatch (its saved input exists), and its backward, which waits for the predecessor as any
// operation does.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "schedule/dispatch.h"
#include "schedule/partitioner.h"
#include "schedule/plan.h"

namespace rp::schedule {

enum class SimSchedule { kGpipe, kOneFOneB, kInterleaved, kRoundPipe };
SimSchedule parseSimSchedule(const std::string& name, const std::string& what);
const char* simScheduleName(SimSchedule schedule);

// Time per microbatch of every layer (plan index space: 0 = embedding, 1..n decoder layers, L-1 = head with
// the loss), and the transfer time of one activation hop between workers.
struct SimCosts {
  std::vector<double> forward;
  std::vector<double> backward;  // the backward pass alone (RoundPipe's backward stages add a recompute)
  double hop = 0.0;
  // RoundPipe only, optional: the time to upload a layer's weights to a worker (its gradients download in
  // the same time). A job's per-microbatch time is at least its transfers spread over the round's
  // microbatches (transfers overlap compute: one-stage prefetch); empty = transfers are free.
  std::vector<double> weightTransfer;
  // Whether backward and fused jobs download weight gradients (as many bytes as they upload); false for LoRA,
  // whose frozen base has none (the adapters' are negligible).
  bool weightGradients = true;
  int layerCount() const { return static_cast<int>(forward.size()); }
};

// The partitioner's (and earliest-finish dispatch's) view of the costs: backward jobs recompute, so their time
// per layer is forward + backward; one byte per layer (no memory limit).
LayerCosts partitionerCosts(const SimCosts& costs);

// Uniform costs: n decoder layers of (fwd, bwd), the head's (fwd, bwd), a free embedding.
SimCosts uniformCosts(int decoderLayers, double fwd, double bwd, double headFwd, double headBwd, double hop);

struct SimSetup {
  SimSchedule schedule = SimSchedule::kRoundPipe;
  int workers = 1;
  int microbatches = 1;             // per round (RoundPipe: at most `workers`... any count; baselines: per step)
  int rounds = 1;                   // RoundPipe: rounds per step (each dispatched like one runtime iteration)
  Plan plan;                        // RoundPipe: forward stages, fused stage, backward stages
  std::vector<int> stageLayers;     // baselines: decoder layers per stage (embedding to the first, head to the last)
  int virtualStages = 1;            // interleaved 1F1B: model chunks per worker
  bool recomputeBaselines = false;  // baselines checkpoint activations too: each backward adds a forward
  int recomputeAhead = 0;           // RoundPipe: backward microbatches recomputed before their gradient arrives
  // RoundPipe: which worker runs each job (earliest finish knows the costs and every worker's speed exactly).
  DispatchRule dispatch = DispatchRule::kRoundRobin;
  // Per worker, its compute speed against the costs (0.6: a card at 60%, every compute takes 1/0.6 as long;
  // transfers are not slowed); empty = every worker at 1.
  std::vector<double> workerSpeed;
  double speedOf(int worker) const { return workerSpeed.empty() ? 1.0 : workerSpeed[static_cast<std::size_t>(worker)]; }
};

struct SimOp {
  int worker;
  int microbatch;
  int stage;      // RoundPipe: job index within its round; baselines: pipeline stage (chunk) index
  bool backward;  // a backward (or fused) operation, or a backward job's recompute
  double start, end;
  std::string label;
};

// Idle time of one worker: before its first operation (fill), at the switch from forward to backward work
// (baselines: after the warm-up forwards; RoundPipe: between a round's last forward job and first backward or
// fused job), after its last (drain), and the rest between operations (intra).
struct WorkerStats {
  double busy = 0, fill = 0, switchIdle = 0, drain = 0, intra = 0;
};

struct SimResult {
  double makespan = 0;
  std::vector<SimOp> ops;
  std::vector<WorkerStats> workers;
  double commTotal = 0;    // hops x hop time
  double commExposed = 0;  // idle time spent only waiting for a transfer
  double idle() const;
  double bubbleRatio() const;  // idle / (makespan x workers)
};

// Throws InputError naming the field when the setup is inconsistent (e.g. interleaving with microbatches
// not a multiple of the workers).
SimResult simulate(const SimSetup& setup, const SimCosts& costs);

// Text table, JSON and an SVG Gantt chart of a result.
std::string simTable(const SimSetup& setup, const SimResult& result);
std::string simJson(const SimSetup& setup, const SimResult& result);
std::string simSvg(const SimSetup& setup, const SimResult& result);

}  // namespace rp::schedule
