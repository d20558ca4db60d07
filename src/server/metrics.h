// Server metrics in the Prometheus text exposition format (version 0.0.4).
//
// Counters and gauges are atomics; a histogram is a fixed set of atomic buckets. Updating is
// lock-free and safe from any thread; Render takes a consistent-enough snapshot for scraping.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

namespace objectcache::server {

// S3 operations, for per-operation labels.
enum class S3Op : int {
  kListBuckets,
  kCreateBucket,
  kHeadBucket,
  kDeleteBucket,
  kListObjects,
  kPutObject,
  kGetObject,
  kHeadObject,
  kDeleteObject,
  kDeleteObjects,
  kCopyObject,
  kCreateMultipart,
  kUploadPart,
  kCompleteMultipart,
  kAbortMultipart,
  kListParts,
  kBatchLookup,
  kLayerwise,
  kBatchStore,
  kPin,
  kOther,
  kCount
};
std::string_view S3OpName(S3Op op);

class LatencyHistogram {
 public:
  static constexpr std::array<double, 14> kBounds = {
      0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10};
  void Observe(double seconds);
  void Render(std::string_view name, std::string_view labels, std::string* out) const;

 private:
  std::array<std::atomic<uint64_t>, kBounds.size() + 1> buckets_{};
  std::atomic<uint64_t> count_{0};
  std::atomic<uint64_t> sum_micros_{0};
};

struct ServerMetrics {
  static constexpr int kOps = static_cast<int>(S3Op::kCount);
  std::array<std::atomic<uint64_t>, kOps> requests{};
  std::array<std::atomic<uint64_t>, kOps> errors{};
  std::array<LatencyHistogram, kOps> latency;
  std::atomic<uint64_t> bytes_received{0};
  std::atomic<uint64_t> bytes_sent{0};
  std::atomic<uint64_t> store_hits{0};
  std::atomic<uint64_t> store_misses{0};
  std::atomic<int64_t> open_connections{0};
  std::atomic<uint64_t> connections_total{0};
  std::atomic<uint64_t> rejected_requests{0};  // malformed, over a limit, or timed out
  std::atomic<uint64_t> tls_handshake_failures{0};

  // More series appended to the exposition (the tenants'); set before serving.
  std::function<std::string()> more_series;

  void Record(S3Op op, double seconds, bool error);
  // The whole exposition; `store_objects`, `store_bytes` and `store_evictions` come from the
  // store's Usage() at scrape time.
  std::string Render(uint64_t store_objects, uint64_t store_bytes, uint64_t store_evictions) const;
};

}  // namespace objectcache::server
