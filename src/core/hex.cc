#include "core/hex.h"

#include <array>
#include <cstring>

namespace objectcache {
namespace {

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

char* EncodeHexTo(const uint8_t* data, size_t size, char* out) {
  // Both digits of a byte from one table entry, stored together: a batch lookup writes the
  // names of thousands of keys, and a digit at a time (each store through a char*, which may
  // alias `data`, reloading the byte) took 2.4 ns a byte.
  static constexpr auto kPairs = [] {
    constexpr char kDigits[] = "0123456789abcdef";
    std::array<char, 512> pairs{};
    for (size_t b = 0; b < 256; ++b) {
      pairs[2 * b] = kDigits[b >> 4];
      pairs[2 * b + 1] = kDigits[b & 0xf];
    }
    return pairs;
  }();
  for (size_t i = 0; i < size; ++i) {
    std::memcpy(out + 2 * i, &kPairs[2 * size_t{data[i]}], 2);
  }
  return out + 2 * size;
}

std::string EncodeHex(const uint8_t* data, size_t size) {
  std::string out(2 * size, '0');
  EncodeHexTo(data, size, out.data());
  return out;
}

bool DecodeHex(std::string_view hex, uint8_t* out) {
  if (hex.size() % 2 != 0) return false;
  for (size_t i = 0; i < hex.size(); i += 2) {
    int hi = HexValue(hex[i]);
    int lo = HexValue(hex[i + 1]);
    if (hi < 0 || lo < 0) return false;
    out[i / 2] = static_cast<uint8_t>(hi << 4 | lo);
  }
  return true;
}

std::string EscapeControlBytes(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    const auto b = static_cast<uint8_t>(c);
    if (c == '\\') {
      out += "\\\\";
    } else if (b < 0x20 || b == 0x7f) {
      out += "\\x";
      char digits[2];
      EncodeHexTo(&b, 1, digits);
      out.append(digits, 2);
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace objectcache
