// Text carried through the tokenizer's steps (normalizers, pre-tokenizers) together with, for each of its bytes, the
// span of the input it came from, so that every token can say which input characters it covers — what Hugging Face
// tokenizers calls a NormalizedString's alignments, and what Tokenizer::encodeWithSpans reports.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace rp::data {

// A half-open byte range [begin, end) of the input text.
struct Span {
  std::uint32_t begin = 0, end = 0;
  bool operator==(const Span&) const = default;
};

struct AlignedText {
  std::string text;
  std::vector<Span> from;  // from[i]: the input characters byte i of `text` came from; empty when not tracked
  bool tracked = true;     // false: the spans are not kept (plain encode(), ~25% faster), cover() is {0, 0}

  // `input` as it is: each byte maps to the UTF-8 character holding it, offset by `base`.
  static AlignedText identity(std::string_view input, std::uint32_t base, bool tracked = true);
  // An empty text that tracks spans as this one does.
  AlignedText emptyLike() const {
    AlignedText out;
    out.tracked = tracked;
    return out;
  }

  bool empty() const { return text.empty(); }
  // Bytes [pos, pos + len) with their spans.
  AlignedText slice(std::size_t pos, std::size_t len) const;
  // Appends `bytes`, all of them coming from `origin` (text a step inserted or rewrote).
  void append(std::string_view bytes, Span origin);
  // Appends bytes [pos, pos + len) of `other` with their spans.
  void append(const AlignedText& other, std::size_t pos, std::size_t len);
  // The input covered by bytes [pos, pos + len) (len > 0): from the first one's begin to the last one's end.
  Span cover(std::size_t pos, std::size_t len) const {
    return tracked ? Span{from[pos].begin, from[pos + len - 1].end} : Span{};
  }
};

}  // namespace rp::data
