#include "store/salvage.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
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
#include "store/store_dir.h"

namespace tbfs::store {

namespace {

// The regular files of a folder, by name.
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

bool EndsWith(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// A scratch copy of the store that the engine's best-efforts recovery may
// write to: table and blob files (never changed once written) hard-linked,
// the rest copied. Removed with the object.
class Scratch {
 public:
  ~Scratch() {
    if (dir_.empty()) return;
    std::vector<std::string> names;
    if (ListFiles(dir_, &names).ok()) {
      for (const auto& n : names) ::unlink((dir_ + "/" + n).c_str());
    }
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }

  // Inside the store's own folder: private (0700, root's), so no one can
  // swap it for a symlink between the calls below, and on the same
  // filesystem, so the links work. The engine ignores a folder there.
  Status Make(const std::string& store) {
    std::string tmpl = store + "/salvage.XXXXXX";
    if (::mkdtemp(tmpl.data()) == nullptr)
      return Status::FromErrno(errno, "make a scratch folder in", store);
    dir_ = tmpl;  // mkdtemp makes it 0700
    std::vector<std::string> names;
    TBFS_RETURN_IF_ERROR(ListFiles(store, &names));
    for (const auto& n : names) {
      if (n == "LOCK" || n == kLogdirLockName) continue;
      const std::string from = store + "/" + n, to = dir_ + "/" + n;
      if ((EndsWith(n, ".sst") || EndsWith(n, ".blob")) && ::link(from.c_str(), to.c_str()) == 0)
        continue;
      std::error_code ec;
      std::filesystem::copy_file(from, to, ec);
      if (ec) return Status::FromErrno(ec.value(), "copy into the scratch folder", from);
    }
    return Status::OK();
  }
  const std::string& dir() const { return dir_; }

 private:
  std::string dir_;
};

// Where a value sits in a blob file.
struct BlobLoc {
  int file = 0;
  uint64_t offset = 0;
  uint64_t length = 0;
};

class Salvager {
 public:
  Salvager(const SalvageOptions& options, SalvageReport* report) : o_(options), r_(report) {}

  Status Run() {
    TBFS_RETURN_IF_ERROR(PrepareOutput());
    OpenEngine();
    ReadFormat();
    TBFS_RETURN_IF_ERROR(ScanBlobs());
    LoadDictionaries();
    CollectManifests();
    PlaceManifests();
    WriteFiles();
    ReadRecordsOfMissingFiles();
    return Status::OK();
  }

 private:
  // Opens `to` once, never through a symlink, and works beneath that fd
  // from then on: made 0700 when missing; an existing folder must be ours,
  // writable by no one else, and empty (another user's or a shared folder
  // could be swapped or read under us).
  Status PrepareOutput() {
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

  void OpenEngine() {
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

  void ReadFormat() {
    if (!engine_) return;
    std::string bytes;
    storepb::StoreInfo info;
    Status st = engine_->Get(Space::kMeta, kMetaInfoKey, &bytes);
    if (st.ok() && info.ParseFromString(bytes)) {
      format1_ = info.format_version() == kFormatVersionV1;
      format_ok_ = true;
      return;
    }
    r_->problems.push_back("the store's format record is unreadable" +
                           (st.ok() ? std::string() : ": " + st.message()));
  }

  Status ScanBlobs() {
    // Those a writer's open set aside first (older), then the store's own,
    // in number order: a later copy of a manifest is a newer version.
    std::vector<std::string> names, set_aside;
    const std::string lost = o_.store_dir + "/" + kLostFoundName;
    if (ListFiles(lost, &set_aside).ok()) {
      for (const auto& n : set_aside) names.push_back(std::string(kLostFoundName) + "/" + n);
    }
    std::vector<std::string> own;
    TBFS_RETURN_IF_ERROR(ListFiles(o_.store_dir, &own));
    names.insert(names.end(), own.begin(), own.end());
    for (const auto& n : names) {
      if (!EndsWith(n, ".blob")) continue;
      const int file = static_cast<int>(blob_paths_.size());
      blob_paths_.push_back(o_.store_dir + "/" + n);
      Status st = ScanBlobFile(blob_paths_.back(), [&](const BlobCandidate& c) {
        r_->blob_values++;
        if (c.index == kManifestCopyIndex) {
          std::string bytes;
          if (ParseManifestCopy(c.file_id, c.value, &bytes)) {
            blob_copies_[c.file_id] = bytes;
          } else if (ParseDirCopy(c.file_id, c.value, &bytes)) {
            blob_links_[c.file_id] = bytes;  // a later file holds a later place
          } else if (static_cast<uint8_t>(c.value[0]) == kDictCopy) {
            blob_dicts_[c.file_id] = std::string(c.value);
          }
          return;
        }
        blob_chunks_[{c.file_id, c.index}].push_back({file, c.offset, c.value.size()});
      });
      if (!st.ok()) r_->problems.push_back("blob file " + n + ": " + st.message());
    }
    r_->blob_files = blob_paths_.size();
    return Status::OK();
  }

  void AddManifest(const std::string& bytes, uint64_t id, bool from_copy) {
    storepb::Manifest m;
    if (!m.ParseFromString(bytes) || m.file_id() != id || !WellFormed(m)) {
      r_->problems.push_back(fmt::format("manifest of file id {} does not parse", id));
      return;
    }
    if (manifests_.count(id)) return;
    if (from_copy) r_->manifests_from_copies++;
    manifests_.emplace(id, std::move(m));
  }

  // Format 4: a manifest names its folder by id, and the folders' links
  // (the namespace's, else their copies with the chunks) give its path. A
  // file whose folder cannot be placed keeps the path it had when its
  // manifest was written.
  void PlaceManifests() {
    std::map<uint64_t, storepb::DirLink> links;
    auto add = [&](uint64_t id, std::string_view bytes) {
      storepb::DirLink link;
      if (link.ParseFromArray(bytes.data(), static_cast<int>(bytes.size())) &&
          !link.name().empty() && link.name().find('/') == std::string::npos) {
        links.emplace(id, std::move(link));
      }
    };
    if (engine_) {
      Status st = engine_->Scan(Space::kNamespace, kTreeKeyPrefix,
                                [&](std::string_view k, std::string_view v) {
                                  uint64_t id = 0;
                                  if (k.size() == 9 && DecodeId(k.substr(1), &id)) add(id, v);
                                  return true;
                                });
      if (!st.ok()) r_->problems.push_back("folders: " + st.message());
    }
    for (const auto& [id, bytes] : blob_links_) add(id, bytes);  // where the engine has none
    for (auto& [id, m] : manifests_) {
      if (m.parent_dir() == kTopDirId) continue;  // at the top, or from before format 4
      std::vector<std::string> names;
      std::set<uint64_t> passed;  // a loop of links (damage) ends the walk
      uint64_t d = m.parent_dir();
      while (d != kTopDirId && passed.insert(d).second) {
        auto it = links.find(d);
        if (it == links.end()) break;
        names.push_back(it->second.name());
        d = it->second.parent();
      }
      if (d != kTopDirId) {
        r_->problems.push_back(fmt::format(
            "{}: its folder's place is unknown; written where it was when it was stored",
            m.path()));
        continue;
      }
      std::string path;
      for (auto it = names.rbegin(); it != names.rend(); ++it) path = JoinPath(path, *it);
      const size_t slash = m.path().find_last_of('/');
      m.set_path(
          JoinPath(path, slash == std::string::npos ? m.path() : m.path().substr(slash + 1)));
    }
  }

  void CollectManifests() {
    bool complete = false;
    if (engine_) {
      Status st = engine_->Scan(Space::kManifests, "", [&](std::string_view k, std::string_view v) {
        uint64_t id = 0;
        if (DecodeId(k, &id)) AddManifest(std::string(v), id, false);
        return true;
      });
      complete = st.ok();
      if (!st.ok()) r_->problems.push_back("manifests: " + st.message() + "; using their copies");
    }
    if (engine_ && !complete) {
      // The copies the engine can still find (some may be only in its log).
      Status st = engine_->Scan(Space::kChunks, "", [&](std::string_view k, std::string_view v) {
        uint64_t id = 0, index = 0;
        std::string bytes;
        if (DecodeChunkKey(k, &id, &index) && index == kManifestCopyIndex &&
            ParseManifestCopy(id, v, &bytes)) {
          AddManifest(bytes, id, true);
        }
        return true;
      });
      if (!st.ok()) r_->problems.push_back("chunks: " + st.message());
    }
    // Copies in the blob files of files the engine does not list. When its
    // view is sound (format record, every manifest read) they are files
    // deleted since the last compaction, or lost from a damaged MANIFEST
    // that still opens: written apart, under kUnlisted. When it is not,
    // they are the store's files, written in place.
    const bool trusted = engine_ && format_ok_ && complete;
    if (!trusted && engine_) {
      r_->problems.push_back(
          "the engine's view of the store is incomplete: every manifest copy in the "
          "blob files counts");
    }
    for (const auto& [id, bytes] : blob_copies_) {
      if (manifests_.count(id)) continue;
      if (trusted) {
        std::string ignored;
        Status st = engine_->Get(Space::kChunks, ChunkKey(id, kManifestCopyIndex), &ignored);
        if (st.ok()) {
          AddManifest(bytes, id, true);  // listed after all (only in the chunks space)
          continue;
        }
        unlisted_.insert(id);
      }
      AddManifest(bytes, id, true);
    }
  }

  // The dictionaries (format 5) the chunks may need: each from the engine's
  // record, or else from its copy with the chunks (the engine's, or one in
  // the blob files). One that no copy holds intact is a problem; the files
  // whose chunks need it are not written (their chunks fail to decode).
  void LoadDictionaries() {
    std::map<uint64_t, std::string> why;  // key id -> what failed
    auto take = [&](uint64_t key_id, std::string_view value, const char* where) {
      if (dicts_.count(static_cast<uint32_t>(kDictIdBase + key_id))) return;
      auto d = DictionaryFromCopy(key_id, value);
      if (d.ok()) {
        dicts_[(*d)->id()] = *d;
        why.erase(key_id);
      } else {
        why[key_id] +=
            fmt::format("{}{} {}", why[key_id].empty() ? "" : ", ", where, d.status().message());
      }
    };
    if (engine_) {
      const std::string prefix = kDictPrefix;
      Status st = engine_->Scan(Space::kMeta, prefix, [&](std::string_view k, std::string_view v) {
        if (!k.starts_with(prefix)) return false;
        uint64_t key_id = 0;
        if (DecodeId(k.substr(prefix.size()), &key_id)) take(key_id, v, "its record");
        return true;
      });
      if (!st.ok()) r_->problems.push_back("dictionary records: " + st.message());
      for (const auto& [key_id, ignored] : std::map<uint64_t, std::string>(why)) {
        std::string copy;
        if (engine_->Get(Space::kChunks, ChunkKey(key_id, kManifestCopyIndex), &copy).ok()) {
          take(key_id, copy, "its copy");
        }
      }
    }
    for (const auto& [key_id, value] : blob_dicts_) take(key_id, value, "its copy in a blob file");
    for (const auto& [key_id, what] : why) {
      r_->problems.push_back(
          fmt::format("dictionary {} is damaged: {}", kDictIdBase + key_id, what));
    }
  }

  // Chunk `index` of m from the engine, or else from any blob record that
  // verifies at its key.
  Status ReadChunk(const storepb::Manifest& m, uint64_t index, ChunkCodec* codec,
                   std::string* raw) {
    const ChunkPos pos{m.file_id(), index};
    const uint32_t len = ChunkLength(m, index);
    if (IsHoleChunk(m, index)) {
      raw->assign(len, '\0');
      return Status::OK();
    }
    Status first = Status::Corruption("no copy of it anywhere");
    if (engine_) {
      std::string value;
      Status st = engine_->Get(Space::kChunks, ChunkKey(m.file_id(), index), &value);
      if (st.ok()) st = codec->Decode(value, len, pos, raw, format1_, find_dict_);
      if (st.ok()) return st;
      first = st;
    }
    auto it = blob_chunks_.find({m.file_id(), index});
    if (it == blob_chunks_.end())
      return Status::Corruption(fmt::format("chunk {}: {}", index, first.message()));
    for (const BlobLoc& loc : it->second) {
      auto fd = OpenFile(blob_paths_[loc.file], O_RDONLY | O_NOFOLLOW);
      if (!fd.ok()) continue;
      std::string value(loc.length, '\0');
      size_t got = 0;
      if (!PreadFull(fd->get(), value.data(), value.size(), loc.offset, &got, blob_paths_[loc.file])
               .ok() ||
          got != value.size()) {
        continue;
      }
      if (codec->Decode(value, len, pos, raw, format1_, find_dict_).ok()) return Status::OK();
    }
    return Status::Corruption(
        fmt::format("chunk {}: {}; no intact copy in the blob files", index, first.message()));
  }

  void WriteFiles() {
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
  void ReadRecordsOfMissingFiles() {
    if (!engine_) return;
    const std::string prefix = kLostPrefix;
    Status st = engine_->Scan(Space::kMeta, prefix, [&](std::string_view k, std::string_view v) {
      uint64_t id = 0;
      (void)DecodeId(k.substr(prefix.size()), &id);
      auto j = nlohmann::json::parse(v, nullptr, false);
      const std::string path = j.is_object() ? j.value("path", "") : "";
      r_->lost.push_back({path, id, "recorded lost by a recovery (tbfs fsck --clear-lost)"});
      return true;
    });
    if (!st.ok()) r_->problems.push_back("lost-file records: " + st.message());
    st = engine_->Scan(Space::kJournal, "", [&](std::string_view, std::string_view v) {
      storepb::JournalRecord record;
      if (!record.ParseFromArray(v.data(), static_cast<int>(v.size()))) {
        r_->problems.push_back("a journal record does not parse");
        return true;
      }
      if (record.kind() != storepb::JournalRecord::MIGRATE) return true;
      for (const auto& e : record.entries()) {
        if (manifests_.count(e.file_id()) || InLogdir(e.path(), e.file_id())) continue;
        r_->lost.push_back({e.path(), e.file_id(),
                            "named by an unfinished migration (batch " +
                                std::to_string(record.batch_id()) +
                                ") and neither in the store nor in the logdir" +
                                (o_.logdir.empty() ? std::string(" (not looked at: give LOGDIR)")
                                                   : std::string())});
      }
      return true;
    });
    if (!st.ok()) r_->problems.push_back("journal: " + st.message());
  }

  // The file is in the logdir, under its name or aside (a crash's
  // leftover, which the next writer's recovery puts back).
  bool InLogdir(const std::string& rel, uint64_t file_id) {
    if (o_.logdir.empty()) return false;
    if (!logdir_fd_.valid()) {
      logdir_fd_.reset(::open(o_.logdir.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
      if (!logdir_fd_.valid()) return false;
    }
    std::string name;
    auto dir = OpenParentBeneath(logdir_fd_.get(), rel, &name);
    if (!dir.ok()) return false;
    struct stat st;
    const std::string aside = fmt::format(".{}.tbfs-mig-{}", name, file_id);
    return ::fstatat(dir->get(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 ||
           ::fstatat(dir->get(), aside.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0;
  }

  UniqueFd logdir_fd_;
  const SalvageOptions& o_;
  SalvageReport* r_;
  UniqueFd out_fd_;  // `to`, opened once
  Scratch scratch_;  // destroyed after engine_ (declared before it)
  std::unique_ptr<Backend> engine_;
  bool format1_ = true;  // until the format record says otherwise
  bool format_ok_ = false;
  std::set<uint64_t> unlisted_;
  std::vector<std::string> blob_paths_;
  std::map<std::pair<uint64_t, uint64_t>, std::vector<BlobLoc>> blob_chunks_;
  std::map<uint64_t, std::string> blob_copies_;
  std::map<uint64_t, std::string> blob_links_;  // folder id -> DirLink, from the blob files
  std::map<uint64_t, std::string> blob_dicts_;  // key id -> dictionary copy, from the blob files
  std::map<uint32_t, std::shared_ptr<const Dictionary>>
      dicts_;  // by zstd id; read-only once loaded
  DictionaryFinder find_dict_ = [this](uint32_t id) -> std::shared_ptr<const Dictionary> {
    auto it = dicts_.find(id);
    return it == dicts_.end() ? nullptr : it->second;
  };
  std::map<uint64_t, storepb::Manifest> manifests_;
};

}  // namespace

Result<SalvageReport> Salvage(const SalvageOptions& options) {
  struct stat st;
  if (::stat(options.store_dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return Status::NotFound("no store folder at " + options.store_dir);
  }
  SalvageReport report;
  Salvager s(options, &report);
  TBFS_RETURN_IF_ERROR(s.Run());
  return report;
}

}  // namespace tbfs::store
