#include "core/xxh3.h"

#include <cstdint>
#include <new>
#include <string>

#include <gtest/gtest.h>

#include "core/seeded_data.h"

namespace objectcache {
namespace {

// Every size class XXH3 treats apart (0, 1-3, 4-8, 9-16, 17-128, 129-240, longer, and past its
// 1024-byte stripes and blocks), at odd alignments, against libxxhash itself.
TEST(Xxh3Test, GivesLibxxhashsValues) {
  const std::string buf = SeededBytes(300000, 7);
  for (size_t size : {0, 1, 3, 4, 8, 9, 16, 17, 128, 129, 240, 241, 1023, 1024, 1025, 4096, 65536,
                      65537, 262144}) {
    for (size_t at : {0, 1, 13, 64}) {
      EXPECT_EQ(Xxh3(buf.data() + at, size), XXH3_64bits(buf.data() + at, size))
          << size << " at " << at;
    }
  }
  std::printf("AVX2 code in use: %s\n", Xxh3UsesAvx2() ? "yes" : "no");
}

TEST(Xxh3Test, StreamGivesTheSameValueHoweverTheBytesAreCut) {
  const std::string buf = SeededBytes(200000, 11);
  for (size_t size : {0, 5, 240, 1024, 65536, 200000}) {
    const uint64_t want = XXH3_64bits(buf.data(), size);
    for (size_t piece : {1, 7, 64, 1000, 4096, 65536}) {
      if (piece > 4096 && size < piece) continue;
      Xxh3Stream s;
      for (size_t at = 0; at < size; at += piece)
        s.Update(buf.data() + at, std::min(piece, size - at));
      EXPECT_EQ(s.Digest(), want) << size << " in pieces of " << piece;
      s.Reset();
      s.Update(buf.data(), size);
      EXPECT_EQ(s.Digest(), want) << size << " after a reset";
    }
  }
}

// A stream wherever it is placed (coroutine frames give 16-byte alignment at most).
TEST(Xxh3Test, StreamWorksAtAnyPlacement) {
  std::string data(70000, 'k');
  const uint64_t want = XXH3_64bits(data.data(), data.size());
  alignas(64) unsigned char room[sizeof(Xxh3Stream) + 64];
  for (size_t at : {0, 8, 16, 24, 32, 48}) {
    auto* s = new (room + at) Xxh3Stream();
    s->Update(data.data(), data.size());
    EXPECT_EQ(s->Digest(), want) << at;
    s->~Xxh3Stream();
  }
}

}  // namespace
}  // namespace objectcache
