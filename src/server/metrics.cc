#include "server/metrics.h"

#include <cstdio>

namespace objectcache::server {

std::string_view S3OpName(S3Op op) {
  static constexpr std::string_view kNames[] = {"ListBuckets",
                                                "CreateBucket",
                                                "HeadBucket",
                                                "DeleteBucket",
                                                "ListObjects",
                                                "PutObject",
                                                "GetObject",
                                                "HeadObject",
                                                "DeleteObject",
                                                "DeleteObjects",
                                                "CopyObject",
                                                "CreateMultipartUpload",
                                                "UploadPart",
                                                "CompleteMultipartUpload",
                                                "AbortMultipartUpload",
                                                "ListParts",
                                                "BatchLookup",
                                                "LayerwiseRetrieve",
                                                "BatchStore",
                                                "Pin",
                                                "Other"};
  static_assert(std::size(kNames) == static_cast<size_t>(S3Op::kCount));
  return kNames[static_cast<int>(op)];
}

void LatencyHistogram::Observe(double seconds) {
  size_t i = 0;
  while (i < kBounds.size() && seconds > kBounds[i]) ++i;
  buckets_[i]++;
  count_++;
  sum_micros_ += static_cast<uint64_t>(seconds * 1e6);
}

void LatencyHistogram::Render(std::string_view name, std::string_view labels,
                              std::string* out) const {
  uint64_t cumulative = 0;
  char line[256];
  for (size_t i = 0; i <= kBounds.size(); ++i) {
    cumulative += buckets_[i].load();
    if (i < kBounds.size()) {
      std::snprintf(line, sizeof(line), "%.*s_bucket{%.*s,le=\"%g\"} %llu\n",
                    static_cast<int>(name.size()), name.data(), static_cast<int>(labels.size()),
                    labels.data(), kBounds[i], static_cast<unsigned long long>(cumulative));
    } else {
      std::snprintf(line, sizeof(line), "%.*s_bucket{%.*s,le=\"+Inf\"} %llu\n",
                    static_cast<int>(name.size()), name.data(), static_cast<int>(labels.size()),
                    labels.data(), static_cast<unsigned long long>(cumulative));
    }
    *out += line;
  }
  std::snprintf(line, sizeof(line), "%.*s_sum{%.*s} %.6f\n%.*s_count{%.*s} %llu\n",
                static_cast<int>(name.size()), name.data(), static_cast<int>(labels.size()),
                labels.data(), sum_micros_.load() / 1e6, static_cast<int>(name.size()), name.data(),
                static_cast<int>(labels.size()), labels.data(),
                static_cast<unsigned long long>(count_.load()));
  *out += line;
}

void ServerMetrics::Record(S3Op op, double seconds, bool error) {
  const int i = static_cast<int>(op);
  requests[i]++;
  if (error) errors[i]++;
  latency[i].Observe(seconds);
}

std::string ServerMetrics::Render(uint64_t store_objects, uint64_t store_bytes,
                                  uint64_t store_evictions) const {
  std::string out;
  auto scalar = [&out](const char* name, const char* type, const char* help, double value) {
    char line[256];
    std::snprintf(line, sizeof(line), "# HELP %s %s\n# TYPE %s %s\n%s %.17g\n", name, help, name,
                  type, name, value);
    out += line;
  };
  auto per_op = [&out](const std::string& name, const char* help, const auto& counters) {
    out += "# HELP " + name + " " + help + "\n# TYPE " + name + " counter\n";
    for (int i = 0; i < kOps; ++i) {
      out += name + "{op=\"" + std::string(S3OpName(static_cast<S3Op>(i))) + "\"} " +
             std::to_string(counters[i].load()) + "\n";
    }
  };
  per_op("objectcache_requests_total", "S3 requests by operation.", requests);
  per_op("objectcache_request_errors_total", "S3 requests answered with an error.", errors);
  out +=
      "# HELP objectcache_request_seconds S3 request latency by operation.\n"
      "# TYPE objectcache_request_seconds histogram\n";
  for (int i = 0; i < kOps; ++i) {
    latency[i].Render("objectcache_request_seconds",
                      "op=\"" + std::string(S3OpName(static_cast<S3Op>(i))) + "\"", &out);
  }
  scalar("objectcache_received_bytes_total", "counter", "Request body bytes received.",
         static_cast<double>(bytes_received.load()));
  scalar("objectcache_sent_bytes_total", "counter", "Response body bytes sent.",
         static_cast<double>(bytes_sent.load()));
  scalar("objectcache_store_hits_total", "counter", "Object reads that found the object.",
         static_cast<double>(store_hits.load()));
  scalar("objectcache_store_misses_total", "counter", "Object reads that found nothing.",
         static_cast<double>(store_misses.load()));
  scalar("objectcache_store_evictions_total", "counter", "Objects evicted to stay under capacity.",
         static_cast<double>(store_evictions));
  scalar("objectcache_store_objects", "gauge", "Objects in the store.",
         static_cast<double>(store_objects));
  scalar("objectcache_store_bytes", "gauge", "Payload bytes in the store.",
         static_cast<double>(store_bytes));
  scalar("objectcache_open_connections", "gauge", "Open client connections.",
         static_cast<double>(open_connections.load()));
  scalar("objectcache_connections_total", "counter", "Client connections accepted.",
         static_cast<double>(connections_total.load()));
  scalar("objectcache_rejected_requests_total", "counter",
         "Requests refused as malformed, over a limit or too slow.",
         static_cast<double>(rejected_requests.load()));
  scalar("objectcache_tls_handshake_failures_total", "counter",
         "TLS connections whose handshake failed or timed out.",
         static_cast<double>(tls_handshake_failures.load()));
  if (more_series) out += more_series();
  return out;
}

}  // namespace objectcache::server
