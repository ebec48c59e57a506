// UTF-8 helpers and Unicode normalization (ICU) for the tokenizer.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace rp::data::unicode {

// Length of the UTF-8 sequence starting with byte `lead` (1 for bytes that cannot start one).
std::size_t sequenceLength(unsigned char lead);
bool isValidUtf8(std::string_view text);
// Invalid sequences replaced by U+FFFD, as Rust's String::from_utf8_lossy does (HF's decoders).
std::string lossyUtf8(std::string_view bytes);
// NFC normalization; throws InputError when ICU rejects the text.
std::string nfc(std::string_view text);

}  // namespace rp::data::unicode
