// The salvager behind Salvage (store/salvage.h): salvage.cc reads the
// store's engine and writes the files out; salvage_records.cc finds the
// records (blob files, manifests, folders, dictionaries, chunks). Not for
// use outside store/.
#pragma once

#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "base/fs_util.h"
#include "store/backend.h"
#include "store/chunk.h"
#include "store/salvage.h"

namespace tbfs::store {

// The regular files of a folder, by name.
Status ListFiles(const std::string& dir, std::vector<std::string>* names);

// A scratch copy of the store that the engine's best-efforts recovery may
// write to: table and blob files (never changed once written) hard-linked,
// the rest copied. Removed with the object.
class Scratch {
 public:
  ~Scratch();
  // Inside the store's own folder: private (0700, root's), so no one can
  // swap it for a symlink between the calls below, and on the same
  // filesystem, so the links work. The engine ignores a folder there.
  // Held (flock) while it lives: one left by a process killed before it
  // removed it is found by RemoveStaleScratch (store/store_dir.h).
  Status Make(const std::string& store);
  const std::string& dir() const { return dir_; }

 private:
  std::string dir_;
  UniqueFd held_;
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
  Status PrepareOutput();

  // The engine read-only; else its best-efforts recovery on a scratch
  // copy; else none, and the blob files are read alone.
  void OpenEngine();
  void ReadFormat();
  // Every record of the blob files (those a writer set aside first), by
  // kind: chunks, manifest copies, folder links, dictionary copies.
  Status ScanBlobs();
  void AddManifest(const std::string& bytes, uint64_t id, bool from_copy);
  // Format 4: a manifest names its folder by id, and the folders' links
  // (the namespace's, else their copies with the chunks) give its path. A
  // file whose folder cannot be placed keeps the path it had when its
  // manifest was written.
  void PlaceManifests();

  // The engine's manifests, then the blob files' copies of those it lacks.
  void CollectManifests();

  // The dictionaries (format 5) the chunks may need: each from the engine's
  // record, or else from its copy with the chunks (the engine's, or one in
  // the blob files). One that no copy holds intact is a problem; the files
  // whose chunks need it are not written (their chunks fail to decode).
  void LoadDictionaries();

  // Chunk `index` of m from the engine, or else from any blob record that
  // verifies at its key.
  Status ReadChunk(const storepb::Manifest& m, uint64_t index, ChunkCodec* codec, std::string* raw);

  // Each path's newest version, written out (or verified, without `to`).
  void WriteFiles();

  // Files other records name that no manifest describes: each is lost to
  // salvage (the exit status says so), with what the record says of it.
  void ReadRecordsOfMissingFiles();

  // The file is in the logdir, under its name or aside (a crash's
  // leftover, which the next writer's recovery puts back).
  bool InLogdir(const std::string& rel, uint64_t file_id);

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

}  // namespace tbfs::store
