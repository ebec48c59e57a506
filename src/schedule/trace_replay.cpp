#include "schedule/trace_replay.h"

#include <algorithm>
#include <fstream>
#include <map>
#include <set>
#include <tuple>

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "common/json_input.h"
#include "trace/formats.h"

namespace rp::schedule {

TraceInput loadTrace(const std::string& path, double hop) {
  std::ifstream in(path);
  if (!in) RP_THROW(InputError, "{}: cannot open the trace", path);
  struct Acc {
    double sum = 0;
    int n = 0;
  };
  std::map<std::tuple<std::string, int, int>, Acc> stages;  // (kind, first, last) -> durations
  std::set<int> workers;
  int microbatches = 0;
  readJson(path, [&] {
    const auto j = nlohmann::json::parse(in);
    for (const auto& e : j.value("traceEvents", nlohmann::json::array())) {
      if (!e.is_object() || e.value("cat", "") != "compute" || e.value("ph", "") != "X") continue;
      const auto span = rp::trace::parseComputeSpanName(e.value("name", ""));
      if (!span) continue;
      workers.insert(e.value("pid", 0));
      microbatches = std::max(microbatches, span->microbatch + 1);
      if (span->step < 3) continue;  // warm-up
      Acc& acc = stages[{span->kind, span->first, span->last}];
      acc.sum += e.value("dur", 0.0) / 1e3;
      ++acc.n;
    }
  });
  TraceInput t;
  int layers = 0;
  for (const auto& [key, acc] : stages) layers = std::max(layers, std::get<2>(key) + 1);
  if (layers < 2 || workers.empty()) {
    RP_THROW(InputError, "{}: no compute spans of steps >= 3 (a RoundPipe run's trace.json, 3+ steps)", path);
  }
  t.costs.forward.assign(static_cast<std::size_t>(layers), 0.0);
  t.costs.backward.assign(static_cast<std::size_t>(layers), 0.0);
  t.costs.hop = hop;
  auto spread = [&](std::vector<double>& v, int a, int b, double total) {
    for (int l = a; l <= b; ++l) v[static_cast<std::size_t>(l)] = total / (b - a + 1);
  };
  for (const auto& [key, acc] : stages) {  // forward stages first: the recompute of backward stages uses them
    const auto& [kind, a, b] = key;
    if (kind == "fwd") {
      spread(t.costs.forward, a, b, acc.sum / acc.n);
      t.plan.forward.push_back({a, b + 1});
    } else if (kind == "fused") {
      spread(t.costs.backward, a, b, acc.sum / acc.n);  // forward, loss and backward at once
      t.plan.fused = {a, b + 1};
    }
  }
  for (const auto& [key, acc] : stages) {
    const auto& [kind, a, b] = key;
    if (kind != "bwd") continue;
    double recompute = 0, ahead = 0;
    for (int l = a; l <= b; ++l) recompute += t.costs.forward[static_cast<std::size_t>(l)];
    for (const auto& [other, part] : stages) {
      if (std::get<0>(other) == "recompute" && std::get<1>(other) >= a && std::get<2>(other) <= b)
        ahead += part.sum / part.n;
    }
    spread(t.costs.backward, a, b, std::max(0.0, acc.sum / acc.n + ahead - recompute));
    t.plan.backward.push_back({a, b + 1});
  }
  std::sort(t.plan.forward.begin(), t.plan.forward.end(), [](auto& x, auto& y) { return x.begin < y.begin; });
  std::sort(t.plan.backward.begin(), t.plan.backward.end(), [](auto& x, auto& y) { return x.begin > y.begin; });
  validate(t.plan, layers,
           path + " (the plan its spans describe; replanned runs mix plans: use pipeline.replan_every = 0)");
  t.workers = static_cast<int>(workers.size());
  t.microbatches = microbatches;
  return t;
}

}  // namespace rp::schedule
