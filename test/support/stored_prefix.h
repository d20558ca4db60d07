// A seeded prompt's chunks with random KV, stored through a Client: the data of the tests that
// retrieve it back from a cluster and compare every byte.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "core/seeded_data.h"
#include "objectcache/chunk_key.h"
#include "objectcache/chunk_object.h"
#include "objectcache/client.h"

namespace objectcache::test_support {

struct StoredPrefix {
  std::vector<ChunkKey> keys;
  std::vector<std::string> kv;  // each chunk's KV bytes, as stored
};

// `chunks` chunks of a prompt drawn from `seed`, stored through `writer`, which is flushed every
// `flush_every` chunks and at the end; the caller checks writer.Stats().stored.
inline StoredPrefix StoreRandomPrefix(Client& writer, const ModelPreset& model, size_t chunks,
                                      uint64_t seed, size_t flush_every) {
  std::mt19937_64 rng(seed);
  StoredPrefix p{
      .keys = KeyNamespace(model.name, model.layout)
                  .KeysForTokens(RandomTokens(rng, model.layout.tokens_per_chunk * chunks)),
      .kv = {}};
  for (size_t i = 0; i < p.keys.size(); ++i) {
    std::string kv = RandomBytes(rng, model.layout.ChunkKvBytes());
    writer.StoreAsync(p.keys[i], *EncodeChunkObject(model.layout, p.keys[i], AsBytes(kv)));
    p.kv.push_back(std::move(kv));
    if (i % flush_every == flush_every - 1) writer.Flush();
  }
  writer.Flush();
  return p;
}

}  // namespace objectcache::test_support
