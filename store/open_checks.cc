// The checks a store's open makes before it changes anything
// (store/open_checks.h).
#include "store/open_checks.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/fs_util.h"
#include "fmt/format.h"
#include "store/format.h"
#include "store/rocks_env.h"
#include "store/store_dir.h"

namespace tbfs::store {

Status Damaged(const Status& st) {
  if (st.code() != Code::kCorruption) return st;
  const bool said = st.message().find("the store is damaged") != std::string::npos;
  return Status::Corruption(st.message() + (said ? " (" : " (the store is damaged: ") +
                            "tbfs fsck names what, and tbfs salvage writes out every intact file)");
}

Status CheckBeforeLock(const std::string& dir, const OpenOptions& options) {
  struct stat st;
  if (::stat(JoinPath(dir, "CURRENT").c_str(), &st) == 0 || CreationCutShort(dir)) {
    return Status::OK();
  }
  const int missing = ::stat(dir.c_str(), &st) == 0 ? 0 : errno;
  if (missing == 0) TBFS_RETURN_IF_ERROR(Damaged(CheckStoreFolder(dir)));
  if (!options.create_if_missing) {
    return Status::NotFound("no cold store at " + dir + " (nothing has been migrated yet)");
  }
  // A folder to be made: nothing may stand in the way (a file on the path,
  // a symbolic link that leads nowhere).
  if (missing != 0 && missing != ENOENT) return Status::FromErrno(missing, "stat", dir);
  if (missing == 0) return Status::OK();
  std::string at = dir;
  while (!at.empty() && ::lstat(at.c_str(), &st) != 0) at = ParentPath(at);  // made on the way
  if (at.empty()) at = dir.starts_with("/") ? "/" : ".";
  if (::stat(at.c_str(), &st) != 0) {
    return Status::InvalidArgument("store " + dir + ": " + at +
                                   " is a symbolic link that leads nowhere");
  }
  // The nearest that is there is a folder (or stat would have said
  // ENOTDIR); this process must be able to make the store in it.
  if (::faccessat(AT_FDCWD, at.c_str(), W_OK | X_OK, AT_EACCESS) != 0) {
    return Status::FromErrno(errno, "make the store " + dir + " in", at);
  }
  return Status::OK();
}

Status CheckBeforeWriterOpen(const std::string& dir) {
  BackendOptions check;
  check.read_only = true;
  auto reader = OpenRocksBackend(dir, check);
  // A damaged log keeps a reader out, not a writer (it sets the log
  // aside, and any file it does not list: store/rocks_backend.cc); the
  // format record is then checked after its open (Init).
  if (!reader.ok() && !(reader.status().code() == Code::kCorruption &&
                        LooksLikeLogDamage(reader.status().message()))) {
    return Damaged(reader.status());
  }
  // A table file the engine lists and lacks (a MANIFEST cut back past a
  // compaction, a file removed) fails the writer's open only after it
  // wrote its own MANIFEST and set files aside (red team).
  if (reader.ok()) TBFS_RETURN_IF_ERROR(Damaged((*reader)->CheckTablesPresent()));
  std::string bytes;
  Status st = reader.ok() ? (*reader)->Get(Space::kMeta, kMetaInfoKey, &bytes) : Status::OK();
  // A store of a format this tbfs does not know is refused before the
  // writer's open rewrites the engine's MANIFEST and OPTIONS.
  if (st.ok()) {
    storepb::StoreInfo info;
    Status known = ParseInfo(bytes, dir, &info);
    if (known.code() == Code::kNotSupported) return known;  // one that does not parse: Init says
  }
  if (st.IsNotFound()) {
    st = Status::Corruption("store " + dir +
                            " opens without its format record (its engine "
                            "MANIFEST is damaged or cut short); nothing was changed");
  }
  return Damaged(st);
}

Status ParseInfo(std::string_view bytes, const std::string& dir, storepb::StoreInfo* info) {
  if (!info->ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
    return Status::Corruption("store record does not parse: store info");
  }
  const uint32_t v = info->format_version();
  if (v >= kFormatVersionV1 && v <= kNewestFormatVersion) return Status::OK();
  return Status::NotSupported(
      fmt::format("store {} has format version {}; this tbfs reads versions {} to {} only", dir, v,
                  kFormatVersionV1, kNewestFormatVersion));
}

}  // namespace tbfs::store
