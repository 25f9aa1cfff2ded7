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

}  // namespace
}  // namespace tbfs
