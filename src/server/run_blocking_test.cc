// RunBlocking hands a blocking call's result, or the exception it threw, back to the coroutine
// that awaits it; the pool's thread lives on to run the next call.
#include <gtest/gtest.h>

#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <new>
#include <string>
#include <vector>

#include "server/http_server.h"

namespace objectcache::server {
namespace {

TEST(RunBlockingTest, AThrownExceptionReachesTheCoroutineAndThePoolRunsOn) {
  asio::io_context io;
  asio::thread_pool pool(1);
  std::vector<std::string> seen;
  auto guard = asio::make_work_guard(io);
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        try {
          co_await RunBlocking(pool, []() -> Result<std::string> { throw std::bad_alloc(); });
          seen.push_back("returned");
        } catch (const std::bad_alloc&) {
          seen.push_back("bad_alloc");
        }
        Result<std::string> r =
            co_await RunBlocking(pool, [] { return Result<std::string>("the next call"); });
        seen.push_back(r.value_or("an error"));
        guard.reset();
      },
      asio::detached);
  io.run();
  pool.join();
  EXPECT_EQ(seen, (std::vector<std::string>{"bad_alloc", "the next call"}));
}

}  // namespace
}  // namespace objectcache::server
