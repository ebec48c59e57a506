#include <gtest/gtest.h>

#include "data/bpe.h"

namespace rp::data {
namespace {

// Symbols: a=0 b=1 c=2, ab=3, bc=4, abc=5.
TEST(Bpe, LowestRankMergesFirst) {
  MergeTable merges;
  merges[{1, 2}] = {0, 4};  // "b c" has the best rank
  merges[{0, 1}] = {1, 3};
  merges[{0, 4}] = {2, 5};
  EXPECT_EQ(applyMerges({0, 1, 2}, merges), (std::vector<std::int32_t>{5}));
}

TEST(Bpe, TiesGoLeftmostAndMergedSymbolsMergeAgain) {
  MergeTable merges;
  merges[{0, 0}] = {0, 9};  // "a a"
  merges[{9, 9}] = {1, 10};
  // a a a -> (a a) a ; a a a a -> (aa)(aa) -> aaaa
  EXPECT_EQ(applyMerges({0, 0, 0}, merges), (std::vector<std::int32_t>{9, 0}));
  EXPECT_EQ(applyMerges({0, 0, 0, 0}, merges), (std::vector<std::int32_t>{10}));
}

TEST(Bpe, MergedTokensCarryTheBytesOfTheSymbolsTheyJoin) {
  MergeTable merges;
  merges[{0, 0}] = {0, 9};  // "a a"
  // a (1 byte) a (3 bytes: a multi-byte character) a (2) -> (a a) a
  std::vector<std::uint32_t> lengths{1, 3, 2};
  EXPECT_EQ(applyMerges({0, 0, 0}, merges, &lengths), (std::vector<std::int32_t>{9, 0}));
  EXPECT_EQ(lengths, (std::vector<std::uint32_t>{4, 2}));
}

TEST(Bpe, NoMergesLeavesSymbols) {
  EXPECT_EQ(applyMerges({2, 1, 0}, {}), (std::vector<std::int32_t>{2, 1, 0}));
  EXPECT_TRUE(applyMerges({}, {}).empty());
}

}  // namespace
}  // namespace rp::data
