// Status and Result: errors as values.
//
// Every fallible ObjectCache call returns a Status (no value) or a Result<T> (a value or a
// Status). No ObjectCache API throws. Codes follow the canonical set used by Abseil and gRPC;
// callers branch on the code, and the message says what was being done and to which key, for
// people. Unavailable means "the same call may succeed if retried"; FailedPrecondition means
// "do not retry until something changes"; DataLoss means bytes were corrupt.
//
// Status and Result are values: copyable, movable, and safe to use from any thread.
#pragma once

#include <expected>
#include <functional>
#include <string>
#include <string_view>
#include <utility>

namespace objectcache {

enum class StatusCode : int {
  kOk = 0,
  kCancelled = 1,
  kUnknown = 2,
  kInvalidArgument = 3,
  kDeadlineExceeded = 4,
  kNotFound = 5,
  kAlreadyExists = 6,
  kPermissionDenied = 7,
  kResourceExhausted = 8,
  kFailedPrecondition = 9,
  kAborted = 10,
  kOutOfRange = 11,
  kUnimplemented = 12,
  kInternal = 13,
  kUnavailable = 14,
  kDataLoss = 15,
  kUnauthenticated = 16,
};

// "NotFound", "DataLoss", ...
std::string_view StatusCodeName(StatusCode code);

// What a caller may branch on beyond the code, where one code has causes callers answer
// differently (the S3 server answers a tenant's quota 403 QuotaExceeded, a full disk 507).
// Kept through Annotate.
enum class StatusReason : int {
  kNone = 0,
  kQuotaExceeded = 1,  // ResourceExhausted: the writer's quota, not the store's room
};

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return Status(); }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  StatusReason reason() const { return reason_; }
  // A copy with `reason`. OK stays OK.
  Status WithReason(StatusReason reason) const {
    Status s = *this;
    if (!s.ok()) s.reason_ = reason;
    return s;
  }

  // "NotFound: reading chunk 3fa2...: no such object"
  std::string ToString() const;

  // Returns a copy whose message is prefixed by `context`: "context: message". Used to say
  // what was being done when a lower layer failed. OK stays OK.
  Status Annotate(std::string_view context) const;

  friend bool operator==(const Status& a, const Status& b) {
    return a.code_ == b.code_ && a.message_ == b.message_ && a.reason_ == b.reason_;
  }

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
  StatusReason reason_ = StatusReason::kNone;
};

Status InvalidArgumentError(std::string message);
Status NotFoundError(std::string message);
Status AlreadyExistsError(std::string message);
Status DataLossError(std::string message);
Status FailedPreconditionError(std::string message);
Status ResourceExhaustedError(std::string message);
Status OutOfRangeError(std::string message);
Status UnavailableError(std::string message);
Status InternalError(std::string message);
Status UnimplementedError(std::string message);
Status PermissionDeniedError(std::string message);

// fn(), or Internal naming what it threw (an allocation that failed, say): for work on a thread
// of its own, or a command's body, where an exception would end the process.
Status CallCatchingExceptions(const std::function<Status()>& fn);

// An OS error (errno) turned into the closest canonical code, with what was being done:
// ErrnoError("opening /data/x", ENOENT) -> NotFound "opening /data/x: No such file or directory".
Status ErrnoError(std::string_view context, int errno_value);

// A value of T, or the Status that says why there is none. Construct the error side from a
// Status directly: `return NotFoundError("...");`.
template <typename T>
class [[nodiscard]] Result : public std::expected<T, Status> {
  using Base = std::expected<T, Status>;

 public:
  using Base::Base;
  Result(Status status) : Base(std::unexpect, std::move(status)) {}  // NOLINT: implicit by design

  bool ok() const { return this->has_value(); }
  // The error status, or OK when there is a value.
  Status status() const { return this->has_value() ? Status() : this->error(); }
};

}  // namespace objectcache

// Early return of a failed Status or Result from a function returning Status or Result<U>.
#define OC_RETURN_IF_ERROR(expr)                                                       \
  do {                                                                                 \
    if (auto oc_status_ = ::objectcache::internal::ToStatus(expr); !oc_status_.ok()) { \
      return oc_status_;                                                               \
    }                                                                                  \
  } while (false)

#define OC_CONCAT_INNER(a, b) a##b
#define OC_CONCAT(a, b) OC_CONCAT_INNER(a, b)
// OC_ASSIGN_OR_RETURN(auto x, MakeX()); assigns the value or returns the error.
#define OC_ASSIGN_OR_RETURN(lhs, expr) \
  OC_ASSIGN_OR_RETURN_IMPL(OC_CONCAT(oc_result_, __LINE__), lhs, expr)
#define OC_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr)       \
  auto tmp = (expr);                                   \
  if (!tmp.has_value()) return std::move(tmp).error(); \
  lhs = std::move(*tmp)

namespace objectcache::internal {
inline Status ToStatus(Status s) { return s; }
template <typename T>
Status ToStatus(const Result<T>& r) {
  return r.status();
}
}  // namespace objectcache::internal
