// The simulator's outputs: a text table, JSON, and an SVG Gantt chart (docs/simulator.md).
#include <algorithm>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "schedule/sim.h"

namespace rp::schedule {
namespace {

struct Totals {
  double busy = 0, fill = 0, switchIdle = 0, drain = 0, intra = 0;
};

Totals totals(const SimResult& r) {
  Totals t;
  for (const auto& w : r.workers) {
    t.busy += w.busy;
    t.fill += w.fill;
    t.switchIdle += w.switchIdle;
    t.drain += w.drain;
    t.intra += w.intra;
  }
  return t;
}

}  // namespace

std::string simTable(const SimSetup& s, const SimResult& r) {
  const Totals t = totals(r);
  const double area = r.makespan * static_cast<double>(r.workers.size());
  std::string out = fmt::format("{}: {} workers, {} microbatches x {} rounds, makespan {:.3f}\n",
                                simScheduleName(s.schedule), s.workers, s.microbatches, s.rounds, r.makespan);
  out += "worker      busy      fill    switch     drain     intra\n";
  for (std::size_t w = 0; w < r.workers.size(); ++w) {
    const auto& x = r.workers[w];
    out += fmt::format("{:>6} {:>9.3f} {:>9.3f} {:>9.3f} {:>9.3f} {:>9.3f}\n", w, x.busy, x.fill, x.switchIdle, x.drain,
                       x.intra);
  }
  out += fmt::format(
      "bubble ratio {:.1f}% (fill {:.1f}%, switch {:.1f}%, drain {:.1f}%, intra {:.1f}%); communication {:.3f}, "
      "exposed {:.3f}\n",
      100 * r.bubbleRatio(), 100 * t.fill / area, 100 * t.switchIdle / area, 100 * t.drain / area, 100 * t.intra / area,
      r.commTotal, r.commExposed);
  return out;
}

std::string simJson(const SimSetup& s, const SimResult& r) {
  const Totals t = totals(r);
  const double area = r.makespan * static_cast<double>(r.workers.size());
  nlohmann::json workers = nlohmann::json::array(), ops = nlohmann::json::array();
  for (const auto& w : r.workers) {
    workers.push_back(
        {{"busy", w.busy}, {"fill", w.fill}, {"switch", w.switchIdle}, {"drain", w.drain}, {"intra", w.intra}});
  }
  for (const auto& op : r.ops) {
    ops.push_back({{"worker", op.worker},
                   {"microbatch", op.microbatch},
                   {"stage", op.stage},
                   {"backward", op.backward},
                   {"start", op.start},
                   {"end", op.end},
                   {"label", op.label}});
  }
  nlohmann::json j{{"schedule", simScheduleName(s.schedule)},
                   {"workers", s.workers},
                   {"microbatches", s.microbatches},
                   {"rounds", s.rounds},
                   {"makespan", r.makespan},
                   {"bubble_ratio", r.bubbleRatio()},
                   {"bubble",
                    {{"fill", t.fill / area},
                     {"switch", t.switchIdle / area},
                     {"drain", t.drain / area},
                     {"intra", t.intra / area}}},
                   {"communication", {{"total", r.commTotal}, {"exposed", r.commExposed}}},
                   {"per_worker", workers},
                   {"ops", ops}};
  if (s.schedule == SimSchedule::kRoundPipe) j["dispatch"] = dispatchRuleName(s.dispatch);
  return j.dump(1);
}

std::string simSvg(const SimSetup& s, const SimResult& r) {
  const double width = 1000, row = 28, left = 70, top = 30;
  const double scale = r.makespan > 0 ? (width - left - 10) / r.makespan : 1.0;
  std::string out = fmt::format(
      R"(<svg xmlns="http://www.w3.org/2000/svg" width="{}" height="{}" font-family="sans-serif" font-size="10">)"
      "\n",
      width, top + row * static_cast<double>(r.workers.size()) + 20);
  out += fmt::format(R"(<text x="4" y="16" font-size="12">{}: {} workers, makespan {:.3f}, bubble {:.1f}%</text>)"
                     "\n",
                     simScheduleName(s.schedule), s.workers, r.makespan, 100 * r.bubbleRatio());
  for (std::size_t w = 0; w < r.workers.size(); ++w) {
    out += fmt::format(R"(<text x="4" y="{}">worker {}</text>)"
                       "\n",
                       top + row * static_cast<double>(w) + 17, w);
  }
  for (const auto& op : r.ops) {
    const bool fused = !op.label.empty() && op.label[0] == 'T';
    const char* color = fused ? "#f4a261" : op.backward ? "#2a9d8f" : "#457b9d";
    const double x = left + op.start * scale, y = top + row * op.worker;
    const double w = std::max(0.5, (op.end - op.start) * scale);
    out += fmt::format(
        R"(<rect x="{:.2f}" y="{:.2f}" width="{:.2f}" height="{}" fill="{}" stroke="white"><title>{}</title></rect>)"
        "\n",
        x, y, w, row - 4, color, op.label);
    if (w > 24) {
      out += fmt::format(R"(<text x="{:.2f}" y="{:.2f}" fill="white">{}</text>)"
                         "\n",
                         x + 2, y + 15, op.label.substr(0, static_cast<std::size_t>(w / 6)));
    }
  }
  out += "</svg>\n";
  return out;
}

}  // namespace rp::schedule
