// A pool of keep-alive S3 connections per endpoint; a connection serves one request at a time.
// Thread-safe.
#pragma once

#include <chrono>
#include <memory>
#include <mutex>
#include <vector>

#include "s3/s3_connection.h"

namespace objectcache::s3 {

// Idle keep-alive connections per endpoint, at most `max_idle` each; a connection is taken for
// one request at a time.
class ConnectionPool {
 public:
  ConnectionPool(std::vector<S3Endpoint> endpoints, S3Credentials credentials,
                 std::chrono::seconds timeout, size_t max_idle)
      : endpoints_(std::move(endpoints)),
        credentials_(std::move(credentials)),
        timeout_(timeout),
        max_idle_(max_idle),
        idle_(endpoints_.size()) {}

  size_t endpoints() const { return endpoints_.size(); }

  std::unique_ptr<S3Connection> Take(size_t endpoint) {
    std::lock_guard lock(mu_);
    auto& idle = idle_[endpoint];
    if (!idle.empty()) {
      std::unique_ptr<S3Connection> c = std::move(idle.back());
      idle.pop_back();
      return c;
    }
    return std::make_unique<S3Connection>(endpoints_[endpoint], credentials_, timeout_);
  }

  void Return(size_t endpoint, std::unique_ptr<S3Connection> c) {
    std::lock_guard lock(mu_);
    if (idle_[endpoint].size() < max_idle_) idle_[endpoint].push_back(std::move(c));
  }

 private:
  const std::vector<S3Endpoint> endpoints_;
  const S3Credentials credentials_;
  const std::chrono::seconds timeout_;
  const size_t max_idle_;
  std::mutex mu_;
  std::vector<std::vector<std::unique_ptr<S3Connection>>> idle_;  // guarded by mu_
};

}  // namespace objectcache::s3
