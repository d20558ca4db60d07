// The server in this process, driven over sockets on 127.0.0.1, where a test needs to reach
// inside it: a handler ending a response it never began (that crashed the process), and the
// batch store's all-or-nothing promise when a commit fails halfway (docs/wire-format.md), over a
// memory store wrapped to fail one chosen commit.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <memory>
#include <string>

#include "core/byte_order.h"
#include "server/http_server.h"
#include "server/s3_handler.h"
#include "store/forwarding_store.h"
#include "store/memory/memory_store.h"
#include "wire/batch_store_wire.h"

namespace objectcache {
namespace {

// A memory store whose `fail_at`-th commit (counting from 1) fails.
class FailingCommitStore final : public ForwardingStore {
 public:
  explicit FailingCommitStore(int fail_at) : ForwardingStore(NewMemoryStore()), fail_at_(fail_at) {}

  std::string Uri() const override { return "failing+" + ForwardingStore::Uri(); }
  Result<std::unique_ptr<ObjectWriter>> NewWriter(std::string_view k,
                                                  const PutOptions& o) override {
    OC_ASSIGN_OR_RETURN(std::unique_ptr<ObjectWriter> w, ForwardingStore::NewWriter(k, o));
    return std::unique_ptr<ObjectWriter>(new Writer(std::move(w), this));
  }

 private:
  class Writer final : public ObjectWriter {
   public:
    Writer(std::unique_ptr<ObjectWriter> w, FailingCommitStore* s) : w_(std::move(w)), s_(s) {}
    Status Append(std::span<const std::byte> b) override { return w_->Append(b); }
    Status SetAttributes(std::string a) override { return w_->SetAttributes(std::move(a)); }
    uint64_t bytes_written() const override { return w_->bytes_written(); }
    Status Commit() override {
      if (++s_->commits_ == s_->fail_at_) return UnavailableError("injected commit failure");
      return w_->Commit();
    }

   private:
    std::unique_ptr<ObjectWriter> w_;
    FailingCommitStore* s_;
  };

  const int fail_at_;
  std::atomic<int> commits_{0};
};

// One request on a fresh connection; the whole response.
std::string Exchange(uint16_t port, const std::string& request) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  EXPECT_EQ(::send(fd, request.data(), request.size(), MSG_NOSIGNAL),
            static_cast<ssize_t>(request.size()));
  std::string reply;
  char buf[4096];
  for (ssize_t n; (n = ::recv(fd, buf, sizeof(buf), 0)) > 0;) reply.append(buf, n);
  ::close(fd);
  return reply;
}

std::string Request(const std::string& method, const std::string& target, const std::string& body) {
  return method + " " + target + " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n" +
         "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
}

std::string BatchBody(const std::vector<std::pair<std::string, std::string>>& objects) {
  ByteWriter w;
  for (const auto& [key, value] : objects) wire::PutBatchRecord(key, value, &w);
  wire::PutBatchEnd(&w);
  return w.str();
}

// Ends a response it never began on /bug; answers 200 elsewhere.
class BuggyHandler final : public server::RequestHandler {
 public:
  boost::asio::awaitable<void> Handle(server::HttpExchange& ex) override {
    if (ex.target() == "/bug") {
      end_status = co_await ex.EndResponse();
      co_return;
    }
    server::Headers h;
    (void)co_await ex.Respond(200, std::move(h), "fine");
  }
  Status end_status;
};

TEST(HttpServerTest, EndingAResponseNeverBegunIsAnErrorNotACrash) {
  // Regression: a ranged GET past u64 ended a response that was never begun and segfaulted.
  server::ServerMetrics metrics;
  BuggyHandler handler;
  auto srv = server::HttpServer::Start({.port = 0}, &handler, &metrics);
  ASSERT_TRUE(srv.has_value()) << srv.error().ToString();
  EXPECT_EQ(Exchange((*srv)->port(), Request("GET", "/bug", "")), "");  // connection closed
  EXPECT_TRUE(Exchange((*srv)->port(), Request("GET", "/ok", "")).starts_with("HTTP/1.1 200"));
  (*srv)->Stop();  // joins the server's threads, one of which wrote end_status
  EXPECT_EQ(handler.end_status.code(), StatusCode::kInternal);
}

class BatchStoreTest : public ::testing::TestWithParam<int> {};

TEST_P(BatchStoreTest, ACommitFailingHalfwayLeavesNoneOfTheBatch) {
  const int fail_at = GetParam();
  FailingCommitStore store(fail_at);
  server::ServerMetrics metrics;
  server::S3Handler handler(&store, &metrics, server::S3Options{.anonymous = true});
  auto srv = server::HttpServer::Start({.port = 0}, &handler, &metrics);  // stops when destroyed
  ASSERT_TRUE(srv.has_value()) << srv.error().ToString();
  const uint16_t port = (*srv)->port();
  ASSERT_TRUE(Exchange(port, Request("PUT", "/bkt", "")).starts_with("HTTP/1.1 200"));
  // One object exists before the batch and is replaced by it.
  ASSERT_TRUE(Exchange(port, Request("PUT", "/bkt/b", "old")).starts_with("HTTP/1.1 200"));
  const std::string reply = Exchange(
      port, Request("POST", "/bkt?batch-store", BatchBody({{"a", "1"}, {"b", "2"}, {"c", "3"}})));
  Result<ListPage> page = store.List({.prefix = "bkt/"});
  ASSERT_TRUE(page.has_value());
  std::vector<std::string> names;
  for (const ObjectInfo& o : page->objects) names.push_back(o.key);
  if (fail_at == 5) {  // past the batch's commits: all three
    EXPECT_TRUE(reply.starts_with("HTTP/1.1 200")) << reply;
    EXPECT_EQ(names, (std::vector<std::string>{"bkt/a", "bkt/b", "bkt/c"}));
    EXPECT_EQ(*ReadWholeObject(store, "bkt/b"), "2");
    return;
  }
  EXPECT_TRUE(reply.starts_with("HTTP/1.1 503")) << reply;
  EXPECT_NE(reply.find("committed objects removed again"), std::string::npos) << reply;
  if (fail_at <= 3) {
    // The batch's "b" was never committed: the old one stays, and nothing else of the batch.
    EXPECT_EQ(names, (std::vector<std::string>{"bkt/b"}));
    EXPECT_EQ(*ReadWholeObject(store, "bkt/b"), "old");
  } else {
    // "b" had been replaced when "c" failed: it is removed with "a" (a miss, never a mix).
    EXPECT_TRUE(names.empty()) << names.size();
  }
}

// Writer commits: the object b (1), then the batch's a, b, c (2, 3, 4); 5 is never reached.
INSTANTIATE_TEST_SUITE_P(FailingCommit, BatchStoreTest, ::testing::Values(2, 3, 4, 5));

}  // namespace
}  // namespace objectcache
