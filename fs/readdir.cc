// Filesystem: folder listings, the merge of the backing folder and the store's entries.
#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <set>

#include "base/time_util.h"
#include "fs/filesystem.h"
#include "spdlog/spdlog.h"
#include "store/classify.h"

namespace tbfs::fs {

namespace {

// Of a snapshot: what the kernel keeps of each entry in its copy of a
// listing (name, offset, inode number, type).
uint64_t Fingerprint(const std::vector<DirEntryOut>& entries) {
  uint64_t h = 0;
  for (const DirEntryOut& e : entries) {
    const uint64_t fields[3] = {e.cookie, static_cast<uint64_t>(e.ino), e.type};
    h = XXH3_64bits_withSeed(fields, sizeof(fields), h);
    h = XXH3_64bits_withSeed(e.name.data(), e.name.size(), h);
  }
  return h;
}

}  // namespace

int Filesystem::OpenDir(uint64_t ino, std::unique_ptr<DirHandle>* out) {
  InodeView v = inodes_.View(ino);
  if (v.kind == Kind::kColdFile) return -ENOTDIR;
  auto dh = std::make_unique<DirHandle>();
  // The stamp is taken before anything is listed (listing_grants.h).
  ListingStamp& stamp = dh->stamp;
  stamp.store_commits = store_->commits();
  bool settled = !store_->shared();  // a shared store changes behind our back
  if (v.kind == Kind::kHot) {
    struct stat st;
    if (::fstat(v.fd->get(), &st) != 0) return -errno;
    if (!S_ISDIR(st.st_mode)) return -ENOTDIR;
    StampBacking(st, &stamp);
    settled = settled && Settled(stamp, NowNs());
  }
  // A handle without the cache leaves the kernel's copy alone: a copy
  // another handle left incomplete would stay so for good if dropped.
  dh->keep_listing = true;
  if (settled && RelPath(ino, &stamp.rel) == 0) {
    dh->opened = ListingGrants::Clock::now();
    ListingGrants::Admission a = listing_grants_.Open(ino, stamp, dh->opened);
    dh->cache_listing = a.cache;
    dh->keep_listing = a.keep;
  }
  *out = std::move(dh);
  return 0;
}

void Filesystem::ReleaseDir(uint64_t ino, std::unique_ptr<DirHandle> dh) {
  if (dh->cache_listing) listing_grants_.Close(ino);
}

void Filesystem::ListingServed(uint64_t ino, DirHandle* dh, off_t off, off_t last, bool intact,
                               bool long_lived, bool end) {
  if (!dh->cache_listing) return;
  if (!intact) listing_grants_.Changed(ino);  // the kernel's copy skips an entry
  if (off != dh->served_to || !intact || !long_lived) dh->served_clean = false;
  dh->served_to = last;
  if (off > dh->covered_to) dh->gapless = false;  // a seek past what was served
  dh->covered_to = std::max(dh->covered_to, last);
  if (!end) return;
  // A grant lives no longer than the attributes the listing's READDIRPLUS
  // replies gave.
  const auto lifetime = std::chrono::duration_cast<ListingGrants::Clock::duration>(
      std::chrono::duration<double>(kStableTtlS - 1.0));
  const bool drop =
      listing_grants_.Ended(ino, dh->stamp, dh->gapless, dh->served_clean, dh->opened + lifetime);
  if (drop && kernel_ != nullptr) kernel_->InvalidateListing(ino);  // before the reply
}

uint64_t Filesystem::DirCookie(std::string_view name) const {
  // The top 55 bits of a 63-bit cookie (a positive off_t); FillDir adds a
  // name's rank among those that share them. Never below 256: 1 and 2 are
  // "." and "..", 0 the start.
  uint64_t h = XXH3_64bits_withSeed(name.data(), name.size(), cookie_seed_) >> 1;
  if (colliding_cookies_) h &= 0xff00;
  return std::max<uint64_t>(h & ~uint64_t{0xff}, 0x100);
}

int Filesystem::ReadDir(uint64_t ino, DirHandle* dh, off_t off, size_t* first) {
  if (off == 0 || !dh->filled) {
    dh->filled = false;
    if (int r = FillDir(ino, dh); r != 0) return r;
    dh->filled = true;
    // A rewinding holder's kernel copy, or one a holder let go partway,
    // joins this snapshot's rest to the older one's start (listing_grants.h).
    if (dh->cache_listing) {
      listing_grants_.Filled(ino, Fingerprint(dh->entries), off == 0);
      dh->covered_to = 0;
      dh->gapless = true;
    }
  }
  auto it = std::upper_bound(dh->entries.begin(), dh->entries.end(), static_cast<uint64_t>(off),
                             [](uint64_t o, const DirEntryOut& e) { return o < e.cookie; });
  *first = static_cast<size_t>(it - dh->entries.begin());
  return 0;
}

void Filesystem::LookupListed(uint64_t ino, const DirHandle& dh, size_t first, size_t count,
                              std::vector<EntryOut>* out) {
  out->assign(count, EntryOut{});
  if (count == 0) return;      // the end of a listing: every walk asks for it once per folder
  ReaderMutexLock ns(ns_mu_);  // the folder's path stays the store's (LookupIn)
  Folder f = FolderOf(ino);
  // The snapshot's cold entries are the store's still when nothing was
  // committed since it was taken: no namespace read per entry then.
  const bool current = !store_->shared() && store_->commits() == dh.store_commits &&
                       f.view.kind == Kind::kHot && FolderRel(&f) == 0 && f.rel == dh.rel;
  for (size_t i = 0; i < count; ++i) {
    const DirEntryOut& d = dh.entries[first + i];
    if (d.name == "." || d.name == "..") continue;
    EntryOut* o = &(*out)[i];
    int r;
    if (current && d.cold_file_id != 0 && !IsTransientName(d.name) &&
        !IsHidden(&f, d.name.c_str())) {
      const Placements::Mark mark = placements_.Now();
      r = HotLookupAt(f.view.fd->get(), d.name.c_str(), o);  // a hot file wins
      if (r == -ENOENT) r = LookupColdFile(d.cold_file_id, o);
      if (r == -ENOENT && placements_.Moved(mark)) r = LookupIn(&f, d.name.c_str(), o);
    } else {
      r = LookupIn(&f, d.name.c_str(), o);
    }
    if (r != 0) o->id = 0;
  }
}

namespace {

// Sorts entries by cookie and makes the cookies unique: names that share a
// hash get their rank among them (by name) in the low 8 bits. Ranks are
// the same in every snapshot unless a name that shares the hash comes or
// goes meanwhile; with a secret seed, that takes two names of one folder
// sharing 55 bits of hash by chance (about 1 in 10^5 for a million names).
void SortByCookie(std::vector<DirEntryOut>* entries) {
  std::sort(entries->begin(), entries->end(), [](const DirEntryOut& a, const DirEntryOut& b) {
    return a.cookie != b.cookie ? a.cookie < b.cookie : a.name < b.name;
  });
  uint64_t rank = 0;
  for (size_t i = 1; i < entries->size(); ++i) {
    DirEntryOut& e = (*entries)[i];
    if ((e.cookie & ~uint64_t{0xff}) == ((*entries)[i - 1].cookie & ~uint64_t{0xff})) {
      e.cookie |= std::min<uint64_t>(++rank, 0xff);
    } else {
      rank = 0;
    }
  }
}

}  // namespace

int Filesystem::FillDir(uint64_t ino, DirHandle* dh) {
  // The backing folder is listed before the store: a file migrating is in
  // the store before it leaves the folder, so it is in one of the two
  // listings. A file put in place (rehydrated) lands in the folder before
  // it leaves the store: listed again if one was (Placements).
  ReaderMutexLock ns(ns_mu_);
  for (int attempt = 1;; ++attempt) {
    const Placements::Mark mark = placements_.Now();
    if (int r = FillDirOnce(ino, dh); r != 0) return r;
    if (attempt == 3 || !placements_.Moved(mark)) return 0;
  }
}

int Filesystem::FillDirOnce(uint64_t ino, DirHandle* dh) {
  dh->entries.clear();
  InodeView v = inodes_.View(ino);
  std::set<std::string> hot_names;
  dh->entries.push_back({".", S_IFDIR, v.shown_ino, 1});
  dh->entries.push_back({"..", S_IFDIR, 1, 2});  // d_ino 0 would hide it from readdir(3)
  if (v.kind == Kind::kHot) {
    int fd = OpenBacking(v.fd->get(), ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return -errno;
    struct stat dir_st;
    if (::fstat(fd, &dir_st) != 0) {
      int err = errno;
      ::close(fd);
      return -err;
    }
    DIR* dir = ::fdopendir(fd);
    if (dir == nullptr) {
      ::close(fd);
      return -errno;
    }
    while (struct dirent* de = ::readdir(dir)) {
      std::string_view n = de->d_name;
      if (n == "." || n == "..") continue;
      if (ino == InodeTable::kRootId && (n == options_.store_skip || n == store::kStoreDirName))
        continue;
      if (IsTransientName(n)) continue;
      hot_names.emplace(n);
      dh->entries.push_back({std::string(n), static_cast<mode_t>(DTTOIF(de->d_type)),
                             inodes_.HotDirentIno(dir_st.st_dev, de->d_ino), DirCookie(n)});
    }
    ::closedir(dir);
  }
  dh->store_commits = store_->commits();
  dh->rel.clear();
  std::string& rel = dh->rel;
  if (RelPath(ino, &rel) != 0) {  // a folder gone from the logdir has no cold part
    SortByCookie(&dh->entries);
    return 0;
  }
  std::vector<store::ChildEntry> cold;
  Status st = store_->ListChildren(rel, &cold);
  if (!st.ok()) return StoreError(st, EioSite::kReaddir);
  for (const auto& c : cold) {
    if (hot_names.count(c.name)) continue;  // hot wins
    bool dir = c.entry.kind() == storepb::Entry::DIR;
    dh->entries.push_back(
        {c.name, static_cast<mode_t>(dir ? S_IFDIR : S_IFREG),
         dir ? inodes_.ColdDirIno(JoinPath(rel, c.name)) : ColdIno(c.entry.file_id()),
         DirCookie(c.name), dir ? 0 : c.entry.file_id()});
  }
  if (!options_.store_skip.empty() && options_.store_skip.find('/') != std::string::npos) {
    std::erase_if(dh->entries, [&](const DirEntryOut& e) {
      return JoinPath(rel, e.name) == options_.store_skip;
    });
  }
  SortByCookie(&dh->entries);
  return 0;
}

}  // namespace tbfs::fs
