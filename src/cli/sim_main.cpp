// roundpipe_sim: simulate pipeline schedules on the runtime's own planner and dispatch (docs/simulator.md).
//   roundpipe_sim --workers 8 --layers 28 --fwd 1 --bwd 2 --head-fwd 3 --head-bwd 6 [--schedule all]
//   roundpipe_sim --profile out/profile.json --workers 2 --microbatches 3   (a run's measured layer times)
//   roundpipe_sim --trace out/trace.json --schedule roundpipe                (replay a run from its trace)
#include <cstdio>
#include <fstream>
#include <iostream>
#include <optional>
#include <sstream>

#include "cli/command_line.h"
#include "cli/run_main.h"
#include "common/error.h"
#include "schedule/partitioner.h"
#include "schedule/plan_search.h"
#include "schedule/projection.h"
#include "schedule/sim.h"
#include "schedule/trace_replay.h"
#include "trace/formats.h"

namespace {

using namespace rp::schedule;

// Decoder layers per stage of the balanced contiguous partition the baselines use in the runtime.
std::vector<int> balancedStages(const SimCosts& c, int stages) {
  const int L = c.layerCount();
  LayerCosts costs = partitionerCosts(c);
  for (int l = 0; l < L; ++l) costs.backward[static_cast<std::size_t>(l)] = c.backward[static_cast<std::size_t>(l)];
  const Plan plan = balancedBoundPlan(costs, stages);
  std::vector<Range> ranges(plan.forward);
  ranges.push_back(plan.fused);
  std::vector<int> out;
  for (const Range& r : ranges) out.push_back(std::max(0, std::min(r.end, L - 1) - std::max(r.begin, 1)));
  return out;
}

std::vector<int> parseCounts(const std::string& text, const std::string& what) {
  std::vector<int> out;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');) {
    try {
      out.push_back(std::stoi(item));
    } catch (const std::exception&) {
      RP_THROW(rp::InputError, "{} = \"{}\": expected comma-separated layer counts", what, text);
    }
  }
  return out;
}

// An emulated device's profile holds its model's times: taken only when told (--modelled-profile).
SimCosts loadProfile(const std::string& path, double hop, bool modelledOk) {
  const rp::trace::LayerProfileFile p = rp::trace::readLayerProfile(path);
  if (p.modelled() && !modelledOk) {
    RP_THROW(rp::InputError,
             "{}: --profile holds the layer times of an emulated device ({}): its model's, not measurements; add "
             "--modelled-profile to simulate from them",
             path, p.device);
  }
  SimCosts c;
  c.forward = p.forwardMs;
  c.backward = p.backwardMs;
  c.hop = hop;
  return c;
}

void writeFile(const std::string& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
  if (!out.flush()) RP_THROW(rp::SystemError, "{}: cannot write", path);
}

std::string withSuffix(const std::string& path, const std::string& suffix) {
  const auto dot = path.rfind('.');
  return dot == std::string::npos ? path + "-" + suffix : path.substr(0, dot) + "-" + suffix + path.substr(dot);
}

int run(int argc, char** argv) {
  rp::cli::CommandLine line{"roundpipe_sim: simulate RoundPipe and classic pipeline schedules (docs/simulator.md)"};
  std::string schedule = "all", plan, stages, profile, jsonPath, svgPath;
  int workers = 0, microbatches = 0, rounds = 1, layers = 28, virtualStages = 2;
  double fwd = 1.0, bwd = 2.0, headFwd = 3.0, headBwd = 6.0, hop = 0.0;
  line.option("--schedule", schedule, "roundpipe | gpipe | 1f1b | interleaved-1f1b | all");
  line.option("--workers", workers,
              "workers (GPUs; default 8, or with --hardware the profile's GPUs, of which this many may be used)")
      .wholeAtLeast(1);
  line.option("--microbatches", microbatches, "microbatches per round (default: workers)");
  line.option("--rounds", rounds, "rounds per step (RoundPipe; the baselines run microbatches x rounds)");
  line.option("--layers", layers, "decoder layers").wholeAtLeast(1);
  line.option("--fwd", fwd, "forward time of one decoder layer for one microbatch");
  line.option("--bwd", bwd, "backward time of one decoder layer for one microbatch (without recompute)");
  line.option("--head-fwd", headFwd, "LM head + loss forward time per microbatch");
  line.option("--head-bwd", headBwd, "LM head backward time per microbatch");
  line.option("--hop", hop, "transfer time of one activation between two workers");
  line.option("--profile", profile, "per-layer times from a run (<output.dir>/profile.json) instead of the above");
  bool modelledProfile = false;
  line.flag("--modelled-profile", modelledProfile,
            "--profile may be an emulated device's run's (its model's times, not measurements)");
  std::string tracePath;
  line.option("--trace", tracePath,
              "replay a RoundPipe run from its trace.json: its plan, workers, microbatches and stage times");
  line.option("--plan", plan, "RoundPipe plan \"F1,F2,...|fused|B1,...\" (default: the runtime's partitioner)");
  line.option("--stages", stages,
              "baselines: decoder layers per stage, workers x chunks of them for interleaved-1f1b (default: the "
              "runtime's balanced split)");
  line.option("--virtual", virtualStages, "interleaved-1f1b: model chunks per worker").wholeAtLeast(1);
  bool recompute = false;
  std::string hardwarePath, modelPath;
  int seq = 2048, rows = 1;
  line.option("--hardware", hardwarePath, "GPU projection: a cluster-configs/*.toml profile (with --model)");
  line.option("--model", modelPath, "GPU projection: a Hugging Face config.json");
  line.option("--seq", seq, "GPU projection: tokens per sequence");
  line.option("--rows", rows, "GPU projection: sequences per microbatch");
  int documentTokens = 0;
  line.option("--document-tokens", documentTokens,
              "GPU projection: packed documents of this many tokens, attended each on its own (0: one a sequence)")
      .wholeAtLeast(0);
  bool lora = false;
  line.flag("--lora", lora,
            "GPU projection: LoRA on a frozen bf16 base (no weight gradients computed or downloaded, no optimizer "
            "state on the baselines' GPUs)");
  bool nf4 = false;
  line.flag("--nf4", nf4,
            "GPU projection, with --lora: the frozen base's attention and dense-MLP projections stored and uploaded "
            "as NF4 (lora.base_dtype = \"nf4\"; experts and router stay bf16)");
  std::string planner = "reference";
  line.option("--planner", planner, "RoundPipe plan without --plan: reference (the partitioner) | search");
  int ahead = 1;
  line.option("--recompute-ahead", ahead,
              "RoundPipe: backward microbatches recomputed before their gradient arrives (pipeline.recompute_ahead; "
              "0 = after)")
      .wholeAtLeast(0);
  std::vector<double> speeds;
  line.option("--worker-speeds", speeds,
              "compute speed of each worker against the costs, comma-separated (1 = nominal; 0.6 = a card at 60%)")
      .delimiter(',');
  std::string dispatchRule = "round_robin";
  line.option("--dispatch", dispatchRule,
              "RoundPipe: round_robin | earliest_finish (each job to the worker predicted to finish it first, "
              "from the costs and --worker-speeds; pipeline.dispatch)");
  line.flag("--recompute-baselines", recompute,
            "baselines checkpoint activations as RoundPipe does (a recompute before every backward)");
  line.option("--json", jsonPath, "write the result as JSON");
  line.option("--svg", svgPath, "write a Gantt chart (SVG)");
  if (const auto code = line.parse(argc, argv)) return *code;
  const bool projecting = !hardwarePath.empty() || !modelPath.empty();
  if (projecting && (hardwarePath.empty() || modelPath.empty())) {
    RP_THROW(rp::InputError, "a GPU projection needs both --hardware and --model");
  }
  if (lora && !projecting) RP_THROW(rp::InputError, "--lora applies to GPU projections (--hardware and --model)");
  if (nf4 && !lora) RP_THROW(rp::InputError, "--nf4 is a LoRA run's base: add --lora");
  if (documentTokens > 0 && !projecting) {
    RP_THROW(rp::InputError, "--document-tokens applies to GPU projections (--hardware and --model)");
  }
  Hardware hardware;
  ModelShape shape;
  if (projecting) {
    hardware = loadHardware(hardwarePath);
    shape = loadModelShape(modelPath);
    // Fewer workers than the profile has GPUs: those of one server, each with its share of its host bridge (the
    // emulated device's runs: docs/emulated.md).
    if (workers > hardware.gpus) {
      RP_THROW(rp::InputError, "--workers {}: the profile {} has {} GPUs", workers, hardwarePath, hardware.gpus);
    }
    if (workers == 0) workers = hardware.gpus;
    std::cout << fmt::format(
        "PROJECTION, not a measurement: {} ({} x {}, {:.0f} TFLOPS x {:.0f}% efficiency, host link {:.0f} GB/s per "
        "{} GPUs, {}), {:.2f}B parameters{}, {} x {} tokens per microbatch{}; times in ms\n\n",
        modelPath, hardware.gpus, hardware.name, hardware.tensorTflops, 100 * hardware.efficiency, hardware.pcieGBs,
        hardware.gpusPerBridge, hardware.p2p ? fmt::format("P2P {:.0f} GB/s", hardware.p2pGBs) : "no P2P",
        shape.params() / 1e9, lora ? (nf4 ? " (LoRA: frozen NF4 base)" : " (LoRA: frozen base)") : "", rows, seq,
        documentTokens > 0 ? fmt::format(" in documents of {}", documentTokens) : std::string());
    if (lora) {
      std::cout << fmt::format("host: the frozen base holds {:.1f} GB ({}) in each node's store\n\n",
                               frozenBaseBytes(shape, nf4) / 1e9, nf4 ? "NF4 projections, the rest bf16" : "bf16");
    }
    if (hardware.nodes > 1) {
      std::cout << fmt::format(
          "{} such nodes, data parallel over {:.0f} Gbit/s Ethernet at {:.0f}% of it: each node sends {:.1f} MB of "
          "gradient sums per step, {:.1f} ms added to every step (counted unhidden); tokens/s below are the {} "
          "nodes'\n\n",
          hardware.nodes, hardware.networkGbps, 100 * hardware.networkEfficiency,
          exchangeBytes(shape, hardware.nodes, lora) / 1e6, exchangeMs(shape, hardware, lora), hardware.nodes);
    }
  }
  std::optional<TraceInput> trace;
  if (!tracePath.empty()) {
    trace = loadTrace(tracePath, hop);
    workers = trace->workers;
    if (microbatches <= 0) microbatches = trace->microbatches;
    if (plan.empty()) plan = formatPlan(trace->plan);
    std::cout << fmt::format("trace {}: {} workers, {} microbatches, plan {}\n\n", tracePath, workers,
                             trace->microbatches, describe(trace->plan));
  }
  if (workers == 0) workers = 8;
  const SimCosts costs = projecting        ? projectCosts(shape, hardware, seq, rows, lora, nf4, documentTokens)
                         : trace           ? trace->costs
                         : profile.empty() ? uniformCosts(layers, fwd, bwd, headFwd, headBwd, hop)
                                           : loadProfile(profile, hop, modelledProfile);
  std::vector<SimSchedule> schedules;
  if (schedule == "all") {
    schedules = {SimSchedule::kGpipe, SimSchedule::kOneFOneB, SimSchedule::kInterleaved, SimSchedule::kRoundPipe};
  } else {
    schedules = {parseSimSchedule(schedule, "--schedule")};
  }
  std::vector<std::pair<SimSchedule, SimResult>> results;
  for (SimSchedule s : schedules) {
    SimSetup setup;
    setup.schedule = s;
    setup.workers = workers;
    setup.microbatches = microbatches > 0 ? microbatches : workers;
    setup.rounds = rounds;
    setup.virtualStages = s == SimSchedule::kInterleaved ? virtualStages : 1;
    setup.recomputeBaselines = recompute;
    setup.recomputeAhead = ahead;
    setup.workerSpeed = speeds;
    setup.dispatch = parseDispatchRule(dispatchRule, "--dispatch");
    if (s == SimSchedule::kRoundPipe) {
      if (!plan.empty()) {
        setup.plan = parsePlan(plan, costs.layerCount(), "--plan");
      } else if (parsePlannerKind(planner, "--planner") == PlannerKind::kSearch) {
        const SearchResult found = searchPlan(partitionerCosts(costs), {workers, setup.microbatches, 0.0, ahead});
        setup.plan = found.plan;
        std::cout << fmt::format(
            "plan search: {} candidates; reference {} -> {:.2f} per round; best {} -> {:.2f} per round ({:+.1f}%)\n",
            found.candidates, describe(found.reference), found.referenceMakespan, describe(found.plan), found.makespan,
            100 * (found.makespan / found.referenceMakespan - 1));
      } else {
        setup.plan =
            choosePlan(PlannerKind::kReference, partitionerCosts(costs), {workers, setup.microbatches, 0.0, ahead});
      }
    } else if (!stages.empty()) {
      // Each baseline takes --stages when it lists that schedule's stage count (interleaving: workers x
      // chunks); comparing all schedules, one whose count differs gets the balanced split, said so.
      setup.stageLayers = parseCounts(stages, "--stages");
      const auto needed = static_cast<std::size_t>(workers * setup.virtualStages);
      if (setup.stageLayers.size() != needed && schedules.size() > 1) {
        std::cout << fmt::format(
            "{}: --stages lists {} stages, it needs {} ({} workers x {} chunks): the balanced "
            "split instead\n",
            simScheduleName(s), setup.stageLayers.size(), needed, workers, setup.virtualStages);
        setup.stageLayers = balancedStages(costs, workers * setup.virtualStages);
      }
    } else {
      setup.stageLayers = balancedStages(costs, workers * setup.virtualStages);
    }
    if (s == SimSchedule::kInterleaved && setup.microbatches * setup.rounds % workers != 0) {
      std::cout << "interleaved-1f1b: skipped (microbatches must be a multiple of workers)\n\n";
      continue;
    }
    if (projecting && s != SimSchedule::kRoundPipe) {
      // Weight-bound schedules keep their stage's training state on the GPU: does it fit?
      const int stagesCount = static_cast<int>(setup.stageLayers.size());
      bool fits = true;
      for (int st = 0; st < stagesCount; ++st) {
        const int inFlight = s == SimSchedule::kGpipe ? setup.microbatches * setup.rounds : workers;
        const int layersOnWorker = setup.stageLayers[static_cast<std::size_t>(st)] * setup.virtualStages;
        fits = fits && boundStageFits(shape, hardware, layersOnWorker, st == stagesCount - 1, seq, rows, inFlight,
                                      recompute, lora);
      }
      if (!fits) {
        std::cout << simScheduleName(s)
                  << (lora ? ": OOM (a stage's frozen weights and activations exceed "
                           : ": OOM (a stage's weights, gradients, fp32 masters, Adam moments and activations exceed ")
                  << hardware.memoryGb << " GB)\n\n";
        results.emplace_back(s, SimResult{});
        continue;
      }
    }
    const SimResult r = simulate(setup, costs);
    std::cout << simTable(setup, r);
    if (s == SimSchedule::kRoundPipe) {
      std::cout << "plan: " << describe(setup.plan) << ", dispatch " << dispatchRuleName(setup.dispatch) << "\n";
    }
    std::cout << "\n";
    const std::string suffix = schedules.size() > 1 ? simScheduleName(s) : "";
    if (!jsonPath.empty()) writeFile(suffix.empty() ? jsonPath : withSuffix(jsonPath, suffix), simJson(setup, r));
    if (!svgPath.empty()) writeFile(suffix.empty() ? svgPath : withSuffix(svgPath, suffix), simSvg(setup, r));
    results.emplace_back(s, r);
  }
  if (results.size() > 1) {
    double base = 0;
    for (const auto& [s, r] : results) {
      if (s == SimSchedule::kOneFOneB) base = r.makespan;
    }
    const int mb = (microbatches > 0 ? microbatches : workers) * rounds;
    std::cout << "| schedule | makespan | bubble | speed vs 1f1b |" << (projecting ? " projected tokens/s |" : "")
              << "\n|---|---:|---:|---:|" << (projecting ? "---:|" : "") << "\n";
    for (const auto& [s, r] : results) {
      if (r.makespan <= 0) {
        std::cout << fmt::format("| {} | OOM | — | — |{}\n", simScheduleName(s), projecting ? " — |" : "");
        continue;
      }
      std::cout << fmt::format("| {} | {:.2f} | {:.1f}% | {} |", simScheduleName(s), r.makespan, 100 * r.bubbleRatio(),
                               base > 0 ? fmt::format("{:.2f}x", base / r.makespan) : std::string("—"));
      if (projecting) {
        std::cout << fmt::format(
            " {:.0f} |", 1000.0 * hardware.nodes * mb * rows * seq / (r.makespan + exchangeMs(shape, hardware, lora)));
      }
      std::cout << "\n";
    }
  }
  return rp::cli::kExitOk;
}

}  // namespace

int main(int argc, char** argv) {
  rp::cli::exitProcess(rp::cli::runMain([&] { return run(argc, argv); }));
}
