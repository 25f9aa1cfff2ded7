// The folders tbfs keeps for itself: the store's folder, private to the
// user who runs tbfs, and the logdir's lock, which makes tbfs the only
// writer of a logdir whatever store each writer names.
//
// LOGDIR/.tbfs is tbfs's folder in every logdir (mode 0700): it holds the
// lock file `logdir.lock` and, by default, the store. A walk of the logdir
// never enters it and the mount never shows it.
#pragma once

#include <string>

#include "base/fs_util.h"
#include "base/status.h"

namespace tbfs::store {

inline constexpr char kLogdirLockName[] = "logdir.lock";
// `tbfs watch`'s series of the logdir's size (store/growth.h), kept in the
// store folder beside the engine's files.
inline constexpr char kGrowthFileName[] = "growth.jsonl";

// OK when LOGDIR/.tbfs is a folder or is not there. It is never followed
// when it is a symbolic link (whoever can write the logdir's top folder
// could point the store, and the logdir's lock, anywhere): InvalidArgument
// that says so, as for anything else that is not a folder.
Status CheckLogdirFolder(const std::string& logdir);

// Takes the logdir's lock (flock on LOGDIR/.tbfs/logdir.lock, made 0600
// where missing) for as long as the returned fd stays open, and records
// `holder` in it ("the tbfs mount on /mnt/x (pid 12)"). Busy, naming the
// holder, when another process has it.
Result<UniqueFd> LockLogdir(const std::string& logdir, const std::string& holder);

// OK for a store folder, or an empty one (but for the logdir's lock);
// Corruption for a store that lost its CURRENT file (the engine's other
// files are there); InvalidArgument for any other folder: tbfs will not
// write into it.
Status CheckStoreFolder(const std::string& dir);

// A store is made under a marker (STORE/creating, written and synced
// before the engine's first file, removed once the format record is in
// the engine's tables): a store folder that still holds it is a creation
// cut short, which never held a file. Readers see no store there; the next
// writer removes the engine's files and the marker, and makes it anew.
inline constexpr char kCreatingName[] = "creating";
bool CreationCutShort(const std::string& dir);

// Salvage and fsck of a damaged store work on hard links of its files in a
// scratch folder inside it (STORE/salvage.XXXXXX), held (flock) while in
// use. One left by a process killed before it removed it held those links,
// and the space of every file in them, for good: removed by the next
// salvage or fsck of the store and by its next writer. Best effort (logged).
inline constexpr char kScratchPrefix[] = "salvage.";
// Made in a scratch folder once it is held: only a folder with it is
// removed (a folder of that name that tbfs did not make stays).
inline constexpr char kScratchMarker[] = ".tbfs-scratch";
void RemoveStaleScratch(const std::string& store);
Status MarkCreation(const std::string& dir);
Status EndCreation(const std::string& dir);
// Busy while another process holds the engine's LOCK file there.
Status UndoCutShortCreation(const std::string& dir);

// Where a writer's open of the store sets aside the table and blob files
// the engine would delete as unknown (STORE/lost+found): after damage to the
// engine's MANIFEST it would take them for leftovers and delete live data.
// Salvage reads the blob files there too.
inline constexpr char kLostFoundName[] = "lost+found";

// Makes the store folder private: owned by this user (InvalidArgument
// otherwise: someone else could change it back), mode 0700, every file in it
// 0600. Says so once (a warning) when it had to change a mode.
Status MakeStorePrivate(const std::string& dir);

}  // namespace tbfs::store
