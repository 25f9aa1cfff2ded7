// The attribute bits of a setattr request, with the values of libfuse's
// FUSE_SET_ATTR_* (fuse_ops.cc checks that they agree), so the core does
// not include FUSE headers.
#pragma once

namespace tbfs::fs {

inline constexpr int kSetMode = 1 << 0;
inline constexpr int kSetUid = 1 << 1;
inline constexpr int kSetGid = 1 << 2;
inline constexpr int kSetSize = 1 << 3;
inline constexpr int kSetAtime = 1 << 4;
inline constexpr int kSetMtime = 1 << 5;
inline constexpr int kSetAtimeNow = 1 << 7;
inline constexpr int kSetMtimeNow = 1 << 8;

}  // namespace tbfs::fs
