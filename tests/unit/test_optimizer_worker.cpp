// The optimizer thread alone, on a store of plain buffers (one rank, threads as the workers): Note [Update by
// layer] — a sync step publishes each layer's weights as soon as that layer is updated, the first layer first,
// and the values are the whole step's (AdamW::step on the same gradients, clipped), bitwise.
#include <atomic>
#include <cmath>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "control/inproc/inproc_channel.h"
#include "engine/fences.h"
#include "engine/optimizer_worker.h"
#include "optim/adamw_simd.h"
#include "optim/grad_clip.h"

namespace rp::engine {
namespace {

constexpr int kLayers = 4;

// One trainable bfloat16 tensor in the store: its weights, float32 master and one gradient slot per use.
struct StoreTensor {
  std::string name;
  std::vector<int> layers;
  std::vector<std::uint16_t> weights;
  std::vector<float> master;
  std::vector<std::vector<std::uint16_t>> slots;  // per use, in `layers` order
  std::vector<float> grad;  // the reference: the uses' gradients summed in float32 (AdamW reads it in place)
};

StoreTensor makeTensor(std::string name, std::vector<int> layers, std::size_t n, unsigned seed) {
  StoreTensor t{std::move(name),      std::move(layers), std::vector<std::uint16_t>(n), std::vector<float>(n), {},
                std::vector<float>(n)};
  std::mt19937 gen(seed);
  std::normal_distribution<float> d;
  for (std::size_t k = 0; k < n; ++k) {
    t.master[k] = d(gen);
    t.weights[k] = optim::toBFloat16(t.master[k]);
  }
  t.slots.assign(t.layers.size(), std::vector<std::uint16_t>(n));
  return t;
}

// A new step's gradients: random bf16 per use, and their float32 sum as the optimizer widens them (the deepest
// use first, the others added to it).
void fillGradients(StoreTensor& t, unsigned seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> d(0.0f, 0.05f);
  for (std::size_t use = t.slots.size(); use-- > 0;) {
    for (std::size_t k = 0; k < t.grad.size(); ++k) {
      t.slots[use][k] = optim::toBFloat16(d(gen));
      const float x = optim::fromBFloat16(t.slots[use][k]);
      t.grad[k] = use + 1 == t.slots.size() ? x : t.grad[k] + x;
    }
  }
}

TEST(OptimizerWorker, SyncPublishesEachLayerAsSoonAsItIsUpdatedWithTheWholeStepsValues) {
  // Layer 0 holds a tied embedding (also used by the last layer) and a small tensor; the deeper layers are
  // large, so their update takes a while after layer 0 is published.
  const std::size_t big = std::size_t{1} << 21;
  std::vector<StoreTensor> store;
  store.push_back(makeTensor("embed", {0, kLayers - 1}, 4096, 1));
  store.push_back(makeTensor("layers.0.w", {0}, 1000, 2));
  for (int l = 1; l < kLayers; ++l) store.push_back(makeTensor(fmt::format("layers.{}.w", l), {l}, big, 3 + l));
  std::vector<StoreTensor> reference = store;

  std::vector<std::int64_t> fenceMemory(Fences::regionBytes(kLayers, 1) / 8 + 1, 0);
  Fences fences(fenceMemory.data(), kLayers, 1, {60.0, 120.0});
  control::InProcHub hub(1);
  control::InProcChannel node(hub, 0);
  std::vector<double> losses0(1, 1.0), losses1(1, 1.0);
  OptimizerOptions options;
  options.adamw = {1e-3, 0.9, 0.999, 1e-8, 0.01, false, {}};
  options.threads = 1;
  options.schedule = {optim::ScheduleKind::kConstant, 1e-3, 0, 100, 0.0};
  options.gradClip = 1.0;
  options.staleness = 0;
  options.dtype = c10::ScalarType::BFloat16;
  options.layers = kLayers;
  options.losses = {losses0.data(), losses1.data()};
  options.microbatches = 1;
  std::vector<OptimTensor> tensors;
  for (auto& t : store) {
    OptimTensor o{t.name,          t.layers, {reinterpret_cast<std::uint8_t*>(t.weights.data())}, t.master.data(), {{}},
                  t.master.size(), true,     {static_cast<std::int64_t>(t.master.size())}};
    for (auto& slot : t.slots) o.slots[0].push_back(reinterpret_cast<std::uint8_t*>(slot.data()));
    tensors.push_back(std::move(o));
  }
  OptimizerWorker worker(std::move(tensors), fences, options, node);

  optim::AdamW adamw(options.adamw, optim::bestAdamWKernel());
  for (auto& t : reference) {
    adamw.add(t.name, t.master.data(), t.grad.data(), t.master.size(), t.weights.data(), optim::ModelCopy::kBFloat16);
  }
  int layerZeroFirst = 0;
  constexpr int kSteps = 3;
  for (std::int64_t step = 0; step < kSteps; ++step) {
    for (std::size_t i = 0; i < store.size(); ++i) {
      fillGradients(store[i], static_cast<unsigned>(100 * step + i));
      fillGradients(reference[i], static_cast<unsigned>(100 * step + i));
    }
    // What a next iteration's upload sees: when layer 0 is published, is the last layer still being updated?
    std::atomic<bool> ready{false}, done{false};
    bool lastStillPending = false;
    std::thread observer([&] {
      ready = true;
      while (!fences.copiedByAll(0, step + 1) && !done) {
      }
      lastStillPending = !fences.copiedByAll(kLayers - 1, step + 1);
    });
    while (!ready) std::this_thread::yield();
    worker.enqueue(step, std::vector<std::int64_t>(kLayers, 0));
    for (int l = kLayers - 1; l >= 0; --l) fences.addDownload(l, step);
    fences.setFusedDone(step);
    OptimizerResult result;
    try {
      result = worker.waitFor(step);
    } catch (...) {
      done = true;
      observer.join();
      throw;
    }
    done = true;
    observer.join();
    layerZeroFirst += lastStillPending ? 1 : 0;
    for (int l = 0; l < kLayers; ++l) EXPECT_TRUE(fences.copiedByAll(l, step + 1)) << "layer " << l;

    std::vector<optim::GradBuffer> grads;
    for (auto& t : reference) grads.push_back({t.grad.data(), t.grad.size()});
    const double norm = std::sqrt(optim::sumOfSquares(grads));
    EXPECT_EQ(result.gradNorm, norm) << "step " << step;
    adamw.step(1e-3, optim::clipCoefficient(norm, options.gradClip));
    for (std::size_t i = 0; i < store.size(); ++i) {
      const std::size_t n = store[i].master.size();
      EXPECT_EQ(std::memcmp(store[i].master.data(), reference[i].master.data(), n * sizeof(float)), 0)
          << store[i].name << " at step " << step;
      EXPECT_EQ(std::memcmp(store[i].weights.data(), reference[i].weights.data(), n * 2), 0)
          << store[i].name << " at step " << step;
    }
  }
  // Publishing every layer after the whole update leaves a window of nanoseconds between layer 0 and the last;
  // by layer it is the update of three 2M-element layers, in every step.
  EXPECT_GE(layerZeroFirst, 1) << "layer 0 was never published before the last layer's update was done";
}

}  // namespace
}  // namespace rp::engine
