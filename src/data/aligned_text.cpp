#include "data/aligned_text.h"

#include "data/unicode.h"

namespace rp::data {

AlignedText AlignedText::identity(std::string_view input, std::uint32_t base, bool tracked) {
  AlignedText out;
  out.text.assign(input);
  out.tracked = tracked;
  if (!tracked) return out;
  out.from.reserve(input.size());
  for (std::size_t i = 0; i < input.size();) {
    const std::size_t len = unicode::characterAt(input, i);
    const Span span{base + static_cast<std::uint32_t>(i), base + static_cast<std::uint32_t>(i + len)};
    out.from.insert(out.from.end(), len, span);
    i += len;
  }
  return out;
}

AlignedText AlignedText::slice(std::size_t pos, std::size_t len) const {
  AlignedText out = emptyLike();
  out.append(*this, pos, len);
  return out;
}

void AlignedText::append(std::string_view bytes, Span origin) {
  text.append(bytes);
  if (tracked) from.insert(from.end(), bytes.size(), origin);
}

void AlignedText::append(const AlignedText& other, std::size_t pos, std::size_t len) {
  text.append(other.text, pos, len);
  if (tracked)
    from.insert(from.end(), other.from.begin() + static_cast<std::ptrdiff_t>(pos),
                other.from.begin() + static_cast<std::ptrdiff_t>(pos + len));
}

}  // namespace rp::data
