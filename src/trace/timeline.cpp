#include "trace/timeline.h"

#include <fstream>

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "common/host_cpu.h"

namespace rp::trace {

std::int64_t Timeline::nowUs() const {
  return std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - origin_).count();
}

std::int64_t Timeline::usAt(Clock::time_point t) const {
  return std::chrono::duration_cast<std::chrono::microseconds>(t - origin_).count();
}

void Timeline::setDeviceLabel(std::string label) {
  std::lock_guard<std::mutex> lock(mutex_);
  deviceLabel_ = std::move(label);
}

void Timeline::record(Span span) {
  std::lock_guard<std::mutex> lock(mutex_);
  spans_.push_back(std::move(span));
}

void Timeline::count(Counter counter) {
  std::lock_guard<std::mutex> lock(mutex_);
  counters_.push_back(std::move(counter));
}

std::vector<Span> Timeline::spans() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return spans_;
}

std::string Timeline::toJson() const {
  nlohmann::json events = nlohmann::json::array();
  std::string label;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    label = deviceLabel_;
  }
  const std::string process = "rank " + std::to_string(rank_) + (label.empty() ? "" : " (" + label + ")");
  events.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", rank_}, {"args", {{"name", process}}}});
  if (!label.empty()) {
    events.push_back(
        {{"name", "thread_name"}, {"ph", "M"}, {"pid", rank_}, {"tid", 3}, {"args", {{"name", "device: " + label}}}});
  }
  events.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", rank_}, {"tid", 0}, {"args", {{"name", "worker"}}}});
  events.push_back(
      {{"name", "thread_name"}, {"ph", "M"}, {"pid", rank_}, {"tid", 1}, {"args", {{"name", "optimizer"}}}});
  events.push_back(
      {{"name", "thread_name"}, {"ph", "M"}, {"pid", rank_}, {"tid", 2}, {"args", {{"name", "stage jobs"}}}});
  for (const auto& s : spans()) {
    nlohmann::json e{{"name", s.name},        {"cat", s.category}, {"ph", "X"},           {"pid", rank_},
                     {"tid", s.thread},       {"ts", s.startUs},   {"dur", s.durationUs}};
    if (s.cpuMs >= 0) e["args"] = {{"cpu_ms", s.cpuMs}};
    events.push_back(std::move(e));
  }
  std::vector<Counter> counters;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    counters = counters_;
  }
  for (const auto& c : counters) {
    nlohmann::json args = nlohmann::json::object();
    for (const auto& [key, value] : c.values) args[key] = value;
    events.push_back({{"name", c.name}, {"ph", "C"}, {"pid", rank_}, {"ts", c.atUs}, {"args", args}});
  }
  return nlohmann::json{{"traceEvents", events}, {"displayTimeUnit", "ms"}}.dump();
}

Timeline::Scope::Scope(Timeline* timeline, std::string name, std::string category, int thread) : timeline_(timeline) {
  if (timeline_ == nullptr) return;
  span_ = Span{std::move(name), std::move(category), thread, timeline_->nowUs(), 0, -1.0};
  if (span_.category == "optimizer") cpuStart_ = cpu::roleSeconds(cpu::Role::kOptimizer);
}

Timeline::Scope::~Scope() {
  if (timeline_ == nullptr) return;
  span_.durationUs = timeline_->nowUs() - span_.startUs;
  if (cpuStart_ >= 0) span_.cpuMs = (cpu::roleSeconds(cpu::Role::kOptimizer) - cpuStart_) * 1e3;
  timeline_->record(std::move(span_));
}

void mergeTraces(const std::vector<std::string>& inputs, const std::string& output) {
  nlohmann::json events = nlohmann::json::array();
  for (const auto& path : inputs) {
    std::ifstream in(path);
    if (!in) RP_THROW(SystemError, "{}: cannot read a rank's trace", path);
    const auto j = nlohmann::json::parse(in);
    for (const auto& e : j.at("traceEvents")) events.push_back(e);
  }
  std::ofstream out(output);
  out << nlohmann::json{{"traceEvents", events}, {"displayTimeUnit", "ms"}}.dump() << '\n';
  if (!out) RP_THROW(SystemError, "{}: write failed", output);
}

}  // namespace rp::trace
