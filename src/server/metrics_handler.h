// The Prometheus endpoint on a port of its own (`serve --metrics-listen`): GET /metrics answers
// the server's metrics and the store's usage, unauthenticated, and every other request 404.
// Operators put it on loopback or a management network; the S3 port then answers no metrics.
//
// Thread-safe: reads atomics only.
#pragma once

#include "objectcache/store.h"
#include "server/http_server.h"
#include "server/metrics.h"

namespace objectcache::server {

class MetricsHandler final : public RequestHandler {
 public:
  // `store` and `metrics` (the S3 server's) must outlive the handler.
  MetricsHandler(Store* store, const ServerMetrics* metrics) : store_(store), metrics_(metrics) {}
  asio::awaitable<void> Handle(HttpExchange& exchange) override;

 private:
  Store* store_;
  const ServerMetrics* metrics_;
};

// The body of GET /metrics: the server's metrics and the store's usage.
std::string RenderMetrics(const ServerMetrics& metrics, Store& store);

}  // namespace objectcache::server
