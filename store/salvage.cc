#include "store/salvage.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <set>

#include "fmt/format.h"
#include "nlohmann/json.hpp"
#include "spdlog/spdlog.h"
#include "store/backend.h"
#include "store/blob_scan.h"
#include "store/chunk.h"
#include "store/file_io.h"
#include "store/format.h"
#include "store/gzip_pieces.h"
#include "store/journal_index.h"
#include "store/migrate_internal.h"
#include "store/salvager.h"
#include "store/store_dir.h"

namespace tbfs::store {

Status ListFiles(const std::string& dir, std::vector<std::string>* names) {
  names->clear();
  std::unique_ptr<DIR, int (*)(DIR*)> d(::opendir(dir.c_str()), ::closedir);
  if (!d) return Status::FromErrno(errno, "list", dir);
  while (struct dirent* e = ::readdir(d.get())) {
    struct stat st;
    if (::fstatat(::dirfd(d.get()), e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
        S_ISREG(st.st_mode)) {
      names->push_back(e->d_name);
    }
  }
  std::sort(names->begin(), names->end());
  return Status::OK();
}

Scratch::~Scratch() {
  if (dir_.empty()) return;
  std::vector<std::string> names;
  if (ListFiles(dir_, &names).ok()) {
    for (const auto& n : names) ::unlink((dir_ + "/" + n).c_str());
  }
  std::error_code ec;
  std::filesystem::remove_all(dir_, ec);
}

Status Scratch::Make(const std::string& store) {
  RemoveStaleScratch(store);
  std::string tmpl = store + "/" + kScratchPrefix + "XXXXXX";
  if (::mkdtemp(tmpl.data()) == nullptr)
    return Status::FromErrno(errno, "make a scratch folder in", store);
  dir_ = tmpl;  // mkdtemp makes it 0700
  held_ = UniqueFd(::open(dir_.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!held_.valid() || ::flock(held_.get(), LOCK_EX | LOCK_NB) != 0)
    return Status::FromErrno(errno, "hold the scratch folder", dir_);
  UniqueFd marker(
      ::openat(held_.get(), kScratchMarker, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
  if (!marker.valid()) return Status::FromErrno(errno, "mark the scratch folder", dir_);
  std::vector<std::string> names;
  TBFS_RETURN_IF_ERROR(ListFiles(store, &names));
  for (const auto& n : names) {
    if (n == "LOCK" || n == kLogdirLockName) continue;
    const std::string from = store + "/" + n, to = dir_ + "/" + n;
    if ((n.ends_with(".sst") || n.ends_with(".blob")) && ::link(from.c_str(), to.c_str()) == 0)
      continue;
    std::error_code ec;
    std::filesystem::copy_file(from, to, ec);
    if (ec) return Status::FromErrno(ec.value(), "copy into the scratch folder", from);
  }
  return Status::OK();
}

// Opens `to` once, never through a symlink, and works beneath that fd
// from then on: made 0700 when missing; an existing folder must be ours,
// writable by no one else, and empty (another user's or a shared folder
// could be swapped or read under us).
Status Salvager::PrepareOutput() {
  if (o_.to.empty()) return Status::OK();  // a check: nothing is written
  if (::mkdir(o_.to.c_str(), 0700) != 0 && errno != EEXIST)
    return Status::FromErrno(errno, "make", o_.to);
  UniqueFd fd(::open(o_.to.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!fd.valid()) {
    if (errno == ELOOP || errno == ENOTDIR)
      return Status::InvalidArgument(o_.to + " exists and is not a folder");
    return Status::FromErrno(errno, "open", o_.to);
  }
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) return Status::FromErrno(errno, "stat", o_.to);
  if (st.st_uid != ::geteuid() || (st.st_mode & 022) != 0) {
    return Status::InvalidArgument(o_.to +
                                   " belongs to another user or others may write to it; "
                                   "salvage into a new folder");
  }
  std::unique_ptr<DIR, int (*)(DIR*)> d(::fdopendir(::dup(fd.get())), ::closedir);
  if (!d) return Status::FromErrno(errno, "list", o_.to);
  while (struct dirent* e = ::readdir(d.get())) {
    if (std::string_view(e->d_name) != "." && std::string_view(e->d_name) != "..") {
      return Status::InvalidArgument(o_.to +
                                     " is not empty; salvage writes into a new or empty folder");
    }
  }
  if (::fchmod(fd.get(), 0700) != 0) return Status::FromErrno(errno, "chmod", o_.to);
  out_fd_ = std::move(fd);
  return Status::OK();
}

void Salvager::OpenEngine() {
  BackendOptions bo;
  bo.read_only = true;
  auto opened = OpenRocksBackend(o_.store_dir, bo);
  if (opened.ok()) {
    engine_ = std::move(opened).value();
    r_->engine = "read-only";
    return;
  }
  r_->problems.push_back("the store does not open: " + opened.status().message());
  Status made = scratch_.Make(o_.store_dir);
  if (made.ok()) {
    BackendOptions be;
    be.best_efforts = true;
    auto recovered = OpenRocksBackend(scratch_.dir(), be);
    if (recovered.ok()) {
      engine_ = std::move(recovered).value();
      r_->engine = "best-efforts recovery";
      return;
    }
    made = recovered.status();
  }
  r_->engine = "none (" + made.message() + ")";
  r_->problems.push_back("the engine's best-efforts recovery failed too: " + made.message() +
                         "; reading the blob files alone");
  r_->blob_files_only = true;
}

void Salvager::ReadFormat() {
  if (!engine_) return;
  std::string bytes;
  storepb::StoreInfo info;
  Status st = engine_->Get(Space::kMeta, kMetaInfoKey, &bytes);
  if (st.ok() && info.ParseFromString(bytes)) {
    format1_ = info.format_version() == kFormatVersionV1;
    format_ok_ = true;
    // What this tbfs cannot read fails its checks (never other bytes), but
    // the admin should hear why so much is lost.
    if (info.format_version() > kNewestFormatVersion) {
      r_->problems.push_back(fmt::format(
          "the store has format version {}; this tbfs reads versions {} to {} only: a newer "
          "tbfs may read the files listed as lost",
          info.format_version(), kFormatVersionV1, kNewestFormatVersion));
    }
    return;
  }
  r_->problems.push_back("the store's format record is unreadable" +
                         (st.ok() ? std::string() : ": " + st.message()));
}

void Salvager::WriteFiles() {
  // One file per path: the newest (largest id) of any versions found.
  std::map<std::string, uint64_t> by_path;
  for (const auto& [id, m] : manifests_) {
    const std::string path = unlisted_.count(id) ? JoinPath(kUnlisted, m.path()) : m.path();
    by_path[path] = std::max(by_path[path], id);
  }
  MaterializeOptions mo;
  mo.keep_owner = o_.keep_owner;
  mo.sync = true;
  mo.pool = o_.pool;
  mo.progress = o_.progress;
  mo.root_fd = out_fd_.get();
  for (const auto& [path, id] : by_path) {
    const storepb::Manifest& m = manifests_.at(id);
    if (!IsSafeRelativePath(m.path())) {
      r_->lost.push_back({path, id, "its path is not a safe relative path"});
      continue;
    }
    auto read = [&, content = ContentManifest(m)](uint64_t index, ChunkCodec* codec,
                                                  std::string* raw) {
      return ReadChunk(content, index, codec, raw);
    };
    Status st = o_.to.empty() ? VerifyFrom(m, read, o_.pool)
                              : MaterializeFrom(m, read, {}, o_.to, path, mo);
    if (st.ok() && o_.to.empty() && o_.progress) o_.progress->fetch_add(m.size());
    if (st.ok()) {
      r_->files++;
      r_->bytes += m.size();
      if (unlisted_.count(id)) r_->unlisted++;
    } else {
      r_->lost.push_back({path, id, st.message()});
    }
  }
}

// Files other records name that no manifest describes: each is lost to
// salvage (the exit status says so), with what the record says of it.
void Salvager::ReadRecordsOfMissingFiles() {
  if (!engine_) return;
  const std::string prefix = kLostPrefix;
  Status st = engine_->Scan(Space::kMeta, prefix, [&](std::string_view k, std::string_view v) {
    uint64_t id = 0;
    (void)DecodeId(k.substr(prefix.size()), &id);
    auto j = nlohmann::json::parse(v, nullptr, false);
    const std::string path = j.is_object() ? j.value("path", "") : "";
    const bool written =
        manifests_.count(id) != 0 && std::none_of(r_->lost.begin(), r_->lost.end(),
                                                  [id](const auto& l) { return l.file_id == id; });
    if (written) {
      r_->found_again++;
    } else {
      r_->lost.push_back({path, id, "recorded lost by a recovery (tbfs fsck --clear-lost)"});
    }
    return true;
  });
  if (!st.ok()) r_->problems.push_back("lost-file records: " + st.message());
  // Deleted on purpose, or left in place by their batch (store/journal_index.h).
  std::set<uint64_t> marked;
  st = engine_->Scan(Space::kMeta, kBatchMarkPrefix, [&](std::string_view k, std::string_view) {
    uint64_t id = 0;
    if (DecodeId(k.substr(std::strlen(kBatchMarkPrefix)), &id)) marked.insert(id);
    return true;
  });
  if (!st.ok()) r_->problems.push_back("marks of files of unfinished batches: " + st.message());
  st = engine_->Scan(Space::kJournal, "", [&](std::string_view, std::string_view v) {
    storepb::JournalRecord record;
    if (!record.ParseFromArray(v.data(), static_cast<int>(v.size()))) {
      r_->problems.push_back("a journal record does not parse");
      return true;
    }
    if (record.kind() != storepb::JournalRecord::MIGRATE) return true;
    for (const auto& e : record.entries()) {
      if (manifests_.count(e.file_id()) || marked.count(e.file_id()) || e.cold_when_kept() ||
          InLogdir(e.path(), e.file_id())) {
        continue;
      }
      r_->lost.push_back(
          {e.path(), e.file_id(),
           "named by an unfinished migration (batch " + std::to_string(record.batch_id()) +
               ") and neither in the store nor in the logdir" +
               (o_.logdir.empty() ? std::string(" (not looked at: give LOGDIR)") : std::string())});
    }
    return true;
  });
  if (!st.ok()) r_->problems.push_back("journal: " + st.message());
}

// The file is in the logdir, under its name or aside (a crash's
// leftover, which the next writer's recovery puts back).
bool Salvager::InLogdir(const std::string& rel, uint64_t file_id) {
  if (o_.logdir.empty()) return false;
  if (!logdir_fd_.valid()) {
    logdir_fd_.reset(::open(o_.logdir.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
    if (!logdir_fd_.valid()) return false;
  }
  std::string name;
  auto dir = OpenParentBeneath(logdir_fd_.get(), rel, &name);
  if (!dir.ok()) return false;
  struct stat st;
  const std::string aside = AsideName(name, file_id);
  return ::fstatat(dir->get(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 ||
         ::fstatat(dir->get(), aside.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0;
}

Result<SalvageReport> Salvage(const SalvageOptions& options) {
  struct stat st;
  if (::stat(options.store_dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return Status::NotFound("no store folder at " + options.store_dir);
  }
  // A damaged store (its engine's files without CURRENT) is what salvage
  // is for; an empty folder, or one of other files, holds none and is not
  // touched (the scratch folder would be made in it).
  if (::stat(JoinPath(options.store_dir, "CURRENT").c_str(), &st) != 0) {
    Status folder = CheckStoreFolder(options.store_dir);
    if (folder.ok()) {
      return Status::NotFound("no tbfs store in " + options.store_dir + ": nothing to salvage");
    }
    if (folder.code() != Code::kCorruption) return folder;
  }
  SalvageReport report;
  Salvager s(options, &report);
  TBFS_RETURN_IF_ERROR(s.Run());
  return report;
}

}  // namespace tbfs::store
