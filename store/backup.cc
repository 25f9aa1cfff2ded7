#include "store/backup.h"

#include <archive.h>
#include <archive_entry.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <ctime>
#include <memory>

#include "base/fs_util.h"
#include "fmt/format.h"

namespace tbfs::store {

namespace {

struct ArchiveCloser {
  void operator()(struct archive* a) const { archive_write_free(a); }
};
struct EntryFree {
  void operator()(struct archive_entry* e) const { archive_entry_free(e); }
};

Status ArchiveError(struct archive* a, const std::string& what) {
  const char* msg = archive_error_string(a);
  return Status::FromErrno(EIO, what, msg ? msg : "archive error");
}

}  // namespace

bool SameFilesystem(const std::string& a, const std::string& b) {
  struct stat sa, sb;
  return ::stat(a.c_str(), &sa) == 0 && ::stat(b.c_str(), &sb) == 0 && sa.st_dev == sb.st_dev;
}

Status WriteBackup(const std::string& logdir, const std::vector<std::string>& rel_paths,
                   const std::string& dir, std::string* archive_path,
                   std::atomic<uint64_t>* progress) {
  // Checked on the way and written beneath its fd: no symlink or folder
  // another user controls can send root's archive elsewhere.
  auto dfd = OpenOwnFolder(dir);
  if (!dfd.ok()) return dfd.status();
  time_t now = ::time(nullptr);
  struct tm tm;
  gmtime_r(&now, &tm);
  const std::string name =
      fmt::format("tbfs-backup-{:04}{:02}{:02}-{:02}{:02}{:02}-{}.tar.zst", tm.tm_year + 1900,
                  tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, ::getpid());
  const std::string final_path = JoinPath(dir, name);
  const std::string tmp_name = name + ".partial";
  const std::string tmp = final_path + ".partial";

  // 0600: the backup holds files whose modes kept others out.
  UniqueFd out(::openat(dfd->get(), tmp_name.c_str(),
                        O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
  if (!out.valid()) return Status::FromErrno(errno, "create", tmp);
  std::unique_ptr<struct archive, ArchiveCloser> a(archive_write_new());
  if (archive_write_add_filter_zstd(a.get()) != ARCHIVE_OK ||
      archive_write_set_format_pax_restricted(a.get()) != ARCHIVE_OK ||
      archive_write_open_fd(a.get(), out.get()) != ARCHIVE_OK) {
    ::unlinkat(dfd->get(), tmp_name.c_str(), 0);
    return ArchiveError(a.get(), "create backup " + tmp);
  }
  auto fail = [&](Status st) {
    archive_write_close(a.get());
    ::unlinkat(dfd->get(), tmp_name.c_str(), 0);
    return st;
  };
  std::string buf(1 << 20, '\0');
  for (const std::string& rel : rel_paths) {
    std::string path = JoinPath(logdir, rel);
    auto fd = OpenRegularUnder(logdir, rel);
    if (!fd.ok()) return fail(fd.status());
    struct stat st;
    if (::fstat(fd->get(), &st) != 0) return fail(Status::FromErrno(errno, "fstat", path));
    std::unique_ptr<struct archive_entry, EntryFree> entry(archive_entry_new());
    archive_entry_copy_stat(entry.get(), &st);
    archive_entry_set_pathname(entry.get(), rel.c_str());
    if (archive_write_header(a.get(), entry.get()) != ARCHIVE_OK) {
      return fail(ArchiveError(a.get(), "backup " + rel));
    }
    uint64_t off = 0;
    for (;;) {
      size_t got = 0;
      Status s = PreadFull(fd->get(), buf.data(), buf.size(), off, &got, path);
      if (!s.ok()) return fail(s);
      if (got == 0) break;
      if (archive_write_data(a.get(), buf.data(), got) < 0) {
        return fail(ArchiveError(a.get(), "backup " + rel));
      }
      off += got;
      if (progress) progress->fetch_add(got, std::memory_order_relaxed);
    }
    if (off != static_cast<uint64_t>(st.st_size)) {
      return fail(Status::Aborted(path + " changed while it was backed up"));
    }
  }
  if (archive_write_close(a.get()) != ARCHIVE_OK) {
    ::unlinkat(dfd->get(), tmp_name.c_str(), 0);
    return ArchiveError(a.get(), "finish backup " + tmp);
  }
  if (::fsync(out.get()) != 0) {
    ::unlinkat(dfd->get(), tmp_name.c_str(), 0);
    return Status::FromErrno(errno, "fsync", tmp);
  }
  if (::renameat(dfd->get(), tmp_name.c_str(), dfd->get(), name.c_str()) != 0) {
    Status st = Status::FromErrno(errno, "rename", final_path);
    ::unlinkat(dfd->get(), tmp_name.c_str(), 0);
    return st;
  }
  ::fsync(dfd->get());
  *archive_path = final_path;
  return Status::OK();
}

}  // namespace tbfs::store
