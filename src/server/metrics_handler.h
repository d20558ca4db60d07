// The operational endpoints, unauthenticated: GET /metrics (Prometheus text: the server's
// metrics and the store's usage), GET /healthz (the process serves: always 200) and GET /readyz
// (the store answers: 200, else 503 with the store's error). The S3 port answers them to
// unsigned requests (a signed one is an ordinary request for a bucket of that name), /metrics
// only without --metrics-listen; MetricsHandler serves all three on that port of its own, and
// 404 to everything else. Operators put it on loopback or a management network.
//
// Thread-safe: reads atomics, and the store through its own thread-safe calls.
#pragma once

#include <boost/asio/thread_pool.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "objectcache/store.h"
#include "server/http_server.h"
#include "server/metrics.h"

namespace objectcache::server {

class MetricsHandler final : public RequestHandler {
 public:
  // `store` and `metrics` (the S3 server's) must outlive the handler.
  MetricsHandler(Store* store, const ServerMetrics* metrics)
      : store_(store), metrics_(metrics), pool_(1) {}
  asio::awaitable<void> Handle(HttpExchange& exchange) override;

 private:
  Store* store_;
  const ServerMetrics* metrics_;
  asio::thread_pool pool_;  // the readiness check: a store call that may block
};

// The body of GET /metrics: the server's metrics and the store's usage.
std::string RenderMetrics(const ServerMetrics& metrics, Store& store);

enum class OperationalEndpoint { kMetrics, kHealth, kReady };

// Which endpoint `method` and `target` name, if any (GET only; the path exactly, no query).
std::optional<OperationalEndpoint> FindOperationalEndpoint(std::string_view method,
                                                           std::string_view target);

// Answers `endpoint` on `exchange`; the readiness check runs on `pool`.
asio::awaitable<void> ServeOperationalEndpoint(OperationalEndpoint endpoint, HttpExchange& exchange,
                                               Store& store, const ServerMetrics& metrics,
                                               asio::thread_pool& pool);

// Whether the store answers: a Stat of a name that is never stored, for which NotFound is the
// healthy answer (a round trip to the OSDs on RADOS, to the server for s3://).
Status StoreReady(Store& store);

}  // namespace objectcache::server
