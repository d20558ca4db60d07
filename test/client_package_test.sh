#!/usr/bin/env bash
# The C++ client library as an application takes it: `cmake --install BUILD --component dev`
# into a temporary prefix, then a program built against that prefix alone with
# find_package(ObjectCache) and ObjectCache::client. It hashes a prompt into chunk keys (the
# golden vector of docs/keys.md) and looks them up on an address where no server listens
# (Unavailable), so every library of the client links and runs.
#   test/client_package_test.sh BUILD_DIR
set -euo pipefail
build="$(cd "$1" && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cmake --install "$build" --component dev --prefix "$work/prefix" >/dev/null
mkdir "$work/app"
cat >"$work/app/CMakeLists.txt" <<'EOF'
cmake_minimum_required(VERSION 3.25)
project(app CXX)
set(CMAKE_CXX_STANDARD 23)
find_package(ObjectCache 0.1 REQUIRED)
add_executable(app main.cc)
target_link_libraries(app PRIVATE ObjectCache::client)
EOF
cat >"$work/app/main.cc" <<'EOF'
#include <objectcache/chunk_key.h>
#include <objectcache/client.h>
#include <objectcache/kv_layout.h>

#include <chrono>
#include <cstdio>
#include <numeric>
#include <string>
#include <vector>

int main() {
  auto preset = objectcache::FindModelPreset("llama-3.1-8b");
  if (!preset) return 2;
  objectcache::KeyNamespace ns("llama-3.1-8b", preset->layout);
  std::vector<uint32_t> tokens(16);
  std::iota(tokens.begin(), tokens.end(), 0u);
  std::vector<objectcache::ChunkKey> keys = ns.KeysForTokens(tokens);
  std::printf("%s\n", keys[0].ToHex().c_str());
  objectcache::ClientOptions options;
  options.endpoints = {"http://127.0.0.1:1"};
  options.bucket = "kv";
  options.retries = 0;
  options.timeout = std::chrono::seconds(5);
  auto client = objectcache::Client::Create(options);
  if (!client) return 3;
  auto hits = (*client)->Lookup(keys);
  std::printf("%s\n", hits ? "cached" : std::string(objectcache::StatusCodeName(hits.error().code())).c_str());
  return 0;
}
EOF
cmake -S "$work/app" -B "$work/app/build" -DCMAKE_PREFIX_PATH="$work/prefix" >/dev/null
cmake --build "$work/app/build" >/dev/null
out="$("$work/app/build/app")"
expected="$(printf '6d0f5c5d66016c150b2cafada81c8810\nUnavailable')"
if [ "$out" != "$expected" ]; then
  echo "client_package_test: the application printed:"
  echo "$out"
  echo "expected:"
  echo "$expected"
  exit 1
fi
echo "client_package_test: an application built against the installed client library runs"
