#include "store/restore.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <set>

#include "base/work_pool.h"
#include "store/maintenance.h"
#include "tests/store/migrate_fixture.h"
#include "tests/test_util.h"

namespace tbfs::store {
namespace {

using tbfs::testing::ReadBytes;
using tbfs::testing::WriteBytes;

TEST_F(MigrateTest, RestoreBringsEverythingBackAndExportLeavesTheStore) {
  auto result = Migrate(*store_, logdir_, Candidates(), Options());
  ASSERT_TRUE(result.ok() && result->ok());
  WorkPool pool(2);
  std::vector<storepb::Manifest> cold;
  std::vector<std::string> missing;
  ASSERT_TRUE(SelectCold(*store_, {}, &cold, &missing).ok());
  ASSERT_EQ(cold.size(), result->files_moved);

  std::string out = dir_ / "export";
  auto exported = Export(*store_, out, cold, false, &pool, nullptr);
  ASSERT_TRUE(exported.ok());
  EXPECT_EQ(exported->files, cold.size());
  for (const auto& m : cold)
    EXPECT_TRUE(ReadBytes(JoinPath(out, m.path())) == before_[m.path()].bytes);
  EXPECT_EQ(store_->ComputeTotals()->files, cold.size());

  auto blob_bytes = [&] {
    uint64_t total = 0;
    for (const auto& e : std::filesystem::directory_iterator(JoinPath(logdir_, kStoreDirName))) {
      if (e.path().extension() == ".blob") total += e.file_size();
    }
    return total;
  };
  uint64_t blobs_before = blob_bytes();
  ASSERT_GT(blobs_before, 0u);
  // A file that reappeared at its path keeps the cold copy cold.
  WriteBytes(JoinPath(logdir_, cold[0].path()), "new file");
  auto restored = Restore(*store_, logdir_, cold, &pool, nullptr);
  ASSERT_TRUE(restored.ok());
  EXPECT_EQ(restored->files, cold.size() - 1);
  ASSERT_EQ(restored->failed.size(), 1u);
  EXPECT_TRUE(store_->Lookup(cold[0].path()).ok());
  // Restoring gives the space back: blob files are garbage collected down
  // to what the one file still cold needs.
  EXPECT_LE(blob_bytes(), cold[0].stored_bytes() + 4096);
  EXPECT_LT(blob_bytes(), blobs_before);
  auto after = Snapshot(logdir_);
  for (size_t i = 1; i < cold.size(); ++i) {
    EXPECT_TRUE(after[cold[i].path()].bytes == before_[cold[i].path()].bytes);
    EXPECT_EQ(after[cold[i].path()].mtime_ns, before_[cold[i].path()].mtime_ns);
  }
  // The engine deletes what compaction left behind as the next writer
  // opens: nothing there was set aside, and no empty lost+found is left.
  store_.reset();
  const std::string store_dir = JoinPath(logdir_, kStoreDirName);
  auto reopened = ColdStore::Open(store_dir, OpenOptions{});
  ASSERT_TRUE(reopened.ok()) << reopened.status().ToString();
  EXPECT_FALSE(std::filesystem::exists(JoinPath(store_dir, kLostFoundName)))
      << "a clean restore and reopen left " << kLostFoundName;
}

// A file's ACL and extended attributes go into the store with it and come
// back with it: a round trip loses no permission (a user an ACL shut out
// is still shut out; the group bits are still the mask's).
TEST_F(MigrateTest, AclsAndXattrsComeBackWithTheFile) {
  std::vector<Candidate> candidates = Candidates();
  ASSERT_FALSE(candidates.empty());
  const std::string rel = candidates[0].path, path = JoinPath(logdir_, rel);
  const std::string acl = testing::AccessAcl(0644, {{65534, 0}}, 4);
  ASSERT_EQ(::setxattr(path.c_str(), "user.note", "kept", 4, 0), 0) << std::strerror(errno);
  ASSERT_EQ(::setxattr(path.c_str(), "system.posix_acl_access", acl.data(), acl.size(), 0), 0)
      << std::strerror(errno);
  struct stat before;
  ASSERT_EQ(::stat(path.c_str(), &before), 0);
  ASSERT_EQ(before.st_mode & 0777, 0644u) << "the mask is the group's bits";
  auto xattr = [](const std::string& p, const char* name) {
    std::string v(4096, '\0');
    ssize_t n = ::getxattr(p.c_str(), name, v.data(), v.size());
    return n < 0 ? std::string("<none>") : v.substr(0, static_cast<size_t>(n));
  };
  const std::string acl_before = xattr(path, "system.posix_acl_access");
  // Candidates() again: the attributes changed its ctime.
  auto result = Migrate(*store_, logdir_, Candidates(), Options());
  ASSERT_TRUE(result.ok() && result->ok());
  auto m = store_->Lookup(rel);
  ASSERT_TRUE(m.ok()) << rel << " did not move";
  EXPECT_EQ(m->xattrs_size(), 2);
  WorkPool pool(2);
  std::vector<storepb::Manifest> cold;
  std::vector<std::string> missing;
  ASSERT_TRUE(SelectCold(*store_, {rel}, &cold, &missing).ok());
  auto restored = Restore(*store_, logdir_, cold, &pool, nullptr);
  ASSERT_TRUE(restored.ok() && restored->failed.empty());
  struct stat after;
  ASSERT_EQ(::stat(path.c_str(), &after), 0);
  EXPECT_EQ(after.st_mode & 07777, before.st_mode & 07777);
  EXPECT_EQ(xattr(path, "user.note"), "kept");
  EXPECT_EQ(xattr(path, "system.posix_acl_access"), acl_before);
}

// Migration and restore change no folder's mtime (issue 21, finding 10):
// to users the files were there all along; only the ctime moves.
TEST_F(MigrateTest, FolderTimesAreThoseUsersMade) {
  std::vector<Candidate> candidates = Candidates();
  ASSERT_FALSE(candidates.empty());
  std::set<std::string> folders;
  for (const Candidate& c : candidates) folders.insert(JoinPath(logdir_, ParentPath(c.path)));
  const struct timespec old_time = {1600000000, 123456789};
  for (const std::string& f : folders) {
    struct timespec times[2] = {old_time, old_time};
    ASSERT_EQ(::utimensat(AT_FDCWD, f.c_str(), times, 0), 0);
  }
  auto mtime_of = [](const std::string& f) {
    struct stat st;
    return ::stat(f.c_str(), &st) == 0 ? st.st_mtim : timespec{-1, 0};
  };
  auto result = Migrate(*store_, logdir_, candidates, Options());
  ASSERT_TRUE(result.ok() && result->ok());
  ASSERT_EQ(result->files_moved, candidates.size());
  for (const std::string& f : folders) {
    EXPECT_EQ(mtime_of(f).tv_sec, old_time.tv_sec) << f << ": changed by the migration";
    EXPECT_EQ(mtime_of(f).tv_nsec, old_time.tv_nsec) << f;
  }
  WorkPool pool(2);
  std::vector<storepb::Manifest> cold;
  std::vector<std::string> missing;
  ASSERT_TRUE(SelectCold(*store_, {}, &cold, &missing).ok());
  auto restored = Restore(*store_, logdir_, cold, &pool, nullptr);
  ASSERT_TRUE(restored.ok() && restored->failed.empty());
  for (const std::string& f : folders) {
    EXPECT_EQ(mtime_of(f).tv_sec, old_time.tv_sec) << f << ": changed by the restore";
  }
  // A user's own change in a folder between tbfs's stands.
  WriteBytes(JoinPath(*folders.begin(), "new.txt"), "mine");
  const struct timespec mine = mtime_of(*folders.begin());
  EXPECT_NE(mine.tv_sec, old_time.tv_sec);
  auto again = Migrate(*store_, logdir_, Candidates(), Options());
  ASSERT_TRUE(again.ok() && again->ok());
  EXPECT_EQ(mtime_of(*folders.begin()).tv_sec, mine.tv_sec);
}

// A user's symlink at the export folder, or above it, or a folder another
// user may write: root's export writes nothing there (it followed the
// symlink and, with --force, replaced root's files at its target).
TEST_F(MigrateTest, ExportRefusesFoldersAnotherUserControls) {
  auto result = Migrate(*store_, logdir_, Candidates(), Options());
  ASSERT_TRUE(result.ok() && result->ok());
  WorkPool pool(2);
  std::vector<storepb::Manifest> cold;
  std::vector<std::string> missing;
  ASSERT_TRUE(SelectCold(*store_, {}, &cold, &missing).ok());
  ASSERT_FALSE(cold.empty());

  const std::string target = dir_ / "roots";  // root's folder, which the user wants written
  ASSERT_EQ(::mkdir(target.c_str(), 0755), 0);
  const std::string user = dir_ / "user";  // the user's folder, holding the symlinks
  ASSERT_EQ(::mkdir(user.c_str(), 0755), 0);
  ASSERT_EQ(::symlink(target.c_str(), (user + "/out").c_str()), 0);
  ASSERT_EQ(::chown(user.c_str(), 65534, 65534), 0);
  ASSERT_EQ(::lchown((user + "/out").c_str(), 65534, 65534), 0);
  const std::string shared = dir_ / "shared";  // writable by all, not sticky
  ASSERT_EQ(::mkdir(shared.c_str(), 0777), 0);
  ASSERT_EQ(::chmod(shared.c_str(), 0777), 0);

  for (const std::string& to :
       {user + "/out", user + "/out/sub", user + "/new", shared + "/x", shared}) {
    auto exported = Export(*store_, to, cold, true, &pool, nullptr);
    ASSERT_FALSE(exported.ok()) << to;
    EXPECT_EQ(exported.status().code(), Code::kInvalidArgument) << exported.status().ToString();
  }
  EXPECT_TRUE(std::filesystem::is_empty(target));
  EXPECT_TRUE(std::filesystem::is_empty(shared));
  // A folder of root's own, even below a sticky shared one, is fine.
  ASSERT_EQ(::chmod(shared.c_str(), 01777), 0);
  auto ok = Export(*store_, shared + "/mine", cold, false, &pool, nullptr);
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(ok->files, cold.size());
}

TEST(NormalizeUserPath, RejectsEscapes) {
  EXPECT_EQ(NormalizeUserPath("/l", "run/x").value(), "run/x");
  EXPECT_EQ(NormalizeUserPath("/l", "./run/").value(), "run");
  EXPECT_EQ(NormalizeUserPath("/l/", "/l/run/x").value(), "run/x");
  EXPECT_EQ(NormalizeUserPath("/l", ".").value(), "");
  EXPECT_FALSE(NormalizeUserPath("/l", "../x").ok());
  EXPECT_FALSE(NormalizeUserPath("/l", "run/../../x").ok());
  EXPECT_FALSE(NormalizeUserPath("/l", "/etc/passwd").ok());
  EXPECT_FALSE(NormalizeUserPath("/l", "/lx/y").ok());
}

}  // namespace
}  // namespace tbfs::store
