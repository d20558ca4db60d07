// Hex text for keys and checksums: lowercase out, either case in. And text that names what a
// client or a file sent, made fit for one line of a log or an error message.
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

// `text` with each control byte (0x00-0x1f, 0x7f) written as \xNN and each backslash as \\, so
// that a name that carries a newline or a NUL cannot start a line of its own or cut one short.
// Every other byte, UTF-8 included, is kept.
std::string EscapeControlBytes(std::string_view text);

}  // namespace objectcache
