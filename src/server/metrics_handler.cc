#include "server/metrics_handler.h"

namespace objectcache::server {

std::string RenderMetrics(const ServerMetrics& metrics, Store& store) {
  const StoreUsage u = store.Usage();
  return metrics.Render(u.objects, u.bytes, u.evictions);
}

asio::awaitable<void> MetricsHandler::Handle(HttpExchange& ex) {
  if (ex.method() == "GET" && ex.target() == "/metrics") {
    Headers h{{"Content-Type", "text/plain; version=0.0.4"}};
    (void)co_await ex.Respond(200, std::move(h), RenderMetrics(*metrics_, *store_));
  } else {
    ex.CloseAfterResponse();
    Headers h{{"Content-Type", "text/plain"}};
    (void)co_await ex.Respond(404, std::move(h), "only GET /metrics here\n");
  }
}

}  // namespace objectcache::server
