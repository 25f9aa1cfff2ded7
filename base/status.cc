#include "base/status.h"

#include <cstring>

namespace tbfs {

Status Status::FromErrno(int err, const std::string& op, const std::string& path) {
  Code code = err == ENOENT ? Code::kNotFound : Code::kIOError;
  return Status(code, op + " " + path + ": " + std::strerror(err), err);
}

std::string Status::ToString() const {
  if (ok()) return "OK";
  return msg_;
}

int Status::ToErrno() const {
  switch (code_) {
    case Code::kOk:
      return 0;
    case Code::kNotFound:
      return ENOENT;
    case Code::kCorruption:
      return EIO;
    case Code::kIOError:
      return errno_ != 0 ? errno_ : EIO;
    case Code::kInvalidArgument:
      return EINVAL;
    case Code::kNotSupported:
      return ENOTSUP;
    case Code::kBusy:
      return EBUSY;
    case Code::kAborted:
      return EAGAIN;
  }
  return EIO;
}

}  // namespace tbfs
