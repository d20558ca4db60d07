#include "objectcache/status.h"

#include <cerrno>
#include <cstring>
#include <exception>

#include "core/name_table.h"

namespace objectcache {

namespace {

constexpr NamedValue<StatusCode> kStatusCodeNames[] = {
    {StatusCode::kOk, "OK"},
    {StatusCode::kCancelled, "Cancelled"},
    {StatusCode::kUnknown, "Unknown"},
    {StatusCode::kInvalidArgument, "InvalidArgument"},
    {StatusCode::kDeadlineExceeded, "DeadlineExceeded"},
    {StatusCode::kNotFound, "NotFound"},
    {StatusCode::kAlreadyExists, "AlreadyExists"},
    {StatusCode::kPermissionDenied, "PermissionDenied"},
    {StatusCode::kResourceExhausted, "ResourceExhausted"},
    {StatusCode::kFailedPrecondition, "FailedPrecondition"},
    {StatusCode::kAborted, "Aborted"},
    {StatusCode::kOutOfRange, "OutOfRange"},
    {StatusCode::kUnimplemented, "Unimplemented"},
    {StatusCode::kInternal, "Internal"},
    {StatusCode::kUnavailable, "Unavailable"},
    {StatusCode::kDataLoss, "DataLoss"},
    {StatusCode::kUnauthenticated, "Unauthenticated"},
};
static_assert(ListsEveryValueInOrder(kStatusCodeNames));

}  // namespace

std::string_view StatusCodeName(StatusCode code) {
  return NameIn(kStatusCodeNames, code, "Unknown");
}

std::string Status::ToString() const {
  if (ok()) return "OK";
  std::string out(StatusCodeName(code_));
  out += ": ";
  out += message_;
  return out;
}

Status Status::Annotate(std::string_view context) const {
  if (ok()) return *this;
  std::string message(context);
  message += ": ";
  message += message_;
  return Status(code_, std::move(message)).WithReason(reason_);
}

Status InvalidArgumentError(std::string m) { return {StatusCode::kInvalidArgument, std::move(m)}; }
Status NotFoundError(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
Status AlreadyExistsError(std::string m) { return {StatusCode::kAlreadyExists, std::move(m)}; }
Status DataLossError(std::string m) { return {StatusCode::kDataLoss, std::move(m)}; }
Status FailedPreconditionError(std::string m) {
  return {StatusCode::kFailedPrecondition, std::move(m)};
}
Status ResourceExhaustedError(std::string m) {
  return {StatusCode::kResourceExhausted, std::move(m)};
}
Status OutOfRangeError(std::string m) { return {StatusCode::kOutOfRange, std::move(m)}; }
Status UnavailableError(std::string m) { return {StatusCode::kUnavailable, std::move(m)}; }
Status InternalError(std::string m) { return {StatusCode::kInternal, std::move(m)}; }
Status UnimplementedError(std::string m) { return {StatusCode::kUnimplemented, std::move(m)}; }
Status PermissionDeniedError(std::string m) {
  return {StatusCode::kPermissionDenied, std::move(m)};
}

Status CallCatchingExceptions(const std::function<Status()>& fn) {
  try {
    return fn();
  } catch (const std::exception& e) {
    return InternalError(std::string("unexpected failure: ") + e.what());
  } catch (...) {
    return InternalError("unexpected failure");
  }
}

Status ErrnoError(std::string_view context, int errno_value) {
  StatusCode code = StatusCode::kInternal;
  switch (errno_value) {
    case ENOENT:
    case ENOTDIR:
      code = StatusCode::kNotFound;
      break;
    case EEXIST:
      code = StatusCode::kAlreadyExists;
      break;
    case EACCES:
    case EPERM:
    case EROFS:
      code = StatusCode::kPermissionDenied;
      break;
    case ENOSPC:
    case EDQUOT:
    case EMFILE:
    case ENFILE:
    case ENOMEM:
      code = StatusCode::kResourceExhausted;
      break;
    case EINVAL:
    case ENAMETOOLONG:
      code = StatusCode::kInvalidArgument;
      break;
    case EAGAIN:
    case EINTR:
    case EBUSY:
    case ETIMEDOUT:
      code = StatusCode::kUnavailable;
      break;
    case EIO:
      code = StatusCode::kDataLoss;
      break;
    default:
      break;
  }
  std::string message(context);
  message += ": ";
  message += std::strerror(errno_value);
  return Status(code, std::move(message));
}

}  // namespace objectcache
