// Whether this build runs under AddressSanitizer: memory-peak tests skip there (freed memory stays resident in
// ASan's quarantine, so there is no peak to measure).
#pragma once

namespace rp::test {

#if defined(__SANITIZE_ADDRESS__)
inline constexpr bool kAddressSanitizer = true;
#elif defined(__has_feature)
inline constexpr bool kAddressSanitizer = __has_feature(address_sanitizer);
#else
inline constexpr bool kAddressSanitizer = false;
#endif

}  // namespace rp::test
