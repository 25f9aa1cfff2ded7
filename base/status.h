// Status and Result: how every tbfs layer reports failure.
//
// A Status is OK or carries a code and a one-line message that names the
// operation and the path it failed on ("open /x/y: No such file or
// directory"). Result<T> is a value or a non-OK Status. Both are cheap to
// move, [[nodiscard]], and never throw. Hot paths return them instead of
// raising exceptions. ToErrno() is the single mapping from a Status to the
// errno a POSIX caller (the FUSE adapters) sees.
#pragma once

#include <cerrno>
#include <optional>
#include <string>
#include <utility>

namespace tbfs {

enum class Code {
  kOk = 0,
  kNotFound,         // a path or key that does not exist
  kCorruption,       // bytes on disk are not what their format promises
  kIOError,          // a syscall failed; errno() holds its errno
  kInvalidArgument,  // the caller asked for something malformed
  kNotSupported,     // a format version or feature this build does not know
  kBusy,             // someone else holds the resource (a mount, a lock)
  kAborted,          // an operation gave up on purpose (changed file, ...)
};

class [[nodiscard]] Status {
 public:
  Status() = default;  // OK

  static Status OK() { return Status(); }
  static Status NotFound(std::string msg) { return {Code::kNotFound, std::move(msg)}; }
  static Status Corruption(std::string msg) { return {Code::kCorruption, std::move(msg)}; }
  static Status InvalidArgument(std::string msg) {
    return {Code::kInvalidArgument, std::move(msg)};
  }
  static Status NotSupported(std::string msg) { return {Code::kNotSupported, std::move(msg)}; }
  static Status Busy(std::string msg) { return {Code::kBusy, std::move(msg)}; }
  static Status Aborted(std::string msg) { return {Code::kAborted, std::move(msg)}; }
  // `msg` as it is, an I/O error whose errno (what a POSIX caller sees) is
  // `err`: for a sentence that names its cause (the strerror would repeat it).
  static Status IOError(int err, std::string msg) { return {Code::kIOError, std::move(msg), err}; }
  // "op path: strerror(err)"; ENOENT becomes kNotFound so callers can test it.
  static Status FromErrno(int err, const std::string& op, const std::string& path);

  bool ok() const { return code_ == Code::kOk; }
  bool IsNotFound() const { return code_ == Code::kNotFound; }
  bool IsCorruption() const { return code_ == Code::kCorruption; }
  Code code() const { return code_; }
  int sys_errno() const { return errno_; }
  const std::string& message() const { return msg_; }
  std::string ToString() const;
  // The errno a POSIX caller should see for this status (0 when OK).
  int ToErrno() const;

 private:
  Status(Code code, std::string msg, int err = 0)
      : code_(code), errno_(err), msg_(std::move(msg)) {}

  Code code_ = Code::kOk;
  int errno_ = 0;
  std::string msg_;
};

// A value of type T, or the Status that explains why there is none.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : value_(std::move(value)) {}          // NOLINT: implicit on purpose
  Result(Status status) : status_(std::move(status)) {}  // NOLINT: must not be OK

  bool ok() const { return value_.has_value(); }
  const Status& status() const { return status_; }
  T& value() & { return *value_; }
  const T& value() const& { return *value_; }
  T&& value() && { return std::move(*value_); }
  T* operator->() { return &*value_; }
  const T* operator->() const { return &*value_; }
  T& operator*() & { return *value_; }

 private:
  std::optional<T> value_;
  Status status_;
};

}  // namespace tbfs

// Returns the Status of `expr` from the enclosing function when it is not OK.
#define TBFS_RETURN_IF_ERROR(expr)       \
  do {                                   \
    ::tbfs::Status _tbfs_st = (expr);    \
    if (!_tbfs_st.ok()) return _tbfs_st; \
  } while (0)
