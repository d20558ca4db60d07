#include "core/hex.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cstdio>
#include <string>

namespace objectcache {
namespace {

// Every byte value, against printf's digits, and back through DecodeHex in either case.
TEST(HexTest, EveryByteEncodesToItsTwoLowercaseDigitsAndBack) {
  std::array<uint8_t, 256> bytes;
  for (size_t b = 0; b < bytes.size(); ++b) bytes[b] = static_cast<uint8_t>(b);
  const std::string hex = EncodeHex(bytes.data(), bytes.size());
  ASSERT_EQ(hex.size(), 512u);
  for (size_t b = 0; b < bytes.size(); ++b) {
    char expected[3];
    std::snprintf(expected, sizeof(expected), "%02x", static_cast<unsigned>(b));
    EXPECT_EQ(hex.substr(2 * b, 2), expected) << b;
  }
  std::array<uint8_t, 256> back{};
  ASSERT_TRUE(DecodeHex(hex, back.data()));
  EXPECT_EQ(back, bytes);
  std::string upper = hex;
  for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  back = {};
  ASSERT_TRUE(DecodeHex(upper, back.data()));
  EXPECT_EQ(back, bytes);
}

TEST(HexTest, EncodeHexToWritesExactlyTwoDigitsAByteAndReturnsTheirEnd) {
  const uint8_t bytes[] = {0x00, 0xab, 0xff};
  char out[8];
  std::fill(std::begin(out), std::end(out), '#');
  char* end = EncodeHexTo(bytes, 3, out);
  EXPECT_EQ(end, out + 6);
  EXPECT_EQ(std::string(out, 8), "00abff##");
  EXPECT_EQ(EncodeHexTo(bytes, 0, out), out);
}

TEST(HexTest, DecodeHexRefusesOddLengthsAndNonDigits) {
  uint8_t out[2];
  EXPECT_FALSE(DecodeHex("abc", out));
  EXPECT_FALSE(DecodeHex("0g", out));
  EXPECT_FALSE(DecodeHex("zz00", out));
}

TEST(HexTest, EscapeControlBytesLeavesOneLineOfPrintableText) {
  using namespace std::string_literals;
  EXPECT_EQ(EscapeControlBytes("plain name/ok"), "plain name/ok");
  EXPECT_EQ(EscapeControlBytes("a\nb\r\tc"), "a\\x0ab\\x0d\\x09c");
  EXPECT_EQ(EscapeControlBytes("\0\0"s), "\\x00\\x00");
  EXPECT_EQ(EscapeControlBytes("\x7f\x1f"), "\\x7f\\x1f");
  // A backslash is doubled, so an escape in the output always stands for a byte of the input.
  EXPECT_EQ(EscapeControlBytes("\\x0a"), "\\\\x0a");
  EXPECT_EQ(EscapeControlBytes("caf\xc3\xa9 \xe4\xb8\xad"), "caf\xc3\xa9 \xe4\xb8\xad");
  for (int b = 0; b < 256; ++b) {
    const std::string out = EscapeControlBytes(std::string(1, static_cast<char>(b)));
    for (char c : out) {
      const auto u = static_cast<uint8_t>(c);
      EXPECT_TRUE(u >= 0x20 && u != 0x7f) << b;
    }
  }
}

}  // namespace
}  // namespace objectcache
