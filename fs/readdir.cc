// Filesystem: folder listings, the merge of the backing folder and the store's entries.
#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <set>

#include "base/time_util.h"
#include "fs/filesystem.h"
#include "fs/filesystem_internal.h"
#include "spdlog/spdlog.h"
#include "store/classify.h"

namespace tbfs::fs {

int Filesystem::OpenDir(uint64_t ino, std::unique_ptr<DirHandle>* out) {
  InodeView v = inodes_.View(ino);
  if (v.kind == Kind::kColdFile) return -ENOTDIR;
  if (v.kind == Kind::kHot) {
    struct stat st;
    if (::fstat(v.fd->get(), &st) != 0) return Errno();
    if (!S_ISDIR(st.st_mode)) return -ENOTDIR;
  }
  *out = std::make_unique<DirHandle>();
  return 0;
}

int Filesystem::FillDir(uint64_t ino, DirHandle* dh) {
  dh->entries.clear();
  InodeView v = inodes_.View(ino);
  std::set<std::string> hot_names;
  dh->entries.push_back({".", S_IFDIR, v.shown_ino});
  dh->entries.push_back({"..", S_IFDIR, 1});  // d_ino 0 would hide it from readdir(3)
  if (v.kind == Kind::kHot) {
    int fd = ::openat(v.fd->get(), ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return Errno();
    struct stat dir_st;
    if (::fstat(fd, &dir_st) != 0) {
      int err = errno;
      ::close(fd);
      return -err;
    }
    DIR* dir = ::fdopendir(fd);
    if (dir == nullptr) {
      ::close(fd);
      return Errno();
    }
    while (struct dirent* de = ::readdir(dir)) {
      std::string_view n = de->d_name;
      if (n == "." || n == "..") continue;
      if (ino == InodeTable::kRootId && (n == options_.store_skip || n == store::kStoreDirName))
        continue;
      if (IsTransientName(n)) continue;
      hot_names.emplace(n);
      dh->entries.push_back({std::string(n), static_cast<mode_t>(DTTOIF(de->d_type)),
                             inodes_.HotDirentIno(dir_st.st_dev, de->d_ino)});
    }
    ::closedir(dir);
  }
  std::string rel;
  if (RelPath(ino, &rel) != 0) return 0;  // a folder gone from the logdir has no cold part
  std::vector<store::ChildEntry> cold;
  Status st = store_->ListChildren(rel, &cold);
  if (!st.ok()) return StoreError(st, EioSite::kReaddir);
  for (const auto& c : cold) {
    if (hot_names.count(c.name)) continue;  // hot wins
    bool dir = c.entry.kind() == storepb::Entry::DIR;
    dh->entries.push_back(
        {c.name, static_cast<mode_t>(dir ? S_IFDIR : S_IFREG),
         dir ? inodes_.ColdDirIno(JoinPath(rel, c.name)) : ColdIno(c.entry.file_id())});
  }
  if (!options_.store_skip.empty() && options_.store_skip.find('/') != std::string::npos) {
    std::erase_if(dh->entries, [&](const DirEntryOut& e) {
      return JoinPath(rel, e.name) == options_.store_skip;
    });
  }
  return 0;
}

}  // namespace tbfs::fs
