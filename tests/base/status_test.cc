#include "base/status.h"

#include <gtest/gtest.h>

#include <cerrno>

namespace tbfs {
namespace {

TEST(StatusErrno, MapsCodes) {
  EXPECT_EQ(Status::FromErrno(ENOENT, "open", "/x").ToErrno(), ENOENT);
  EXPECT_EQ(Status::FromErrno(EACCES, "open", "/x").ToErrno(), EACCES);
  EXPECT_EQ(Status::Corruption("bad").ToErrno(), EIO);
  EXPECT_EQ(Status::OK().ToErrno(), 0);
}

// A sentence that names its cause stays as it is, its errno kept.
TEST(StatusErrno, AnIoErrorKeepsItsSentence) {
  const Status st = Status::IOError(ENOSPC, "migrate: the store is full");
  EXPECT_EQ(st.message(), "migrate: the store is full");
  EXPECT_EQ(st.ToErrno(), ENOSPC);
  EXPECT_EQ(st.sys_errno(), ENOSPC);
}

}  // namespace
}  // namespace tbfs
