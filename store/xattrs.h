// Extended attributes of cold files: what migration reads from a file and
// keeps in its manifest, what a write-back puts on the file again, and the
// POSIX access ACL's tie to the mode bits (the rules the kernel applies to
// an ACL on a disk filesystem, applied here to a cold file's manifest).
//
// An access ACL (system.posix_acl_access) is the kernel's xattr form:
// a u32 version (2), then 8-byte entries {u16 tag, u16 perm, u32 id},
// little endian, sorted by tag then id.
#pragma once

#include <sys/types.h>

#include <string>
#include <string_view>

#include "base/status.h"
#include "store/proto/store.pb.h"

namespace tbfs::store {

inline constexpr char kAclAccessXattr[] = "system.posix_acl_access";
inline constexpr char kAclDefaultXattr[] = "system.posix_acl_default";
// What one file's attributes may take in a manifest: more is refused (the
// file stays hot; a setxattr on a cold file fails with ENOSPC).
inline constexpr size_t kMaxXattrBytes = 64 << 10;
// What a set on a cold file may grow them to: what one 4 KiB attribute
// block of ext4 holds beside its headers, so that a write-back fits.
inline constexpr size_t kMaxNewXattrBytes = 3 << 10;

// What the attributes of `name` in the folder open as dir_fd take (names
// and values, as a manifest counts them), without opening it or following
// a symlink there; 0 when they cannot be read.
size_t XattrBytesAt(int dir_fd, const char* name);
// Every attribute of the file open as fd into m (replacing what m had).
Status ReadXattrs(int fd, const std::string& path, storepb::Manifest* m);
// Puts m's attributes on the file open as fd.
Status ApplyXattrs(int fd, const std::string& path, const storepb::Manifest& m);

// What the store's copy of a file says (`now`: owner, extended attributes,
// mode, times) where it differs from `was` (what the file is, or what it
// was copied from), given to the file open as fd: changes made through the
// mount while the file was aside or being rehydrated. The owner first (a
// chown clears set-id bits), then the attributes (an ACL sets the mode's
// group bits), then the mode, then the times. What cannot be given is
// logged with now's path.
void CarryChanges(int fd, const storepb::Manifest& was, const storepb::Manifest& now);

// The value of attribute `name` in m, or nullptr.
const std::string* FindXattr(const storepb::Manifest& m, std::string_view name);
// Sets (value != nullptr) or removes attribute `name` of m, with the
// kernel's flags (XATTR_CREATE, XATTR_REPLACE). 0 or a negative errno.
// Setting an access ACL sets the mode's permission bits from it, and an
// ACL the mode bits say in full is not kept (as on a disk filesystem).
int SetXattr(storepb::Manifest* m, std::string_view name, const std::string* value, int flags);
// A chmod of a file with an access ACL: the ACL's owner, group (or mask)
// and other entries take the new bits.
void ChmodXattrs(storepb::Manifest* m, mode_t mode);

// The mode's permission bits an access ACL gives (owner, mask or group,
// other), and whether the ACL holds only those three entries. False for a
// value that is not a valid access ACL.
bool AclModeBits(std::string_view acl, mode_t* bits, bool* minimal);

}  // namespace tbfs::store
