#include "data/bpe.h"

#include <queue>
#include <tuple>

namespace rp::data {

std::vector<std::int32_t> applyMerges(std::vector<std::int32_t> symbols, const MergeTable& merges,
                                      std::vector<std::uint32_t>* lengths) {
  const int n = static_cast<int>(symbols.size());
  if (n < 2) return symbols;
  // Doubly linked list over positions; a merged-away position gets id -1.
  std::vector<int> prev(n), next(n);
  for (int i = 0; i < n; ++i) {
    prev[i] = i - 1;
    next[i] = i + 1 < n ? i + 1 : -1;
  }
  // (rank, left position, left id, right id): lazily invalidated entries are skipped when popped.
  using Entry = std::tuple<std::int32_t, int, std::int32_t, std::int32_t>;
  std::priority_queue<Entry, std::vector<Entry>, std::greater<>> queue;
  auto push = [&](int left) {
    const int right = next[left];
    if (left < 0 || right < 0) return;
    const auto it = merges.find({symbols[left], symbols[right]});
    if (it != merges.end()) queue.emplace(it->second.rank, left, symbols[left], symbols[right]);
  };
  for (int i = 0; i + 1 < n; ++i) push(i);
  while (!queue.empty()) {
    const auto [rank, left, leftId, rightId] = queue.top();
    queue.pop();
    const int right = next[left];
    if (symbols[left] != leftId || right < 0 || symbols[right] != rightId) continue;  // stale
    symbols[left] = merges.at({leftId, rightId}).result;
    symbols[right] = -1;
    if (lengths != nullptr) (*lengths)[left] += (*lengths)[right];
    next[left] = next[right];
    if (next[right] >= 0) prev[next[right]] = left;
    if (prev[left] >= 0) push(prev[left]);
    push(left);
  }
  std::vector<std::int32_t> out;
  std::vector<std::uint32_t> merged;
  for (int i = 0; i >= 0; i = next[i]) {
    out.push_back(symbols[i]);
    if (lengths != nullptr) merged.push_back((*lengths)[i]);
  }
  if (lengths != nullptr) *lengths = std::move(merged);
  return out;
}

}  // namespace rp::data
