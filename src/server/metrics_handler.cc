#include "server/metrics_handler.h"

namespace objectcache::server {

std::string RenderMetrics(const ServerMetrics& metrics, Store& store) {
  const StoreUsage u = store.Usage();
  return metrics.Render(u.objects, u.bytes, u.evictions);
}

Status StoreReady(Store& store) {
  // A record name ('.'-prefixed, store.h) that nothing ever stores.
  Result<ObjectInfo> probe = store.Stat(".objectcache-readiness-probe");
  if (probe.has_value() || probe.error().code() == StatusCode::kNotFound) return Status();
  return probe.error();
}

std::optional<OperationalEndpoint> FindOperationalEndpoint(std::string_view method,
                                                           std::string_view target) {
  if (method != "GET") return std::nullopt;
  if (target == "/metrics") return OperationalEndpoint::kMetrics;
  if (target == "/healthz") return OperationalEndpoint::kHealth;
  if (target == "/readyz") return OperationalEndpoint::kReady;
  return std::nullopt;
}

asio::awaitable<void> ServeOperationalEndpoint(OperationalEndpoint endpoint, HttpExchange& ex,
                                               Store& store, const ServerMetrics& metrics,
                                               asio::thread_pool& pool) {
  unsigned status = 200;
  std::string body;
  std::string type = "text/plain";
  switch (endpoint) {
    case OperationalEndpoint::kMetrics:
      type = "text/plain; version=0.0.4";
      body = RenderMetrics(metrics, store);
      break;
    case OperationalEndpoint::kHealth:
      body = "ok\n";
      break;
    case OperationalEndpoint::kReady: {
      const Status ready = co_await RunBlocking(pool, [&store] { return StoreReady(store); });
      if (ready.ok()) {
        body = "ready\n";
      } else {
        status = 503;
        body = "not ready: " + ready.ToString() + "\n";
      }
      break;
    }
  }
  Headers h{{"Content-Type", type}, {"Cache-Control", "no-store"}};
  (void)co_await ex.Respond(status, std::move(h), std::move(body));
}

asio::awaitable<void> MetricsHandler::Handle(HttpExchange& ex) {
  if (std::optional<OperationalEndpoint> e = FindOperationalEndpoint(ex.method(), ex.target())) {
    co_await ServeOperationalEndpoint(*e, ex, *store_, *metrics_, pool_);
  } else {
    ex.CloseAfterResponse();
    Headers h{{"Content-Type", "text/plain"}};
    (void)co_await ex.Respond(404, std::move(h), "only GET /metrics, /healthz and /readyz here\n");
  }
}

}  // namespace objectcache::server
