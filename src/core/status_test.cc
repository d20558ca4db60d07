#include "objectcache/status.h"

#include <gtest/gtest.h>

#include <cerrno>
#include <new>

namespace objectcache {
namespace {

Result<int> Half(int v) {
  if (v % 2 != 0) return InvalidArgumentError("odd value " + std::to_string(v));
  return v / 2;
}

Result<int> Quarter(int v) {
  OC_ASSIGN_OR_RETURN(int half, Half(v));
  OC_ASSIGN_OR_RETURN(int quarter, Half(half));
  return quarter;
}

Status CheckEven(int v) {
  OC_RETURN_IF_ERROR(Half(v));
  return Status();
}

TEST(StatusTest, ResultCarriesValueOrError) {
  EXPECT_EQ(*Quarter(8), 2);
  Result<int> r = Quarter(6);
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(r.error().message(), "odd value 3");
  EXPECT_EQ(CheckEven(3).code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(CheckEven(4).ok());
}

TEST(StatusTest, AnnotatePrefixesContextAndKeepsCode) {
  Status s = DataLossError("checksum mismatch in layer 7").Annotate("reading chunk 3fa2");
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_EQ(s.ToString(), "DataLoss: reading chunk 3fa2: checksum mismatch in layer 7");
  EXPECT_TRUE(Status().Annotate("anything").ok());
}

TEST(StatusTest, AnExceptionBecomesAnInternalStatus) {
  EXPECT_TRUE(CallCatchingExceptions([] { return Status(); }).ok());
  EXPECT_EQ(CallCatchingExceptions([] { return NotFoundError("x"); }).code(),
            StatusCode::kNotFound);
  const Status thrown = CallCatchingExceptions([]() -> Status { throw std::bad_alloc(); });
  EXPECT_EQ(thrown.code(), StatusCode::kInternal);
  EXPECT_EQ(thrown.message(), "unexpected failure: std::bad_alloc");
  EXPECT_EQ(CallCatchingExceptions([]() -> Status { throw 7; }).code(), StatusCode::kInternal);
}

TEST(StatusTest, ErrnoMapsToCanonicalCodes) {
  EXPECT_EQ(ErrnoError("opening x", ENOENT).code(), StatusCode::kNotFound);
  EXPECT_EQ(ErrnoError("writing x", ENOSPC).code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(ErrnoError("opening x", EACCES).code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(ErrnoError("opening x", ENOENT).message(), "opening x: No such file or directory");
}

}  // namespace
}  // namespace objectcache
