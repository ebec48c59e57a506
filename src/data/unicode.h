// UTF-8 helpers and Unicode normalization (ICU) for the tokenizer.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace rp::data::unicode {

// Length of the UTF-8 sequence starting with byte `lead` (1 for bytes that cannot start one).
std::size_t sequenceLength(unsigned char lead);
bool isValidUtf8(std::string_view text);
// Bytes of the character at text[i] as lossyUtf8 reads it: a valid sequence, or the maximal prefix of an invalid
// one (which it replaces by one U+FFFD); `valid` says which.
std::size_t characterAt(std::string_view text, std::size_t i, bool* valid = nullptr);
// Invalid sequences replaced by U+FFFD, as Rust's String::from_utf8_lossy does (HF's decoders).
std::string lossyUtf8(std::string_view bytes);
// NFC normalization; throws InputError when ICU rejects the text.
std::string nfc(std::string_view text);
bool isNfc(std::string_view text);
// Whether text before and after the character at text[i] can be NFC-normalized independently.
bool nfcBoundaryBefore(std::string_view text, std::size_t i);

// Bytes of Unicode White_Space (Rust's char::is_whitespace, regex \s) at the start / the end of `text`.
std::size_t leadingWhiteSpace(std::string_view text);
std::size_t trailingWhiteSpace(std::string_view text);
// Whether `text` starts / ends with a word character as Rust's regex \w has them (Alphabetic, marks, decimal
// digits, connector punctuation, join controls).
bool startsWithWordCharacter(std::string_view text);
bool endsWithWordCharacter(std::string_view text);

}  // namespace rp::data::unicode
