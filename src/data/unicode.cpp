#include "data/unicode.h"

#include <unicode/normalizer2.h>
#include <unicode/uchar.h>
#include <unicode/unistr.h>
#include <unicode/utf8.h>

#include "common/error.h"

namespace rp::data::unicode {

std::size_t sequenceLength(unsigned char lead) {
  if (lead < 0x80) return 1;
  if ((lead >> 5) == 0x6) return 2;
  if ((lead >> 4) == 0xE) return 3;
  if ((lead >> 3) == 0x1E) return 4;
  return 1;
}

namespace {

// The well-formed UTF-8 rule for a sequence starting with `lead` (Unicode Table 3-7): its length and the
// allowed range of its second byte; length 0 for bytes that cannot start a sequence.
struct LeadRule {
  std::size_t length;
  int low, high;
};

LeadRule leadRule(unsigned char lead) {
  if (lead < 0x80) return {1, 0, 0};
  if (lead >= 0xC2 && lead <= 0xDF) return {2, 0x80, 0xBF};
  if (lead >= 0xE0 && lead <= 0xEF) return {3, lead == 0xE0 ? 0xA0 : 0x80, lead == 0xED ? 0x9F : 0xBF};
  if (lead >= 0xF0 && lead <= 0xF4) return {4, lead == 0xF0 ? 0x90 : 0x80, lead == 0xF4 ? 0x8F : 0xBF};
  return {0, 0, 0};
}

// How many bytes from s[i] belong to a well-formed prefix of the sequence s[i] starts (at least 1).
std::size_t wellFormedPrefix(std::string_view s, std::size_t i, const LeadRule& rule) {
  std::size_t k = 1;
  for (; k < rule.length && i + k < s.size(); ++k) {
    const auto b = static_cast<unsigned char>(s[i + k]);
    if (b < (k == 1 ? rule.low : 0x80) || b > (k == 1 ? rule.high : 0xBF)) break;
  }
  return k;
}

// Length of the valid UTF-8 sequence at s[i], or 0 when it is not one (overlongs and surrogates rejected).
std::size_t validSequenceAt(std::string_view s, std::size_t i) {
  const LeadRule rule = leadRule(static_cast<unsigned char>(s[i]));
  if (rule.length <= 1) return rule.length;
  return wellFormedPrefix(s, i, rule) == rule.length ? rule.length : 0;
}

// How many bytes of an invalid sequence at s[i] form its maximal prefix (replaced by one U+FFFD).
std::size_t invalidPrefixAt(std::string_view s, std::size_t i) {
  const LeadRule rule = leadRule(static_cast<unsigned char>(s[i]));
  return rule.length == 0 ? 1 : wellFormedPrefix(s, i, rule);
}

}  // namespace

bool isValidUtf8(std::string_view s) {
  for (std::size_t i = 0; i < s.size();) {
    const std::size_t len = validSequenceAt(s, i);
    if (len == 0) return false;
    i += len;
  }
  return true;
}

std::size_t characterAt(std::string_view s, std::size_t i, bool* valid) {
  const std::size_t len = validSequenceAt(s, i);
  if (valid != nullptr) *valid = len > 0;
  return len > 0 ? len : invalidPrefixAt(s, i);
}

std::string lossyUtf8(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size();) {
    const std::size_t len = validSequenceAt(s, i);
    if (len > 0) {
      out.append(s.substr(i, len));
      i += len;
    } else {
      out.append("\xEF\xBF\xBD");
      i += invalidPrefixAt(s, i);
    }
  }
  return out;
}

namespace {

const icu::Normalizer2& nfcInstance() {
  UErrorCode status = U_ZERO_ERROR;
  const icu::Normalizer2* normalizer = icu::Normalizer2::getNFCInstance(status);
  if (U_FAILURE(status)) RP_THROW(SystemError, "ICU NFC normalizer unavailable: {}", u_errorName(status));
  return *normalizer;
}

icu::UnicodeString utf16(std::string_view text) {
  return icu::UnicodeString::fromUTF8(icu::StringPiece(text.data(), static_cast<int32_t>(text.size())));
}

// The code point at text[i], or -1 for an ill-formed sequence.
UChar32 codePointAt(std::string_view text, std::size_t i) {
  int32_t at = static_cast<int32_t>(i);
  UChar32 c = 0;
  U8_NEXT(reinterpret_cast<const uint8_t*>(text.data()), at, static_cast<int32_t>(text.size()), c);
  return c;
}

// The code point ending at text[end - 1] and where it starts.
std::pair<UChar32, std::size_t> codePointBefore(std::string_view text, std::size_t end) {
  int32_t at = static_cast<int32_t>(end);
  UChar32 c = 0;
  U8_PREV(reinterpret_cast<const uint8_t*>(text.data()), 0, at, c);
  return {c, static_cast<std::size_t>(at)};
}

bool isWordCharacter(UChar32 c) {
  return c >= 0 && (u_hasBinaryProperty(c, UCHAR_ALPHABETIC) || u_hasBinaryProperty(c, UCHAR_JOIN_CONTROL) ||
                    (U_GET_GC_MASK(c) & (U_GC_M_MASK | U_GC_ND_MASK | U_GC_PC_MASK)) != 0);
}

bool isWhiteSpace(UChar32 c) {
  return c >= 0 && u_isUWhiteSpace(c);
}

}  // namespace

bool isNfc(std::string_view text) {
  UErrorCode status = U_ZERO_ERROR;
  return nfcInstance().isNormalized(utf16(text), status) && U_SUCCESS(status);
}

bool nfcBoundaryBefore(std::string_view text, std::size_t i) {
  const UChar32 c = codePointAt(text, i);
  return c < 0 || nfcInstance().hasBoundaryBefore(c);  // ill-formed bytes are read as U+FFFD, a boundary
}

std::size_t leadingWhiteSpace(std::string_view text) {
  std::size_t i = 0;
  while (i < text.size() && isWhiteSpace(codePointAt(text, i))) i += characterAt(text, i);
  return i;
}

std::size_t trailingWhiteSpace(std::string_view text) {
  std::size_t end = text.size();
  while (end > 0) {
    const auto [c, start] = codePointBefore(text, end);
    if (!isWhiteSpace(c)) break;
    end = start;
  }
  return text.size() - end;
}

bool startsWithWordCharacter(std::string_view text) {
  return !text.empty() && isWordCharacter(codePointAt(text, 0));
}

bool endsWithWordCharacter(std::string_view text) {
  return !text.empty() && isWordCharacter(codePointBefore(text, text.size()).first);
}

std::string nfc(std::string_view text) {
  const icu::Normalizer2& normalizer = nfcInstance();
  const icu::UnicodeString input = utf16(text);
  UErrorCode status = U_ZERO_ERROR;
  if (normalizer.isNormalized(input, status) && U_SUCCESS(status)) return std::string(text);
  status = U_ZERO_ERROR;
  const icu::UnicodeString normalized = normalizer.normalize(input, status);
  if (U_FAILURE(status)) RP_THROW(InputError, "NFC normalization failed: {}", u_errorName(status));
  std::string out;
  normalized.toUTF8String(out);
  return out;
}

}  // namespace rp::data::unicode
