#include "client/layer_stream.h"

#include <gtest/gtest.h>
#include <xxhash.h>

#include <cstring>
#include <random>

#include "core/byte_order.h"
#include "core/seeded_data.h"
#include "wire/layerwise_wire.h"

namespace objectcache::client {
namespace {

// Encodes a response with src/wire's record encoders, as the server does.
struct Encoded {
  std::string bytes;
  std::vector<std::string> layers;  // payload per layer
};

// Version 1 carries each frame's checksum, version 2 each slice's as its writer computed it.
// A failed layer is sent as the server sends one that failed to read: zeros after its header,
// with the failure's code in the trailer and an error record.
Encoded Encode(uint16_t version, uint32_t hits, uint32_t first, uint32_t count, uint64_t slice,
               int fail_layer = -1, int corrupt_layer = -1) {
  Encoded e;
  ByteWriter w;
  wire::PutResponseHeader({.version = version,
                           .hits = hits,
                           .first_layer = first,
                           .layer_count = count,
                           .slice_bytes = slice,
                           .keys = hits + 2},
                          &w);
  std::mt19937_64 rng(first * 31 + count);
  for (uint32_t l = first; l < first + count; ++l) {
    std::string payload = RandomBytes(rng, hits * slice);
    e.layers.push_back(payload);
    wire::PutFrameHeader({.layer = l, .chunks = hits, .payload_bytes = payload.size()}, &w);
    if (version == wire::kLayerwiseV2) {
      std::vector<uint64_t> sums;
      for (uint32_t j = 0; j < hits; ++j) sums.push_back(XXH3_64bits(&payload[j * slice], slice));
      wire::PutSliceChecksums(sums, &w);
    }
    const uint64_t sum =
        version == wire::kLayerwiseV2 ? 0 : XXH3_64bits(payload.data(), payload.size());
    if (static_cast<int>(l) == corrupt_layer) payload[payload.size() / 2] ^= 1;
    if (static_cast<int>(l) == fail_layer) std::fill(payload.begin(), payload.end(), '\0');
    w.Bytes(payload.data(), payload.size());
    wire::PutFrameTrailer({.status = static_cast<int>(l) == fail_layer ? 14u : 0u, .checksum = sum},
                          &w);
    if (static_cast<int>(l) == fail_layer) {
      const std::string msg =
          "Unavailable: chunk x: the store failed in layer " + std::to_string(l);
      wire::PutErrorRecord(14, msg, &w);
      break;
    }
  }
  e.bytes = std::move(w.str());
  return e;
}

struct DecodeRun {
  std::vector<std::string> regions;
  std::vector<std::pair<uint32_t, StatusCode>> events;
  Status feed, finish;
};

// How the body reaches the decoder: pushed (Feed), pulled (NextBuffer, then Commit of at most
// `piece` bytes written there, as a connection reading into place does), or alternating.
enum class Intake { kPush, kPull, kMixed };
constexpr Intake kIntakes[] = {Intake::kPush, Intake::kPull, Intake::kMixed};

DecodeRun Decode(const std::string& bytes, size_t piece, Intake intake = Intake::kPush) {
  DecodeRun run;
  LayerStreamDecoder d(
      [&](const LayerStreamHeader& h) -> Result<LayerPlacement> {
        run.regions.assign(h.layer_count, std::string(h.hits * h.slice_bytes, '\0'));
        LayerPlacement out;
        for (std::string& r : run.regions) {
          out.regions.push_back(std::as_writable_bytes(std::span(r)));
        }
        return out;
      },
      [&](uint32_t layer, const Status& s) { run.events.emplace_back(layer, s.code()); });
  bool pull = intake != Intake::kPush;
  for (size_t off = 0; off < bytes.size() && run.feed.ok();) {
    size_t n = std::min(piece, bytes.size() - off);
    if (pull) {
      const std::span<std::byte> room = d.NextBuffer();
      EXPECT_FALSE(room.empty());
      n = std::min(n, room.size());
      std::memcpy(room.data(), bytes.data() + off, n);
      run.feed = d.Commit(n);
    } else {
      run.feed = d.Feed(std::as_bytes(std::span(bytes).subspan(off, n)));
    }
    off += n;
    if (intake == Intake::kMixed) pull = !pull;
  }
  run.finish = d.Finish();
  return run;
}

class LayerStreamTest : public ::testing::TestWithParam<uint16_t> {
 protected:
  template <typename... Args>
  Encoded Encode(Args... args) {
    return client::Encode(GetParam(), args...);
  }
};

INSTANTIATE_TEST_SUITE_P(Versions, LayerStreamTest,
                         ::testing::Values(wire::kLayerwiseV1, wire::kLayerwiseV2),
                         [](const auto& p) { return "v" + std::to_string(p.param); });

TEST_P(LayerStreamTest, LayersArriveInOrderVerifiedInAnyPieces) {
  Encoded e = Encode(3, 4, 5, 1000);
  for (Intake intake : kIntakes) {
    for (size_t piece : {size_t{1}, size_t{7}, size_t{999}, size_t{4096}, e.bytes.size()}) {
      DecodeRun r = Decode(e.bytes, piece, intake);
      ASSERT_TRUE(r.finish.ok()) << piece << " " << r.finish.ToString();
      ASSERT_EQ(r.events.size(), 5u);
      for (uint32_t i = 0; i < 5; ++i) {
        EXPECT_EQ(r.events[i], std::make_pair(4 + i, StatusCode::kOk));
        EXPECT_EQ(r.regions[i], e.layers[i]);
      }
    }
  }
}

TEST_P(LayerStreamTest, ChunkOffsetsScatterSlicesInAnyPieces) {
  // Three chunks go to slots 4, 0 and 2 of a five-slot region (how a client spreading keys
  // over endpoints, or an engine's block table, places them).
  const uint64_t slice = 300;
  Encoded e = Encode(3, 0, 2, slice);
  const std::vector<uint64_t> slots = {4, 0, 2};
  for (size_t piece : {size_t{1}, size_t{299}, size_t{301}, e.bytes.size()}) {
    std::vector<std::string> regions(2, std::string(5 * slice, '\0'));
    LayerStreamDecoder d(
        [&](const LayerStreamHeader&) -> Result<LayerPlacement> {
          LayerPlacement p;
          for (std::string& r : regions) p.regions.push_back(std::as_writable_bytes(std::span(r)));
          for (uint64_t s : slots) p.chunk_offsets.push_back(s * slice);
          return p;
        },
        [](uint32_t, const Status&) {});
    for (size_t off = 0; off < e.bytes.size(); off += piece) {
      ASSERT_TRUE(d.Feed(std::as_bytes(std::span(e.bytes).subspan(
                             off, std::min(piece, e.bytes.size() - off))))
                      .ok());
    }
    ASSERT_TRUE(d.Finish().ok());
    for (uint32_t layer = 0; layer < 2; ++layer) {
      for (size_t j = 0; j < 3; ++j) {
        EXPECT_EQ(regions[layer].substr(slots[j] * slice, slice),
                  e.layers[layer].substr(j * slice, slice))
            << piece << " " << layer << " " << j;
      }
      EXPECT_EQ(regions[layer].substr(1 * slice, slice), std::string(slice, '\0'));
    }
  }
}

// A pulled room holds the current slice's rest and the slices that follow it in memory, up to
// 512 KiB; a slice placed elsewhere starts a room of its own.
TEST_P(LayerStreamTest, PulledRoomsSpanOnlySlicesThatFollowInMemory) {
  struct Case {
    uint64_t slice;
    uint32_t hits;
    std::vector<uint64_t> slots;      // of each hit, in slices; empty: back to back
    std::vector<size_t> first_rooms;  // the sizes of layer 0's payload rooms, in order
  };
  const Case cases[] = {
      {300, 4, {4, 0, 1, 2}, {300, 900}},
      {300, 4, {}, {1200}},
      {200 << 10, 4, {}, {512 << 10, 288 << 10}},  // at most 512 KiB a read
  };
  for (const Case& c : cases) {
    Encoded e = Encode(c.hits, 0, 2, c.slice);
    const uint64_t slots = c.slots.empty() ? c.hits : 5;
    std::vector<std::string> regions(2, std::string(slots * c.slice, '\0'));
    LayerStreamDecoder d(
        [&](const LayerStreamHeader&) -> Result<LayerPlacement> {
          LayerPlacement p;
          for (std::string& r : regions) p.regions.push_back(std::as_writable_bytes(std::span(r)));
          for (uint64_t s : c.slots) p.chunk_offsets.push_back(s * c.slice);
          return p;
        },
        [](uint32_t, const Status&) {});
    std::vector<size_t> rooms;
    for (size_t off = 0; off < e.bytes.size();) {
      const std::span<std::byte> room = d.NextBuffer();
      const auto* at = reinterpret_cast<const char*>(room.data());
      if (at >= regions[0].data() && at < regions[0].data() + regions[0].size()) {
        rooms.push_back(room.size());
      }
      const size_t n = std::min(room.size(), e.bytes.size() - off);
      std::memcpy(room.data(), e.bytes.data() + off, n);
      ASSERT_TRUE(d.Commit(n).ok());
      off += n;
    }
    ASSERT_TRUE(d.Finish().ok());
    EXPECT_EQ(rooms, c.first_rooms) << c.slice;
    for (uint32_t layer = 0; layer < 2; ++layer) {
      for (uint32_t j = 0; j < c.hits; ++j) {
        const uint64_t slot = c.slots.empty() ? j : c.slots[j];
        EXPECT_TRUE(regions[layer].substr(slot * c.slice, c.slice) ==
                    e.layers[layer].substr(j * c.slice, c.slice))
            << c.slice << " " << layer << " " << j;
      }
    }
  }
}

TEST_P(LayerStreamTest, CorruptFrameIsNeverReportedReady) {
  Encoded e = Encode(2, 0, 4, 512, -1, /*corrupt_layer=*/2);  // the first byte of chunk 1
  // Pieces within a slice, and pulled rooms that span every slice of a frame.
  for (auto [intake, piece] : {std::pair{Intake::kPush, size_t{100}},
                               {Intake::kPull, size_t{100}},
                               {Intake::kMixed, size_t{100}},
                               {Intake::kPull, e.bytes.size()}}) {
    DecodeRun r = Decode(e.bytes, piece, intake);
    EXPECT_EQ(r.finish.code(), StatusCode::kDataLoss);
    if (GetParam() == wire::kLayerwiseV2) {  // the slice, by chunk and layer
      EXPECT_NE(r.finish.message().find("layer 2: chunk 1: slice checksum mismatch"),
                std::string::npos)
          << r.finish.ToString();
    }
    ASSERT_EQ(r.events.size(), 3u);
    EXPECT_EQ(r.events[1], std::make_pair(1u, StatusCode::kOk));
    EXPECT_EQ(r.events[2], std::make_pair(2u, StatusCode::kDataLoss));
  }
}

TEST_P(LayerStreamTest, ServerFailureEndsTheStreamWithItsMessage) {
  Encoded e = Encode(2, 0, 4, 512, /*fail_layer=*/1);
  // The zeros of the failed frame are not taken for damage (v2 checks each slice): the server's
  // own error is what the caller gets.
  for (Intake intake : kIntakes) {
    DecodeRun r = Decode(e.bytes, 33, intake);
    EXPECT_EQ(r.finish.code(), StatusCode::kUnavailable) << r.finish.ToString();
    EXPECT_NE(r.finish.message().find("the store failed in layer 1"), std::string::npos);
    ASSERT_EQ(r.events.size(), 2u);
    EXPECT_EQ(r.events[0], std::make_pair(0u, StatusCode::kOk));
    EXPECT_EQ(r.events[1], std::make_pair(1u, StatusCode::kUnavailable));
  }
}

TEST_P(LayerStreamTest, TruncatedOrForeignStreamsFail) {
  Encoded e = Encode(2, 0, 3, 256);
  for (size_t cut : {size_t{0}, size_t{10}, size_t{40}, size_t{50}, e.bytes.size() - 1}) {
    DecodeRun r = Decode(e.bytes.substr(0, cut), 64);
    EXPECT_FALSE(r.finish.ok()) << cut;
    for (const auto& [layer, code] : r.events) {
      // Whatever was reported ready before the cut was complete and verified.
      if (code == StatusCode::kOk) {
        EXPECT_EQ(r.regions[layer], e.layers[layer]) << cut;
      }
    }
  }
  EXPECT_FALSE(Decode("HTTP/1.1 200 OK garbage, not a layer stream at all......", 8).finish.ok());
  EXPECT_FALSE(Decode(e.bytes + "extra", 64).finish.ok());
}

}  // namespace
}  // namespace objectcache::client
