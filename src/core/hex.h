// Hex text for keys and checksums: lowercase out, either case in.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace objectcache {

std::string EncodeHex(const uint8_t* data, size_t size);
// Writes the 2 * size digits at `out`; returns their end.
char* EncodeHexTo(const uint8_t* data, size_t size, char* out);

// Decodes exactly 2 * N digits into out[0..N). False (out unspecified) on any non-hex digit
// or an odd length.
bool DecodeHex(std::string_view hex, uint8_t* out);

}  // namespace objectcache
