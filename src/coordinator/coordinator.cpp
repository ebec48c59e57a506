#include "coordinator/coordinator.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "common/error.h"
#include "common/log.h"
#include "schedule/dispatch.h"
#include "schedule/plan_search.h"

namespace rp::coordinator {
namespace {

// The late rank's description for waitOrStall, when the caller can give one.
std::function<std::string()> lateRank(const std::function<std::string(int)>& describeRank, int rank) {
  if (!describeRank) return {};
  return [describeRank, rank] { return describeRank(rank); };
}

// "fwd/bwd" milliseconds per layer, for the log.
std::string layerTimes(const schedule::LayerCosts& costs) {
  std::vector<std::string> times;
  for (std::size_t l = 0; l < costs.forward.size(); ++l) {
    times.push_back(fmt::format("{:.2f}/{:.2f}", costs.forward[l], costs.backward[l]));
  }
  return fmt::format("{}", fmt::join(times, " "));
}

}  // namespace

Coordination::Coordination(control::ControlChannel& channel, CoordinationOptions options, schedule::Plan plan,
                           schedule::LayerCosts proxy)
    : channel_(channel),
      options_(options),
      plan_(std::move(plan)),
      proxy_(std::move(proxy)),
      layers_(plan_.layerCount()),
      profile_(layers_),
      speeds_(channel.size(), layers_) {
  if (channel_.size() != options_.workers * options_.nodes) {
    RP_THROW(InternalError, "coordination over {} ranks for {} node(s) x {} workers", channel_.size(), options_.nodes,
             options_.workers);
  }
}

void Coordination::requestStop(int signal) {
  if (stop_) return;
  stop_ = true;
  if (channel_.rank() == 0) {
    stopSignal_ = signal;
    stopRank_ = 0;
    return;
  }
  const std::int64_t request[2] = {channel_.rank(), signal};
  channel_.send(0, control::Tag::kStopRequest, request, sizeof(request));
}

// Rank 0: stop requests that arrived from other ranks (without waiting for any).
bool Coordination::stopRequested() {
  bool requested = false;
  for (int r = 1; r < channel_.size(); ++r) {
    std::int64_t request[2] = {-1, 0};  // the rank, the signal
    while (
        channel_.receive(r, control::Tag::kStopRequest, request, sizeof(request), std::chrono::steady_clock::now())) {
      if (!requested && !stop_) {
        stopSignal_ = static_cast<int>(request[1]);
        stopRank_ = r;
        RP_LOG_INFO("rank {} received a preemption signal: every rank stops at this step", r);
      }
      requested = true;
    }
  }
  return requested;
}

Directive Coordination::begin(std::int64_t step, const std::function<std::string(int)>& describeRank,
                              const std::function<bool()>& meanwhile) {
  if (channel_.rank() != 0) {
    std::int64_t words = -1;
    std::vector<std::int64_t> body;
    bool polling = meanwhile && meanwhile();
    // The directive's announcement, in slices of a millisecond while `meanwhile` wants to run (it ran once
    // before: a directive already here still lets it).
    auto announced = [&](control::ControlChannel::Deadline deadline) {
      while (polling) {
        const auto slice = std::min(deadline, std::chrono::steady_clock::now() + std::chrono::milliseconds(1));
        if (channel_.receive(0, control::Tag::kDirective, &words, sizeof(words), slice)) return true;
        if (slice >= deadline) return false;
        polling = meanwhile();
      }
      return channel_.receive(0, control::Tag::kDirective, &words, sizeof(words), deadline);
    };
    control::waitOrStall(
        options_.stall,
        [&](control::ControlChannel::Deadline deadline) {
          if (words < 0) {
            if (!announced(deadline)) return false;
            if (words <= 0 || words > 64 * (layers_ + 4)) {
              RP_THROW(control::PeerError, "directive from rank 0 announces {} words (corrupt or a different build)",
                       words);
            }
            body.resize(static_cast<std::size_t>(words));
          }
          return channel_.receive(0, control::Tag::kDirective, body.data(), body.size() * sizeof(std::int64_t),
                                  deadline);
        },
        [&] { return fmt::format("rank 0's plan and dispatch table of step {}", step + 1); },
        lateRank(describeRank, 0));
    Directive d = decode(body, layers_, options_.workers, 0);
    if (d.step != step) {
      RP_THROW(control::PeerError, "protocol error: expected rank 0's directive for step {}, got step {}", step + 1,
               d.step + 1);
    }
    return d;
  }
  if (collecting() && step >= 2) {
    // Iteration t-2 is the newest one every rank has surely finished (Note [Layer fences] bounds the overlap
    // between iterations to one).
    if (step - 2 >= collected_) collect(step - 2, describeRank);
    if (options_.replanEvery > 0 && step % options_.replanEvery == 0) replan(step);
    // The search of the next re-planning step runs during this one (Note [Background re-plan]).
    const bool search = options_.planner == schedule::PlannerKind::kSearch;
    if (search && options_.replanEvery > 0 && (step + 1) % options_.replanEvery == 0) startSearch();
  }
  if (stopRequested()) stop_ = true;
  const Directive d = decide(step);
  const std::vector<std::int64_t> body = encode(d);
  const auto words = static_cast<std::int64_t>(body.size());
  for (int r = 1; r < channel_.size(); ++r) {
    channel_.send(r, control::Tag::kDirective, &words, sizeof(words));
    channel_.send(r, control::Tag::kDirective, body.data(), body.size() * sizeof(std::int64_t));
  }
  return d;
}

void Coordination::report(std::int64_t step, const std::vector<double>& forwardMs,
                          const std::vector<double>& backwardMs) {
  if (!collecting()) return;
  std::vector<double> message{static_cast<double>(step)};
  message.insert(message.end(), forwardMs.begin(), forwardMs.end());
  message.insert(message.end(), backwardMs.begin(), backwardMs.end());
  if (message.size() != static_cast<std::size_t>(1 + 2 * layers_)) {
    RP_THROW(InternalError, "timing report of {} values for {} layers", message.size(), layers_);
  }
  if (channel_.rank() == 0) {
    own_[step] = std::move(message);
  } else {
    channel_.send(0, control::Tag::kTimings, message.data(), message.size() * sizeof(double));
  }
}

void Coordination::finish(std::int64_t steps, const std::function<std::string(int)>& describeRank) {
  if (channel_.rank() != 0) return;
  stopRequested();  // a signal that came after the last directive: nothing left to stop, nothing left queued
  if (!collecting()) return;
  while (collected_ < steps) collect(collected_, describeRank);
}

void Coordination::collect(std::int64_t step, const std::function<std::string(int)>& describeRank) {
  if (step != collected_) RP_THROW(InternalError, "timings of step {} collected out of order", step + 1);
  ++collected_;
  const auto L = static_cast<std::size_t>(layers_);
  std::vector<double> forward(L, 0.0), backward(L, 0.0);
  std::vector<bool> measured(L, false), measuredBack(L, false);
  for (int r = 0; r < channel_.size(); ++r) {
    std::vector<double> message(1 + 2 * L);
    if (r == 0) {
      const auto it = own_.find(step);
      if (it == own_.end()) RP_THROW(InternalError, "rank 0 did not report its timings of step {}", step + 1);
      message = std::move(it->second);
      own_.erase(it);
    } else {
      control::waitOrStall(
          options_.stall,
          [&](control::ControlChannel::Deadline deadline) {
            return channel_.receive(r, control::Tag::kTimings, message.data(), message.size() * sizeof(double),
                                    deadline);
          },
          [&] { return fmt::format("rank {}'s layer timings of step {}", r, step + 1); }, lateRank(describeRank, r));
    }
    if (message[0] != static_cast<double>(step)) {
      RP_THROW(control::PeerError, "protocol error: expected rank {}'s timings of step {}, got step {}", r, step + 1,
               message[0] + 1);
    }
    if (options_.dispatch == schedule::DispatchRule::kEarliestFinish && speedReports_ > 0) {
      speeds_.update(r, {message.begin() + 1, message.begin() + 1 + static_cast<std::ptrdiff_t>(L)},
                     {message.begin() + 1 + static_cast<std::ptrdiff_t>(L), message.end()});
    }
    for (std::size_t l = 0; l < L; ++l) {
      if (message[1 + l] >= 0) forward[l] += message[1 + l], measured[l] = true;
      if (message[1 + L + l] >= 0) backward[l] += message[1 + L + l], measuredBack[l] = true;
    }
  }
  ++speedReports_;  // the first iteration includes warm-up, as for the profile
  for (std::size_t l = 0; l < L; ++l) {
    forward[l] = measured[l] ? forward[l] / options_.nodes : -1.0;
    backward[l] = measuredBack[l] ? backward[l] / options_.nodes : -1.0;
  }
  profile_.update(forward, backward);
}

// Note [Background re-plan]: the plan search simulates thousands of candidate plans (0.5 s for Qwen3-1.7B's
// 30 layers, about 2 s for Qwen3-32B's 66 on 8 workers and 16 microbatches), and rank 0 decides every directive:
// searching in place would hold every rank's next iteration that long. So the search of a re-planning step s
// starts one directive early, at s - 1, on a thread of its own from the profile as it stands then, and runs
// while that iteration computes; the directive of step s takes its plan (waiting for the rest of the search,
// if any) and adopts it or not. Plans change at the same steps as with the reference partitioner, which is
// fast and re-plans in place at s.
void Coordination::replan(std::int64_t step) {
  if (searching_) {
    PendingPlan done = std::move(*searching_);
    searching_.reset();
    adopt(done.plan.get(), done.measured, step);
    return;
  }
  if (!profile_.ready()) return;
  const schedule::LayerCosts measured = profile_.applyTo(proxy_);
  RP_LOG_DEBUG("coordinator: measured fwd/bwd ms per layer at step {}: {}", step + 1, layerTimes(measured));
  adopt(schedule::choosePlan(options_.planner, measured, planTarget()), measured, step);
}

void Coordination::startSearch() {
  if (!profile_.ready()) return;
  const schedule::LayerCosts measured = profile_.applyTo(proxy_);
  const schedule::PlanTarget target = planTarget();
  searching_ = PendingPlan{
      std::async(std::launch::async,
                 [measured, target] { return schedule::choosePlan(schedule::PlannerKind::kSearch, measured, target); }),
      measured};
}

void Coordination::adopt(const schedule::Plan& candidate, const schedule::LayerCosts& measured, std::int64_t step) {
  // The predicted relative gain of the candidate over the current plan, by the measure the planner optimises.
  double gain = 0;
  if (options_.planner == schedule::PlannerKind::kSearch) {
    const double now = schedule::simulatedStep(measured, plan_, planTarget());
    gain = 1.0 - schedule::simulatedStep(measured, candidate, planTarget()) / now;
  } else {
    gain = 1.0 - schedule::planObjective(candidate, measured, options_.workers) /
                     schedule::planObjective(plan_, measured, options_.workers);
  }
  // Switch only for a predicted gain of 3% or more, so timing noise does not make the plan flap.
  if (candidate == plan_ || gain < 0.03) return;
  plan_ = candidate;
  changed_ = true;
  RP_LOG_INFO("pipeline: plan changed at step {} from measured times (fwd/bwd ms per layer: {}): {} ({} stages)",
              step + 1, layerTimes(measured), schedule::describe(plan_), plan_.stageCount());
}

int Coordination::workerOf(int rank) const {
  return options_.workerOfRank.empty() ? rank % options_.workers
                                       : options_.workerOfRank[static_cast<std::size_t>(rank)];
}

std::vector<double> Coordination::workerSpeeds() const {
  if (!speeds_.measured()) return std::vector<double>(static_cast<std::size_t>(options_.workers), 1.0);
  return workerSpeeds(speeds_.fit());
}

std::vector<double> Coordination::workerSpeeds(const SpeedModel::Fit& fit) const {
  std::vector<double> speed(static_cast<std::size_t>(options_.workers), 1.0);
  const std::vector<double>& ofRank = fit.speed;
  std::vector<double> slowest(speed.size(), 2.0);
  for (int r = 0; r < channel_.size(); ++r) {
    auto& s = slowest[static_cast<std::size_t>(workerOf(r))];
    s = std::min(s, ofRank[static_cast<std::size_t>(r)]);
  }
  const double fastest = *std::max_element(slowest.begin(), slowest.end());
  for (std::size_t w = 0; w < speed.size(); ++w) speed[w] = slowest[w] / fastest;
  return speed;
}

schedule::DispatchCosts Coordination::dispatchCosts() const {
  const schedule::LayerCosts pooled = profile_.applyTo(proxy_);  // the proxy until measured
  schedule::DispatchCosts known{pooled.forward, pooled.backward,
                                std::vector<double>(static_cast<std::size_t>(options_.workers), 1.0),
                                options_.microbatches, workerOf(0)};
  if (!speeds_.measured()) return known;
  const SpeedModel::Fit fit = speeds_.fit();  // once per directive: the speeds and the layer costs together
  known.speed = workerSpeeds(fit);
  // Once every layer has a fitted time, those (at the fastest worker's speed, as the speeds are relative to it).
  const bool complete = std::all_of(fit.forward.begin(), fit.forward.end(), [](double t) { return t > 0; }) &&
                        std::all_of(fit.backward.begin(), fit.backward.end(), [](double t) { return t > 0; });
  if (complete) known.forward = fit.forward, known.backward = fit.backward;
  return known;
}

// Whenever a worker's speed moved by more than a tenth since last logged (or since the 1 assumed before any
// measurement): the speeds and the jobs they earned.
void Coordination::logSpeeds(std::int64_t step, const std::vector<double>& speeds, const schedule::DispatchTable& t) {
  if (!speeds_.measured()) return;
  if (loggedSpeeds_.empty()) loggedSpeeds_.assign(speeds.size(), 1.0);  // the speeds assumed before measuring
  bool moved = false;
  for (std::size_t w = 0; !moved && w < speeds.size(); ++w) moved = std::abs(speeds[w] - loggedSpeeds_[w]) > 0.1;
  if (!moved) return;
  loggedSpeeds_ = speeds;
  std::vector<int> jobs(speeds.size(), 0);
  for (const auto& job : t.jobs) ++jobs[static_cast<std::size_t>(job.worker)];
  RP_LOG_INFO("dispatch: measured worker speeds at step {} (1 = the fastest): {:.2f}; jobs per worker this step: {}",
              step + 1, fmt::join(speeds, " "), fmt::join(jobs, " "));
}

Directive Coordination::decide(std::int64_t step) {
  Directive d;
  d.step = step;
  d.planChanged = changed_;
  d.stop = stop_;
  d.plan = plan_;
  if (options_.roundRobin && options_.dispatch == schedule::DispatchRule::kEarliestFinish) {
    const schedule::DispatchCosts known = dispatchCosts();
    d.table = schedule::dispatchEarliestFinish(plan_, known, counter_, clocks_);
    counter_ = d.table.counterEnd;
    logSpeeds(step, known.speed, d.table);
  } else if (options_.roundRobin) {
    d.table = schedule::dispatch(plan_, options_.workers, counter_);
    counter_ = d.table.counterEnd;
  } else {
    d.table = schedule::dispatchBound(plan_, options_.workers);
  }
  changed_ = false;
  return d;
}

}  // namespace rp::coordinator
