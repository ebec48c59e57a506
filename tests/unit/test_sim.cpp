// The schedule simulator on cases computed by hand (docs/simulator.md).
#include <fstream>

#include <gtest/gtest.h>

#include "common/error.h"
#include "schedule/partitioner.h"
#include "schedule/plan.h"
#include "schedule/plan_search.h"
#include "schedule/projection.h"
#include "schedule/sim.h"
#include "schedule/trace_replay.h"
#include "support/fixtures.h"

namespace rp::schedule {
namespace {

SimSetup bound(SimSchedule schedule, int p, int m, std::vector<int> stages, int v = 1) {
  SimSetup s;
  s.schedule = schedule;
  s.workers = p;
  s.microbatches = m;
  s.stageLayers = std::move(stages);
  s.virtualStages = v;
  return s;
}

SimSetup roundPipe(int workers, int microbatches, int rounds, Plan plan) {
  SimSetup s;
  s.schedule = SimSchedule::kRoundPipe;
  s.workers = workers;
  s.microbatches = microbatches;
  s.rounds = rounds;
  s.plan = std::move(plan);
  return s;
}

// GPipe with equal stages: every worker idles (p-1)(tf+tb): fill w·tf, switch (p-1-w)(tf+tb), drain w·tb,
// bubble = (p-1)/(m+p-1).
TEST(Simulator, GpipeWithEqualStagesHasTheTextbookBubble) {
  const int p = 4, m = 8;
  const double tf = 2, tb = 4;  // two layers of (1, 2) per stage
  const SimResult r = simulate(bound(SimSchedule::kGpipe, p, m, {2, 2, 2, 2}), uniformCosts(8, 1, 2, 0, 0, 0));
  EXPECT_DOUBLE_EQ(r.makespan, (m + p - 1) * (tf + tb));
  EXPECT_NEAR(r.bubbleRatio(), double(p - 1) / (m + p - 1), 1e-12);
  for (int w = 0; w < p; ++w) {
    const auto& x = r.workers[static_cast<std::size_t>(w)];
    EXPECT_DOUBLE_EQ(x.busy, m * (tf + tb));
    EXPECT_DOUBLE_EQ(x.fill, w * tf) << w;
    EXPECT_DOUBLE_EQ(x.switchIdle, (p - 1 - w) * (tf + tb)) << w;
    EXPECT_DOUBLE_EQ(x.drain, w * tb) << w;
    EXPECT_DOUBLE_EQ(x.intra, 0.0) << w;
  }
  EXPECT_DOUBLE_EQ(r.commTotal, 0.0);
}

TEST(Simulator, OneFOneBHasGpipesBubbleWithLessInFlight) {
  const int p = 4, m = 8;
  const SimResult r = simulate(bound(SimSchedule::kOneFOneB, p, m, {2, 2, 2, 2}), uniformCosts(8, 1, 2, 0, 0, 0));
  EXPECT_DOUBLE_EQ(r.makespan, (m + p - 1) * 6.0);
  EXPECT_NEAR(r.bubbleRatio(), double(p - 1) / (m + p - 1), 1e-12);
  // Worker 0 starts its first backward after 3 warm-up forwards and one more: (p-1) + 1 forwards.
  int forwardsBefore = 0;
  for (const auto& op : r.ops) {
    if (op.worker == 0 && !op.backward && op.start < 2 * (p - 1) * 2.0 + 1) ++forwardsBefore;
  }
  EXPECT_EQ(forwardsBefore, p);
}

TEST(Simulator, InterleavingShrinksTheBubble) {
  const int p = 4, m = 8;
  const SimResult flat = simulate(bound(SimSchedule::kOneFOneB, p, m, {4, 4, 4, 4}), uniformCosts(16, 1, 2, 0, 0, 0));
  const SimResult inter =
      simulate(bound(SimSchedule::kInterleaved, p, m, std::vector<int>(8, 2), 2), uniformCosts(16, 1, 2, 0, 0, 0));
  EXPECT_LT(inter.bubbleRatio(), flat.bubbleRatio());
  EXPECT_DOUBLE_EQ(inter.workers[0].busy, flat.workers[0].busy);
  // Megatron's bound with v chunks: (p-1)/(v·m + p-1) of the time is bubble when tf and tb scale alike.
  EXPECT_NEAR(inter.bubbleRatio(), double(p - 1) / (2 * m + p - 1), 1e-12);
  EXPECT_THROW(
      simulate(bound(SimSchedule::kInterleaved, p, 6, std::vector<int>(8, 2), 2), uniformCosts(16, 1, 2, 0, 0, 0)),
      InputError);
}

TEST(Simulator, BaselinesCanRecomputeLikeRoundPipe) {
  SimSetup s = bound(SimSchedule::kGpipe, 2, 2, {1, 1});
  const double plain = simulate(s, uniformCosts(2, 1, 2, 0, 0, 0)).workers[0].busy;
  s.recomputeBaselines = true;
  EXPECT_DOUBLE_EQ(simulate(s, uniformCosts(2, 1, 2, 0, 0, 0)).workers[0].busy, plain + 2 * 1.0);
}

// A transfer between workers delays the consumer by one hop; here every hop is exposed.
TEST(Simulator, HopsAreChargedAndExposedWhenNothingHidesThem) {
  const SimResult r = simulate(bound(SimSchedule::kGpipe, 2, 1, {1, 1}), uniformCosts(2, 1, 1, 0, 0, 0.5));
  // F0 [0,1], F1 [1.5,2.5], B1 [2.5,3.5], B0 [4,5].
  EXPECT_DOUBLE_EQ(r.makespan, 5.0);
  EXPECT_DOUBLE_EQ(r.commTotal, 1.0);
  EXPECT_DOUBLE_EQ(r.commExposed, 1.0);
}

// RoundPipe on 2 workers, 2 microbatches per round, 2 rounds, jobs of 1 per microbatch:
//   round 1: F on w0 [0,2], fused on w1 [1,3], B on w0 [2,4]; round 2 (the counter continues at 3):
//   F on w1 [3,5], fused on w0 [4,6], B on w1 [5,7]. Makespan 7, 12 busy of 14: bubble 1/7.
TEST(Simulator, RoundPipeDispatchesRoundsRoundRobinFromTheRuntimesPlanner) {
  // forward [0,2), fused [2,3) = the head, backward [0,2)
  const SimSetup s = roundPipe(2, 2, 2, planFromCounts({2}, 0, {2}, 3));
  SimCosts c;
  c.forward = {0.5, 0.5, 0.5};
  c.backward = {0.0, 0.0, 0.5};  // backward job = recompute 1 + 0; fused = 0.5 + 0.5
  const SimResult r = simulate(s, c);
  EXPECT_DOUBLE_EQ(r.makespan, 7.0);
  EXPECT_NEAR(r.bubbleRatio(), 1.0 / 7.0, 1e-12);
  EXPECT_DOUBLE_EQ(r.workers[0].fill, 0.0);
  EXPECT_DOUBLE_EQ(r.workers[1].fill, 1.0);
  EXPECT_DOUBLE_EQ(r.workers[0].drain, 1.0);
  EXPECT_DOUBLE_EQ(r.workers[1].drain, 0.0);
  EXPECT_DOUBLE_EQ(r.workers[0].switchIdle + r.workers[1].switchIdle, 0.0);
  EXPECT_NE(simSvg(s, r).find("<svg"), std::string::npos);
  EXPECT_NE(simJson(s, r).find("\"bubble_ratio\""), std::string::npos);
}

// A slow worker (issue: uneven workers): GPipe, 2 workers, 1 microbatch; stage 0 = embedding + a decoder layer
// (fwd 1, bwd 2), stage 1 = a decoder layer + the head (fwd 2, bwd 4); worker 1 at half speed:
// F0 [0,1], F1 [1,5], B1 [5,13], B0 [13,15] (nominal: 1, 3, 7, 9).
TEST(Simulator, ASlowWorkerTakesLongerForEveryOperation) {
  SimSetup s = bound(SimSchedule::kGpipe, 2, 1, {1, 1});
  const SimCosts c = uniformCosts(2, 1, 2, 1, 2, 0);
  EXPECT_DOUBLE_EQ(simulate(s, c).makespan, 9.0);
  s.workerSpeed = {1.0, 0.5};
  const SimResult r = simulate(s, c);
  EXPECT_DOUBLE_EQ(r.makespan, 15.0);
  EXPECT_DOUBLE_EQ(r.workers[0].busy, 3.0);
  EXPECT_DOUBLE_EQ(r.workers[1].busy, 12.0);

  // RoundPipe (the case above, no hops): every worker at half speed doubles the step; one of them, less.
  SimSetup rp = roundPipe(2, 2, 2, planFromCounts({2}, 0, {2}, 3));
  SimCosts rc;
  rc.forward = {0.5, 0.5, 0.5};
  rc.backward = {0.0, 0.0, 0.5};
  rp.workerSpeed = {0.5, 0.5};
  EXPECT_DOUBLE_EQ(simulate(rp, rc).makespan, 14.0);
  rp.workerSpeed = {1.0, 0.5};
  const double mixed = simulate(rp, rc).makespan;
  EXPECT_GT(mixed, 7.0);
  EXPECT_LT(mixed, 14.0);

  rp.workerSpeed = {1.0, 1.0, 1.0};
  try {
    (void)simulate(rp, rc);
    ADD_FAILURE() << "expected InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("3 worker speeds (--worker-speeds) for 2 workers"), std::string::npos)
        << e.what();
  }
  rp.workerSpeed = {1.0, 0.0};
  try {
    (void)simulate(rp, rc);
    ADD_FAILURE() << "expected InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("worker 1's speed is 0"), std::string::npos) << e.what();
  }
}

// Earliest-finish dispatch on the uniform study (docs/benchmarks.md, "Uneven workers"): 8 workers, 8
// microbatches per round, the reference plan. One card at 0.6 costs round-robin more than 10%; the rule, which
// knows the speeds, gives back most of it and stays within 5% of every card at full speed.
TEST(Simulator, EarliestFinishDispatchRecoversMostOfASlowCard) {
  const SimCosts c = uniformCosts(28, 1, 2, 3, 6, 0.1);
  SimSetup s = roundPipe(8, 8, 2, choosePlan(PlannerKind::kReference, partitionerCosts(c), {8, 8, 0.0, 1}));
  s.recomputeAhead = 1;
  auto makespan = [&](DispatchRule rule, double slowest) {
    s.dispatch = rule;
    s.workerSpeed = {1, 1, 1, 1, 1, 1, 1, slowest};
    return simulate(s, c).makespan;
  };
  const double even = makespan(DispatchRule::kRoundRobin, 1.0);
  const double roundRobin = makespan(DispatchRule::kRoundRobin, 0.6);
  const double earliest = makespan(DispatchRule::kEarliestFinish, 0.6);
  EXPECT_GT(roundRobin, 1.1 * even);
  EXPECT_LT(earliest, 0.92 * roundRobin);
  EXPECT_LT(earliest, 1.05 * even);
  // The slow card still works, less: its busy time is below an even share of the total.
  s.dispatch = DispatchRule::kEarliestFinish;
  const SimResult r = simulate(s, c);
  double busy = 0;
  for (const auto& w : r.workers) busy += w.busy;
  EXPECT_GT(r.workers[7].busy, 0.0);
  EXPECT_LT(r.workers[7].busy, busy / 8);
}

// (start, end) of every operation of `worker`, in its order.
using Intervals = std::vector<std::pair<double, double>>;
Intervals intervalsOf(const SimResult& r, int worker) {
  Intervals out;
  for (const auto& op : r.ops) {
    if (op.worker == worker) out.emplace_back(op.start, op.end);
  }
  return out;
}

// Recompute ahead, 2 workers, 2 microbatches, hop 0.5; layers: embedding (free), a decoder layer (fwd 1, bwd 2),
// the head (fwd 1, bwd 2); plan F [0,2) on w0, fused [2,3) on w1, B [0,2) on w0 (recompute 1 + backward 2).
//   T mb0 [1.5,4.5], T mb1 [4.5,7.5] (w1) either way.
//   R = 0, w0: F [0,1] [1,2], B mb0 [5,8] (T mb0 + hop), B mb1 [8,11]: makespan 11, switch 3.
//   R = 1, w0: F [0,1] [1,2], R mb0 [2,3] (T mb0 started at 1.5), B mb0 [5,7], R mb1 [7,8], B mb1 [8,10]:
//   makespan 10, switch 0; the same busy time, hops and exposed hops.
TEST(Simulator, RecomputeAheadOverlapsTheWaitForTheGradientOnTwoWorkers) {
  SimSetup s = roundPipe(2, 2, 1, planFromCounts({2}, 0, {2}, 3));
  SimCosts c;
  c.forward = {0.0, 1.0, 1.0};
  c.backward = {0.0, 2.0, 2.0};
  c.hop = 0.5;
  const SimResult before = simulate(s, c);
  EXPECT_DOUBLE_EQ(before.makespan, 11.0);
  EXPECT_DOUBLE_EQ(before.workers[0].switchIdle, 3.0);
  s.recomputeAhead = 1;
  const SimResult after = simulate(s, c);
  EXPECT_DOUBLE_EQ(after.makespan, 10.0);
  EXPECT_DOUBLE_EQ(after.workers[0].switchIdle, 0.0);
  EXPECT_DOUBLE_EQ(after.workers[0].busy, before.workers[0].busy);
  EXPECT_DOUBLE_EQ(after.commTotal, 2.0);
  EXPECT_DOUBLE_EQ(after.commExposed, 1.0);
  EXPECT_DOUBLE_EQ(before.commExposed, 1.0);
  const Intervals expected{{0, 1}, {1, 2}, {2, 3}, {5, 7}, {7, 8}, {8, 10}};
  EXPECT_EQ(intervalsOf(after, 0), expected);
  s.recomputeAhead = -1;
  EXPECT_THROW(simulate(s, c), InputError);
}

// Recompute ahead, 3 workers, 2 microbatches, no hops; layers: embedding (free), two decoder layers and the
// head, each fwd 1, bwd 2. Plan F [0,3) on w0 (2 per mb), fused [3,4) on w1 (3), B [2,3) on w2, B [0,2) on w0
// (each recompute 1 + backward 2).
//   R = 0: T [2,5] [5,8]; w2 B [5,8] [8,11]; w0 B [8,11] [11,14]: makespan 14, w0's switch 4.
//   R = 1: w2 R [2,3] B [5,7] R [7,8] B [8,10]; w0 F [0,2] [2,4] R [4,5] B [7,9] R [9,10] B [10,12]: makespan 12.
TEST(Simulator, RecomputeAheadShortensABackwardChainOnThreeWorkers) {
  SimSetup s;
  s.schedule = SimSchedule::kRoundPipe;
  s.workers = 3;
  s.microbatches = 2;
  s.plan = planFromCounts({3}, 0, {1, 2}, 4);
  SimCosts c;
  c.forward = {0.0, 1.0, 1.0, 1.0};
  c.backward = {0.0, 2.0, 2.0, 2.0};
  const SimResult before = simulate(s, c);
  EXPECT_DOUBLE_EQ(before.makespan, 14.0);
  EXPECT_DOUBLE_EQ(before.workers[0].switchIdle, 4.0);
  s.recomputeAhead = 1;
  const SimResult after = simulate(s, c);
  EXPECT_DOUBLE_EQ(after.makespan, 12.0);
  EXPECT_DOUBLE_EQ(after.workers[0].switchIdle, 0.0);
  const Intervals expected{{2, 3}, {5, 7}, {7, 8}, {8, 10}};
  EXPECT_EQ(intervalsOf(after, 2), expected);
}

// The search considers the reference partitioner's plan, so it is never worse in simulation; on a head
// worth 3 layers with 4 workers it finds a plan the greedy partitioner misses.
// Found by fuzzing (tests/fuzz/regressions/trace): a trace whose JSON is not an object, or whose events hold
// fields of other types, ended in std::terminate; it is an InputError naming the file.
TEST(TraceReplay, AMalformedTraceIsAClearError) {
  const std::string path = rp::test::scratchDir() + "/trace.json";
  const char* kFields = R"j({"traceEvents": [{"cat": "compute", "ph": "X", "name": "fwd 0-1 mb 0 (step 3)",
                                                  "pid": "zero", "dur": 1}]})j";
  for (const char* text : {"null", R"({"traceEvents": [null, 3]})", kFields}) {
    std::ofstream(path, std::ios::trunc) << text;
    try {
      (void)loadTrace(path, 0.0);
      ADD_FAILURE() << "accepted: " << text;
    } catch (const rp::InputError& e) {
      EXPECT_EQ(std::string(e.what()).rfind(path + ":", 0), 0u) << e.what();
    }
  }
}

TEST(PlanSearch, NeverWorseThanTheReferenceAndBetterWhenTheGreedyMisses) {
  LayerCosts c;
  for (int l = 0; l < 18; ++l) {
    const double f = l == 0 ? 0.0 : l == 17 ? 3.0 : 1.0;
    c.forward.push_back(f);
    c.backward.push_back(3 * f);  // recompute + backward
    c.bytes.push_back(1.0);
    c.backwardBytes.push_back(2.0);
  }
  const SearchResult r = searchPlan(c, {4, 5});
  EXPECT_EQ(r.reference, partition(c, {4, 1.1, 0.0}).plan);
  EXPECT_DOUBLE_EQ(r.referenceMakespan, simulatedStep(c, r.reference, {4, 5}));
  EXPECT_DOUBLE_EQ(r.makespan, simulatedStep(c, r.plan, {4, 5}));
  EXPECT_LT(r.makespan, 0.98 * r.referenceMakespan) << describe(r.reference) << " vs " << describe(r.plan);
  EXPECT_GT(r.candidates, 100);
  // A memory limit the candidates must respect: no stage above half of it.
  const SearchResult capped = searchPlan(c, {4, 5, 12.0});
  for (const auto& st : capped.plan.backward) EXPECT_LE(2.0 * st.size(), 6.0) << describe(capped.plan);
}

// Note [One stage for one worker]: one worker's best plan is the whole model as one fused stage, where it fits
// half the memory budget; with two workers no candidate is a single stage.
TEST(PlanSearch, OneWorkerRunsTheWholeModelAsOneFusedStageWhereItFits) {
  LayerCosts c;
  for (int l = 0; l < 10; ++l) {
    const double f = l == 0 ? 0.1 : l == 9 ? 3.0 : 1.0;
    c.forward.push_back(f);
    c.backward.push_back(3 * f);
    c.bytes.push_back(1.0);
    c.backwardBytes.push_back(2.0);
  }
  const SearchResult one = searchPlan(c, {1, 4});
  EXPECT_EQ(one.plan.fused, (Range{0, 10})) << describe(one.plan);
  EXPECT_TRUE(one.plan.forward.empty() && one.plan.backward.empty()) << describe(one.plan);
  EXPECT_LT(one.makespan, one.referenceMakespan) << "the reference's split recomputes its backward stages";
  const SearchResult capped = searchPlan(c, {1, 4, 2 * 2.0 * 9});  // half the budget holds 9 of the 10 layers
  EXPECT_GT(capped.plan.fused.begin, 0) << describe(capped.plan);
  const SearchResult two = searchPlan(c, {2, 4});
  EXPECT_GT(two.plan.fused.begin, 0) << describe(two.plan);
}

// Mixture of experts: bytes follow every expert, FLOPs the chosen ones (docs/moe.md), by hand on a tiny shape
// read from a Qwen3-MoE config.json (layer 1 of 2 dense through mlp_only_layers).
TEST(Projection, MoeLayersStoreEveryExpertAndComputeTheChosen) {
  const std::string path = test::scratchDir() + "/config.json";
  std::ofstream(path) << R"({"model_type": "qwen3_moe", "vocab_size": 10, "hidden_size": 4, "intermediate_size": 8,
    "num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 2, "num_experts": 3,
    "num_experts_per_tok": 2, "moe_intermediate_size": 5, "mlp_only_layers": [1]})";
  const ModelShape m = loadModelShape(path);
  EXPECT_EQ(m.sparseLayers, 1);
  // Attention 48 (q 16, k+v 16, o 16); dense MLP 96; sparse: 3 experts x 60 + router 12 = 192 stored, 2 x 60 + 12
  // = 132 active. The mean over the two layers:
  EXPECT_DOUBLE_EQ(m.layerParams(), 48 + (96 + 192) / 2.0);
  EXPECT_DOUBLE_EQ(m.layerActiveParams(), 48 + (96 + 132) / 2.0);
  EXPECT_DOUBLE_EQ(m.params(), 2 * 192 + 2 * 40);  // + embedding and untied head
  // An NF4 base quantises attention everywhere and the dense layer's MLP; not the experts or the router.
  EXPECT_DOUBLE_EQ(m.layerNf4Params(), 48 + 96 / 2.0);
  EXPECT_DOUBLE_EQ(decoderLayerFlops(m, /*seq=*/3, /*rows=*/1), 2.0 * 162 * 3 + 2.0 * 3 * 3 * 2 * 2);
}

// A dense shape small enough to count by hand: 2 layers of hidden 4, MLP 8, 2 heads and 1 KV head of 2, vocab 10.
ModelShape tinyShape() {
  ModelShape m;
  m.layers = 2;
  m.hidden = 4;
  m.intermediate = 8;
  m.heads = 2;
  m.kvHeads = 1;
  m.headDim = 2;
  m.vocab = 10;
  return m;
}

// Projection costs from FLOP and byte counts, checked by hand on a tiny shape.
TEST(Projection, CostsFollowTheFlopAndByteCounts) {
  const ModelShape m = tinyShape();
  EXPECT_DOUBLE_EQ(m.layerParams(), 4 * 4 + 2 * 4 * 2 + 4 * 4 + 3 * 4 * 8);  // q, k+v, o, gate+up+down = 144
  Hardware h;
  h.gpus = 2;
  h.tensorTflops = 1e-6;  // 1000 FLOP per ms
  h.efficiency = 1.0;
  h.pcieGBs = 1e-3;  // 1000 bytes per ms, 500 per GPU
  h.gpusPerBridge = 2;
  const SimCosts c = projectCosts(m, h, /*seq=*/3, /*rows=*/1);
  ASSERT_EQ(c.layerCount(), 4);
  const double attention = 2.0 * 3 * 3 * 2 * 2;  // causal QK^T + AV: 2·s²·heads·head_dim
  EXPECT_NEAR(c.forward[1], (2.0 * 144 * 3 + attention) / 1000.0, 1e-9);
  EXPECT_DOUBLE_EQ(c.backward[1], 2 * c.forward[1]);
  EXPECT_NEAR(c.forward[3], 2.0 * 10 * 4 * 3 / 1000.0, 1e-9);
  EXPECT_NEAR(c.weightTransfer[1], 2.0 * 144 / 500.0, 1e-9);  // bf16 weights over a link shared by 2 GPUs
  EXPECT_NEAR(c.hop, 2 * (2.0 * 3 * 4) / 500.0, 1e-9);        // no P2P: twice over the host link
  h.memoryGb = 16.0 * 144 * 2 / 1e9;                          // exactly the 16 bytes/parameter of 2 layers
  EXPECT_TRUE(boundStageFits(m, h, 2, false, 3, 1, 0, true));
  EXPECT_FALSE(boundStageFits(m, h, 2, false, 3, 1, 1, true));
  // Without recompute a microbatch in flight keeps each layer's graph as the runtime planner counts it (Note
  // [Activation bytes], bf16), far more than the layer input a recomputing stage keeps; and one layer's backward
  // needs its working memory beside them (the MLP's two gradients, 2 x 8 wide, and the job's input and
  // gradients in and out, 3 x 4 wide, per token in bf16) — with recompute, also the graph it rebuilds.
  const double graph = decoderLayerActivationBytes(m, 3.0, 2, false);
  const double working = 3.0 * (2 * 8 + 3 * 4) * 2;
  EXPECT_DOUBLE_EQ(decoderLayerJobWorkingBytes(m, 3.0, 2, false), working);
  EXPECT_GT(graph, 4.0 * 2.0 * 3 * 4);
  auto fitsExactly = [&](double bytes, int inFlight, bool recompute) {
    h.memoryGb = bytes * (1.0 + 1e-12) / 1e9;
    const bool fits = boundStageFits(m, h, 2, false, 3, 1, inFlight, recompute);
    h.memoryGb = bytes * (1.0 - 1e-9) / 1e9;
    return fits && !boundStageFits(m, h, 2, false, 3, 1, inFlight, recompute);
  };
  EXPECT_TRUE(fitsExactly(16.0 * 144 * 2 + 2 * 3 * graph + working, 3, false));  // 2 layers x 3 in flight
  EXPECT_TRUE(fitsExactly(16.0 * 144 * 2 + 2 * 3 * (2.0 * 3 * 4) + graph + working, 3, true));
  h.memoryGb = 16.0 * 144 * 2 / 1e9;

  // LoRA: the matmuls' backward is their forward (activation gradients only), attention's stays 2x; the head's
  // backward equals its forward; no gradient downloads; 2 bytes per frozen parameter on a bound stage.
  const SimCosts lora = projectCosts(m, h, 3, 1, /*lora=*/true);
  EXPECT_NEAR(lora.backward[1], (2.0 * 144 * 3 + 2 * attention) / 1000.0, 1e-9);
  EXPECT_NEAR(lora.backward[3], lora.forward[3], 1e-12);
  EXPECT_DOUBLE_EQ(lora.weightTransfer[1], c.weightTransfer[1]);
  EXPECT_FALSE(lora.weightGradients);
  EXPECT_TRUE(c.weightGradients);
  h.memoryGb = 2.0 * 144 * 2 / 1e9;
  EXPECT_TRUE(boundStageFits(m, h, 2, false, 3, 1, 0, true, /*lora=*/true));
  EXPECT_FALSE(boundStageFits(m, h, 2, false, 3, 1, 0, true, /*lora=*/false));

  // An NF4 base: a layer's 144 projection parameters go up at 0.5625 bytes (half a byte, a float32 per 64);
  // the embedding and head stay bf16; the compute does not change. The host holds the same mix.
  const SimCosts nf4 = projectCosts(m, h, 3, 1, true, /*nf4=*/true);
  EXPECT_NEAR(nf4.weightTransfer[1], 0.5625 * 144 / 500.0, 1e-12);
  EXPECT_DOUBLE_EQ(nf4.weightTransfer[0], lora.weightTransfer[0]);
  EXPECT_DOUBLE_EQ(nf4.backward[1], lora.backward[1]);
  EXPECT_DOUBLE_EQ(frozenBaseBytes(m, false), 2.0 * 368);
  EXPECT_DOUBLE_EQ(frozenBaseBytes(m, true), 2.0 * (368 - 2 * 144) + 0.5625 * 2 * 144);
}

// Note [One FLOP model]: attention is counted per document (the varlen kernel's work), over half the square,
// and within a window; a frozen base's backward has no weight-gradient matmuls; by hand on the tiny shape.
TEST(Projection, AttentionIsCountedPerDocumentAndAFrozenBaseComputesNoWeightGradients) {
  const ModelShape m = tinyShape();
  EXPECT_DOUBLE_EQ(attentionPairs({6}), 18.0);            // 6² / 2
  EXPECT_DOUBLE_EQ(attentionPairs({2, 4}), 2.0 + 8.0);    // each document on its own
  EXPECT_DOUBLE_EQ(attentionPairs({6}, 2), 2.0 * 6 - 2);  // a window of 2: w·L − w²/2
  EXPECT_DOUBLE_EQ(attentionPairs({2}, 4), 2.0);          // shorter than the window: the whole half square
  EXPECT_DOUBLE_EQ(packedAttentionPairs(/*seq=*/6, /*rows=*/2), 36.0);
  EXPECT_DOUBLE_EQ(packedAttentionPairs(6, 2, /*documentTokens=*/4), 2 * (8.0 + 2.0));  // rows of 4 + 2
  EXPECT_DOUBLE_EQ(packedAttentionPairs(6, 2, /*documentTokens=*/6), 36.0);
  const double matmuls = 2.0 * 144 * 12, attention = 4.0 * 2 * 2 * 20;  // 12 tokens, 20 pairs, 2 heads of 2
  const LayerFlops full = decoderLayerWork(m, 12, 20, /*frozen=*/false);
  EXPECT_DOUBLE_EQ(full.forward, matmuls + attention);
  EXPECT_DOUBLE_EQ(full.backward, 2 * (matmuls + attention));
  const LayerFlops frozen = decoderLayerWork(m, 12, 20, /*frozen=*/true);
  EXPECT_DOUBLE_EQ(frozen.forward, full.forward);
  EXPECT_DOUBLE_EQ(frozen.backward, matmuls + 2 * attention);
  EXPECT_DOUBLE_EQ(headWork(m, 12, false).backward, 2 * 2.0 * 10 * 4 * 12);
  EXPECT_DOUBLE_EQ(headWork(m, 12, true).backward, 2.0 * 10 * 4 * 12);
  EXPECT_DOUBLE_EQ(decoderLayerFlops(m, 6, 2), decoderLayerWork(m, 12, 36, false).forward);
  // The projection takes the same counts: documents of 2 in rows of 6 attend a third of a row's square.
  Hardware h;
  h.gpus = 1;
  h.tensorTflops = 1e-6;  // 1000 FLOP per ms
  h.efficiency = 1.0;
  h.pcieGBs = 1.0;
  const SimCosts packed = projectCosts(m, h, 6, 2, false, false, /*documentTokens=*/2);
  EXPECT_NEAR(packed.forward[1], decoderLayerWork(m, 12, 6 * 2.0, false).forward / 1000.0, 1e-12);
  EXPECT_NEAR(packed.backward[1], 2 * packed.forward[1], 1e-12);
  // A sliding layer (Mistral's, Qwen2's from max_window_layers, GPT-OSS's alternate ones) counts its window:
  // decoder 1 of 2 keeps to 2 keys, so a row of 6 attends 2·6 − 2 = 10 pairs there, 18 in decoder 0.
  ModelShape sliding = m;
  sliding.windows = {0, 2};
  EXPECT_DOUBLE_EQ(decoderLayerFlops(sliding, 6, 2, sliding.window(1)), decoderLayerWork(m, 12, 20, false).forward);
  const SimCosts windowed = projectCosts(sliding, h, 6, 2);
  EXPECT_NEAR(windowed.forward[1], decoderLayerWork(m, 12, 36, false).forward / 1000.0, 1e-12);
  EXPECT_NEAR(windowed.forward[2], decoderLayerWork(m, 12, 20, false).forward / 1000.0, 1e-12);
}

// The cross-node gradient exchange a multi-node profile adds to each step, by hand on the tiny shape of
// CostsFollowTheFlopAndByteCounts (untied head: 368 parameters), and the [network] section's checks.
TEST(Projection, ExchangeFollowsTheTrainableBytesAndTheLink) {
  const ModelShape m = tinyShape();
  ASSERT_DOUBLE_EQ(m.params(), 368);
  EXPECT_DOUBLE_EQ(exchangeBytes(m, 1, false), 0.0);
  EXPECT_DOUBLE_EQ(exchangeBytes(m, 2, false), 4.0 * 368);              // a 2-node ring sends the vector once
  EXPECT_DOUBLE_EQ(exchangeBytes(m, 4, false), 4.0 * 368 * 2 * 3 / 4);  // 2 (N-1)/N of it
  // LoRA rank 16: q (4+4), k and v (4+2 each), o (4+4), gate and up (4+8 each), down (8+4) = 64 per layer.
  EXPECT_DOUBLE_EQ(exchangeBytes(m, 2, true), 4.0 * 16 * 64 * 2);

  const std::string path = test::scratchDir() + "/net.toml";
  const std::string common = R"([gpu]
name = "test"
count = 2
memory_gb = 1
tensor_tflops = 1
[link]
pcie_gbps = 1
gpus_per_host_bridge = 1
[assumptions]
matmul_efficiency = 1
)";
  std::ofstream(path) << common << "[network]\nnodes = 2\ngbit_per_s = 8e-6\nachieved_fraction = 0.5\n";
  const Hardware h = loadHardware(path);
  EXPECT_EQ(h.nodes, 2);
  // 8e-6 Gbit/s = 1000 bytes/s, half of it achieved: 1472 bytes in 2.944 s.
  EXPECT_NEAR(exchangeMs(m, h, false), 2944.0, 1e-9);
  std::ofstream(path) << common;
  EXPECT_EQ(loadHardware(path).nodes, 1);
  EXPECT_DOUBLE_EQ(exchangeMs(m, loadHardware(path), false), 0.0);
  std::ofstream(path) << common << "[network]\nnodes = 2\ngbit_per_s = 25\nachieved_fraction = 1.5\n";
  try {
    loadHardware(path);
    ADD_FAILURE() << "an achieved fraction above 1 was accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find(path + ": network.nodes must be at least 1"), std::string::npos) << e.what();
  }
  std::ofstream(path) << common << "[network]\nnodes = 2\n";
  try {
    loadHardware(path);
    ADD_FAILURE() << "a network without its rate was accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("number 'network.gbit_per_s' is missing"), std::string::npos) << e.what();
  }
}

// Without weight gradients (LoRA) a backward or fused job's transfer floor is its upload alone: one worker, one
// decoder layer whose upload (10) dwarfs every compute (0.1), in the backward stage and then in the fused one.
TEST(Simulator, LoraJobsDownloadNoWeightGradients) {
  SimCosts c = uniformCosts(1, 0.1, 0.1, 0.1, 0.1, 0.0);
  c.weightTransfer = {0.0, 10.0, 0.0};
  SimSetup s;
  s.workers = 1;
  s.microbatches = 1;
  for (const char* plan : {"2 | 0 | 2", "1 | 1 | 1"}) {
    s.plan = parsePlan(plan, c.layerCount(), "plan");
    c.weightGradients = true;
    const double full = simulate(s, c).makespan;
    c.weightGradients = false;
    EXPECT_NEAR(full - simulate(s, c).makespan, 10.0, 1e-9) << plan << ": upload + download vs upload";
  }
}

}  // namespace
}  // namespace rp::schedule
