// The optimizer thread alone, on a store of plain buffers (one rank, threads as the workers): Note [Update by
// layer] — a sync step publishes each layer's weights as soon as that layer is updated, the first layer first,
// and the values are the whole step's (AdamW::step on the same gradients, clipped), bitwise, with the gradients
// read in place and their slots consumed only after the update (Note [Gradients read in place]); Note [Upload as
// published] and Note [Copy as the iteration starts] — async's copy of the masters runs as the iteration starts
// and publishes each layer as soon as that layer is copied.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "common/parallel.h"
#include "control/inproc/inproc_channel.h"
#include "engine/activity.h"
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

// One rank's store — layer 0 holds a tied embedding (also used by the last layer) and a small tensor; the deeper
// layers are large, so writing them takes a while after layer 0 is done — its fences, and the optimizer thread
// over them (one version of the weights: sync, or async with staleness 1).
struct OneRank {
  explicit OneRank(int staleness, control::StallPolicy stall = {60.0, 120.0})
      : fences(fenceMemory.data(), kLayers, 1, stall, &board) {
    const std::size_t big = std::size_t{1} << 21;
    store.push_back(makeTensor("embed", {0, kLayers - 1}, 4096, 1));
    store.push_back(makeTensor("layers.0.w", {0}, 1000, 2));
    for (int l = 1; l < kLayers; ++l) store.push_back(makeTensor(fmt::format("layers.{}.w", l), {l}, big, 3 + l));
    reference = store;
    options.adamw = {1e-3, 0.9, 0.999, 1e-8, 0.01, false, {}};
    options.threads = 1;
    options.schedule = {optim::ScheduleKind::kConstant, 1e-3, 0, 100, 0.0};
    options.gradClip = 1.0;
    options.staleness = staleness;
    options.dtype = c10::ScalarType::BFloat16;
    options.layers = kLayers;
    options.losses = {losses0.data(), losses1.data()};
    options.microbatches = 1;
    options.activity = &board;
    std::vector<OptimTensor> tensors;
    for (auto& t : store) {
      OptimTensor o{
          t.name,          t.layers, {reinterpret_cast<std::uint8_t*>(t.weights.data())}, t.master.data(), {{}},
          t.master.size(), true,     {static_cast<std::int64_t>(t.master.size())}};
      for (auto& slot : t.slots) o.slots[0].push_back(reinterpret_cast<std::uint8_t*>(slot.data()));
      tensors.push_back(std::move(o));
    }
    worker = std::make_unique<OptimizerWorker>(std::move(tensors), fences, options, node);
  }
  // A new step's gradients, the same in the store and in the reference.
  void newGradients(std::int64_t step) {
    for (std::size_t i = 0; i < store.size(); ++i) {
      fillGradients(store[i], static_cast<unsigned>(100 * step + i));
      fillGradients(reference[i], static_cast<unsigned>(100 * step + i));
    }
  }
  // The backward of iteration `step` is done: every layer's gradients, the fused stage's losses.
  void finishIteration(std::int64_t step) {
    for (int l = kLayers - 1; l >= 0; --l) fences.addDownload(l, step);
    fences.setFusedDone(step);
  }
  // The reference's global norm of its gradients.
  double referenceNorm() {
    std::vector<optim::GradBuffer> grads;
    for (auto& t : reference) grads.push_back({t.grad.data(), t.grad.size()});
    return std::sqrt(optim::sumOfSquares(grads));
  }

  std::vector<StoreTensor> store, reference;
  std::vector<std::int64_t> boardMemory = std::vector<std::int64_t>(ActivityBoard::regionBytes(1) / 8 + 1, 0);
  ActivityBoard board{boardMemory.data(), 1};  // what the optimizer thread is doing
  std::vector<std::int64_t> fenceMemory = std::vector<std::int64_t>(Fences::regionBytes(kLayers, 1) / 8 + 1, 0);
  Fences fences;
  control::InProcHub hub{1};
  control::InProcChannel node{hub, 0};
  std::vector<double> losses0 = std::vector<double>(1, 1.0), losses1 = std::vector<double>(1, 1.0);
  OptimizerOptions options;
  std::unique_ptr<OptimizerWorker> worker;
};

TEST(OptimizerWorker, SyncPublishesEachLayerAsSoonAsItIsUpdatedWithTheWholeStepsValues) {
  OneRank rank(/*staleness=*/0);
  auto [store, reference, fences] = std::tie(rank.store, rank.reference, rank.fences);
  optim::AdamW adamw(rank.options.adamw, optim::bestAdamWKernel());
  for (auto& t : reference) {
    adamw.add(t.name, t.master.data(), t.grad.data(), t.master.size(), t.weights.data(), optim::ModelCopy::kBFloat16);
  }
  int layerZeroFirst = 0;
  constexpr int kSteps = 3;
  for (std::int64_t step = 0; step < kSteps; ++step) {
    rank.newGradients(step);
    // What a next iteration's upload sees: when layer 0 is published, is the last layer still being updated?
    std::atomic<bool> ready{false}, done{false};
    bool lastStillPending = false;
    std::thread observer([&] {
      ready = true;
      while (!fences.copiedByAll(0, step + 1) && !done) {
      }
      lastStillPending = !fences.copiedByAll(kLayers - 1, step + 1);
    });
    // The next iteration's downloads, as early as the fences let them: each layer's slots overwritten (NaN) as
    // soon as they are marked consumed. The update reads them in place (Note [Gradients read in place]), so a mark
    // before the layer's update would show in its values.
    int consumedBeforeCopied = 0;
    std::thread nextDownloads([&] {
      for (int l = 0; l < kLayers; ++l) {
        while (!fences.consumedByAll(l, step + 1) && !done) {
        }
        if (done) return;
        consumedBeforeCopied += fences.copiedByAll(l, step + 1) ? 0 : 1;
        for (auto& t : store) {
          const auto use = std::find(t.layers.begin(), t.layers.end(), l);
          if (use != t.layers.end()) {
            auto& slot = t.slots[static_cast<std::size_t>(use - t.layers.begin())];
            std::fill(slot.begin(), slot.end(), std::uint16_t{0x7fc1});
          }
        }
      }
    });
    while (!ready) std::this_thread::yield();
    rank.worker->beginIteration(step, std::vector<std::int64_t>(kLayers, 0));  // sync: nothing to copy
    rank.worker->enqueue(step);
    rank.finishIteration(step);
    OptimizerResult result;
    try {
      result = rank.worker->waitFor(step);
    } catch (...) {
      done = true;
      observer.join();
      nextDownloads.join();
      throw;
    }
    nextDownloads.join();  // the step marks every layer consumed
    done = true;
    observer.join();
    EXPECT_EQ(consumedBeforeCopied, 0) << "step " << step << ": a layer's slots were consumed before its update";
    layerZeroFirst += lastStillPending ? 1 : 0;
    for (int l = 0; l < kLayers; ++l) EXPECT_TRUE(fences.copiedByAll(l, step + 1)) << "layer " << l;

    const double norm = rank.referenceNorm();
    EXPECT_EQ(result.gradNorm, norm) << "step " << step;
    adamw.step(1e-3, optim::clipCoefficient(norm, rank.options.gradClip));
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

// Async (staleness 1): as iteration t starts, the masters, W_t, are copied into the weights iteration t + 1
// uploads (Note [Copy as the iteration starts]), each layer published as soon as it is copied (Note [Upload as
// published]). The copy of a tensor waits for the uploads of the version it overwrites by every layer that uses
// it; holding back layer 2's upload holds back layer 2 and what comes after it (the next case: for good), but
// not layers 0 and 1, which are published with their final values. It waits for nothing else: not for step t's
// update to be queued.
TEST(OptimizerWorker, AsyncCopiesAsTheIterationStartsAndPublishesEachLayerAsSoonAsItIsCopied) {
  OneRank rank(/*staleness=*/1);
  auto [store, reference, fences] = std::tie(rank.store, rank.reference, rank.fences);
  constexpr int kHeld = 2;
  static_assert(kHeld > 1 && kHeld < kLayers - 1, "layers 0 and 1 (the tied embedding's other user is the last)");
  optim::AdamW adamw(rank.options.adamw, optim::bestAdamWKernel());
  for (auto& t : reference) adamw.add(t.name, t.master.data(), t.grad.data(), t.master.size());
  std::vector<std::int64_t> uploads(kLayers, 0);
  for (std::int64_t step = 0; step < 2; ++step) {
    for (auto& t : store) std::fill(t.weights.begin(), t.weights.end(), std::uint16_t{0x7fc1});  // NaN until copied
    uploads[kHeld] += 1;  // iteration `step` uploads layer 2 once; that upload has not landed yet
    rank.worker->beginIteration(step, uploads);

    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (!fences.copiedByAll(1, step + 1) && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    const bool early = fences.copiedByAll(0, step + 1) && fences.copiedByAll(1, step + 1);
    const bool held = !fences.copiedByAll(kHeld, step + 1) && !fences.copiedByAll(kLayers - 1, step + 1);
    for (std::size_t i = 0; i < 2 && early; ++i) {  // embed, layers.0.w: W_t rounded, as the upload will read it
      for (std::size_t k = 0; k < store[i].master.size(); ++k) {
        if (store[i].weights[k] != optim::toBFloat16(reference[i].master[k])) {
          ADD_FAILURE() << store[i].name << "[" << k << "] published before it was copied (step " << step << ")";
          break;
        }
      }
    }
    EXPECT_TRUE(early) << "step " << step << ": layers 0 and 1 were not published while layer 2's copy waited";
    EXPECT_TRUE(held) << "step " << step << ": a layer was published before the upload it overwrites had landed";
    fences.addUpload(kHeld, step);  // the upload lands: the copy goes on, with step t's update not yet queued
    const auto copied = [&] {
      for (int l = 0; l < kLayers; ++l) {
        if (!fences.copiedByAll(l, step + 1)) return false;
      }
      return true;
    };
    while (!copied() && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    ASSERT_TRUE(copied()) << "step " << step << ": the copy did not finish before the step's update was queued";
    for (std::size_t i = 0; i < store.size(); ++i) {  // every weight W_t rounded
      const std::size_t n = store[i].master.size();
      std::vector<std::uint16_t> rounded(n);
      for (std::size_t k = 0; k < n; ++k) rounded[k] = optim::toBFloat16(reference[i].master[k]);
      EXPECT_EQ(std::memcmp(store[i].weights.data(), rounded.data(), n * 2), 0) << store[i].name << " step " << step;
    }

    // The update after the copy: the masters are AdamW's.
    rank.newGradients(step);
    rank.worker->enqueue(step);
    rank.finishIteration(step);
    const OptimizerResult result = rank.worker->waitFor(step);
    const double norm = rank.referenceNorm();
    EXPECT_EQ(result.gradNorm, norm);
    adamw.step(1e-3, optim::clipCoefficient(norm, rank.options.gradClip));
    for (std::size_t i = 0; i < store.size(); ++i) {
      const std::size_t n = store[i].master.size();
      EXPECT_EQ(std::memcmp(store[i].master.data(), reference[i].master.data(), n * sizeof(float)), 0)
          << store[i].name << " step " << step;
    }
  }
}

// Note [Layer fences]: the copy never writes a layer whose last upload from that version has not landed — it
// waits for it until the stall timeout (0.1 s here) and fails naming it, with layers 0 and 1 published and
// layer 2 and the tied embedding's last layer not.
TEST(OptimizerWorker, AsyncCopyNeverPublishesALayerBeforeTheUploadItOverwritesLanded) {
  OneRank rank(/*staleness=*/1, {0.1, 0.1});
  std::vector<std::int64_t> uploads(kLayers, 0);
  uploads[2] = 1;  // iteration 0 uploads layer 2 once; that upload never lands
  rank.worker->beginIteration(0, uploads);
  std::string error;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (error.empty() && !rank.fences.copiedByAll(2, 1) && std::chrono::steady_clock::now() < deadline) {
    try {
      rank.worker->poll();  // rethrows the copy's error
    } catch (const control::PeerError& e) {
      error = e.what();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_NE(error.find("the uploads of layer 2 to reach 1 (it is 0)"), std::string::npos)
      << (error.empty() ? "the copy did not wait for layer 2's upload" : error);
  EXPECT_TRUE(rank.fences.copiedByAll(0, 1) && rank.fences.copiedByAll(1, 1)) << "layers 0 and 1 were not published";
  EXPECT_FALSE(rank.fences.copiedByAll(2, 1)) << "layer 2 was published before the upload it overwrites landed";
  EXPECT_FALSE(rank.fences.copiedByAll(kLayers - 1, 1)) << "a later layer was published before layer 2";
}

// A rank failing mid-iteration destroys its optimizer while the copy waits for uploads that will never come:
// the thread gives up at the fence's next poll instead of waiting out the stall timeout (60 s here). Destroyed
// once the activity board says the copy has begun: from there its only way out is that poll.
TEST(OptimizerWorker, ADestroyedWorkerStopsWaitingForUploads) {
  OneRank rank(/*staleness=*/1);
  std::vector<std::int64_t> uploads(kLayers, 1);  // none of these uploads will land
  rank.worker->beginIteration(0, uploads);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (rank.board.describe(0).find("optimizer: copy master -> weights (step 1)") == std::string::npos &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ASSERT_NE(rank.board.describe(0).find("optimizer: copy master -> weights (step 1)"), std::string::npos)
      << rank.board.describe(0);
  const auto start = std::chrono::steady_clock::now();
  rank.worker.reset();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
  EXPECT_FALSE(rank.fences.copiedByAll(0, 1));
}

// The nice values of this process's threads (/proc/self/task/<tid>/stat: the 19th field; the 2nd, the thread's
// name in parentheses, is skipped by the last ')').
std::vector<int> threadNices() {
  std::vector<int> nices;
  for (const auto& task : std::filesystem::directory_iterator("/proc/self/task")) {
    std::ifstream in(task.path() / "stat");
    std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const auto close = stat.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream fields(stat.substr(close + 2));  // field 3 onward
    std::string field;
    for (int f = 3; f <= 19 && fields >> field; ++f) {
      if (f == 19) nices.push_back(std::stoi(field));
    }
  }
  return nices;
}

// Note [Optimizer priority]: the optimizer thread runs below the priority of the thread that issues the jobs.
TEST(OptimizerWorker, RunsBelowThePriorityOfTheThreadThatIssuesTheJobs) {
  const int issuing = parallel::thisThreadsNice();
  OneRank rank(/*staleness=*/0);
  const int lowered = std::min(19, issuing + 10);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  std::vector<int> nices = threadNices();
  while (std::count(nices.begin(), nices.end(), lowered) == 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    nices = threadNices();
  }
  EXPECT_EQ(std::count(nices.begin(), nices.end(), lowered), 1) << "one thread at nice " << lowered;
  EXPECT_EQ(parallel::thisThreadsNice(), issuing);
}

}  // namespace
}  // namespace rp::engine
