// RetrievalState: the work on the retrieval's own thread ends it with its status, whatever the
// work does, throwing included (which would otherwise end the engine's process).
#include "client/retrieval_state.h"

#include <gtest/gtest.h>

#include <new>
#include <string>
#include <vector>

namespace objectcache::client {
namespace {

TEST(RetrievalStateTest, WorkThatThrowsFailsTheRetrievalNotTheProcess) {
  std::vector<uint32_t> reported;
  {
    RetrievalState state({.first = 0, .last = 3},
                         [&](uint32_t layer, const Status&) { reported.push_back(layer); });
    state.Start([&]() -> Status {
      state.SetHits(1);
      state.LayerReady(0);
      throw std::bad_alloc();
    });
    const Status end = state.Wait();
    EXPECT_EQ(end.code(), StatusCode::kInternal);
    EXPECT_NE(end.message().find("bad_alloc"), std::string::npos) << end.ToString();
    EXPECT_TRUE(state.WaitForLayer(0).ok());
    EXPECT_EQ(state.WaitForLayer(1).code(), StatusCode::kInternal);  // the first not reached
  }  // joins the work's thread, the last to report
  EXPECT_EQ(reported, (std::vector<uint32_t>{0, 1}));
}

}  // namespace
}  // namespace objectcache::client
