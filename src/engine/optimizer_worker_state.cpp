// The optimizer's checkpoint state (optimizer_worker.h, "Checkpoints"): its slices of the masters, the weights
// ahead and the moments as float32, staged where the store holds them otherwise (bf16/fp16 weights, split masters:
// optim/adamw.h, Note [Split master]), and the tie bits a save takes out of v and gives back.
#include "engine/dtype_copy.h"
#include "engine/optimizer_worker.h"

namespace rp::engine {

std::vector<checkpoint::Slice> OptimizerWorker::stateSlices(std::int64_t steps, bool withWeights, Purpose purpose,
                                                            const checkpoint::Manifest* saved) {
  std::vector<checkpoint::Slice> out;
  releaseStagedWeights();
  std::size_t a = 0;  // the tensor's index in adamw_ (trainable tensors, in order)
  for (std::size_t i = 0; i < tensors_.size(); ++i) {
    const auto& t = tensors_[i];
    if (!t.trainable) continue;
    // The shard of the moments; of the masters and weights too when saving (Note [Sharded optimizer]).
    const std::size_t shardBegin = slices_[i].first + shards_[i].first, shardEnd = shardBegin + shards_[i].second;
    const std::size_t begin = purpose == Purpose::kSave ? shardBegin : slices_[i].first;
    const std::size_t end = purpose == Purpose::kSave ? shardEnd : slices_[i].second;
    auto add = [&](checkpoint::Kind kind, const std::string& name, std::size_t from, std::size_t to, float* data) {
      out.push_back({kind, name, t.shape, static_cast<std::int64_t>(from), static_cast<std::int64_t>(to - from), data});
    };
    if (t.masterLow != nullptr) {  // Note [Split master]: float32 staging (one version, unsharded: begin..end)
      auto& staged = stagedMasters_.emplace_back(a, std::vector<float>(end - begin));
      if (purpose == Purpose::kSave) {
        adamw_.readMaster(a, staged.second.data());
        takenTies_.emplace_back(a, adamw_.takeTieBits(a));  // v alone is saved; the release puts them back
      }
      add(checkpoint::Kind::kMaster, t.name, begin, end, staged.second.data());
    } else {
      add(checkpoint::Kind::kMaster, t.name, begin, end, t.master + begin);
    }
    // What iteration steps + ahead uploads: version (steps + ahead) mod V.
    for (int ahead = 0; withWeights && ahead < versions_; ++ahead) {
      const int version = static_cast<int>((steps + ahead) % versions_);
      std::uint8_t* weights = t.weights[static_cast<std::size_t>(version)];
      float* data;
      if (options_.dtype == c10::ScalarType::Float) {
        data = reinterpret_cast<float*>(weights) + begin;
      } else {
        auto& staged = stagedWeights_.emplace_back(StagedWeights{i, version, begin, std::vector<float>(end - begin)});
        widen(staged.values.data(), weights + begin * c10::elementSize(options_.dtype), end - begin, options_.dtype,
              false);
        data = staged.values.data();
      }
      add(checkpoint::Kind::kWeights, checkpoint::weightsAhead(t.name, ahead), begin, end, data);
    }
    moments_.add(adamw_, a, t.name, t.shape, shardBegin, shardEnd, purpose == Purpose::kRestore ? saved : nullptr, out);
    ++a;
  }
  return out;
}

std::vector<std::pair<std::uint64_t, std::uint64_t>> OptimizerWorker::tieBits() const {
  std::vector<std::pair<std::uint64_t, std::uint64_t>> out;
  std::size_t a = 0;  // the tensor's index in adamw_
  for (std::size_t i = 0; i < tensors_.size(); ++i) {
    if (!tensors_[i].trainable) continue;
    for (const std::size_t k : adamw_.tieBits(a++)) out.emplace_back(i, slices_[i].first + k);
  }
  return out;
}

std::size_t OptimizerWorker::stateBytes() const {
  std::size_t bytes = 0;
  for (const auto& g : grads_) bytes += g.size() * sizeof(float);
  for (std::size_t a = 0; a < adamw_.size(); ++a) {
    bytes += (adamw_.expAvg(a).size() + adamw_.expAvgSq(a).size() + adamw_.maxExpAvgSq(a).size() +
              adamw_.absmaxM(a).size() + adamw_.absmaxV(a).size()) *
                 sizeof(float) +
             adamw_.codesM(a).size() + adamw_.codesV(a).size();
  }
  return bytes;
}

void OptimizerWorker::restoreStagedWeights(const std::filesystem::path& dir, const checkpoint::Manifest& saved) {
  // The moments first: a split master's tie bits ride in the float32 v a conversion writes (Note [Split master]).
  moments_.convert(dir, saved);
  for (const auto& staged : stagedWeights_) {
    narrowInto(tensors_[staged.tensor].weights[static_cast<std::size_t>(staged.version)] +
                   staged.begin * c10::elementSize(options_.dtype),
               staged.values.data(), staged.values.size(), options_.dtype);
  }
  stagedWeights_.clear();
  for (const auto& [param, values] : stagedMasters_) adamw_.writeMaster(param, values.data());
  stagedMasters_.clear();
}

void OptimizerWorker::releaseStagedWeights() {
  stagedWeights_.clear();
  stagedMasters_.clear();
  for (const auto& [param, at] : takenTies_) adamw_.setTieBits(param, at);
  takenTies_.clear();
}

}  // namespace rp::engine
