// What blob files the engine does not list hold of files the store lost.
//
// A MANIFEST cut back (a crash or damage) opens as an earlier state of the
// store: the table and blob files written since are unlisted, and a
// writer's open sets them aside in kLostFoundName (store/rocks_env.h). The
// files migrated since are in them, and their originals are gone from the
// logdir. Recovery writes those back (store/recovery.cc); fsck names them
// while the files are still in the store's folder, unlisted.
//
// Which manifest copies count: every file id below the store's next id was
// handed out by the state the cut left, so its manifest is there unless the
// file was deleted before that point, or its batch had not reached the
// engine's tables yet (then its journal entry survived, and the journal's
// recovery recorded it lost). A copy counts when the store has no manifest
// of its id and the id is at or above the next id, or recorded lost; any
// other copy is of a file deleted since (a crash's leftover read long
// after), which stays deleted. Of several copies of one path, the newest
// (the largest id) counts: the others are versions it replaced. Chunks
// under an id that counts, whose manifest copy is there but damaged, are a
// file lost with no name to give it (with no copy at all, a copy given up
// before its manifest was written). Not for use outside store/.
#pragma once

#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "store/cold_store.h"
#include "store/salvager.h"

namespace tbfs::store {

class SetAside {
 public:
  explicit SetAside(ColdStore& store);

  // Reads the records of the blob file at `path`: manifest copies (the last
  // of each id wins), dictionary copies, where each chunk value lies.
  Status Read(const std::string& path);

  // The manifests read of files the store lost (above), well-formed, each
  // with a path beneath the logdir; *nameless (when given) gets the ids of
  // lost files with chunks and no intact manifest copy.
  Result<std::vector<storepb::Manifest>> LostByTheStore(std::vector<uint64_t>* nameless = nullptr);

  // Chunk `index` of c (the ContentManifest of one of them) from a value
  // read that verifies at its key. Thread-safe.
  Status ReadChunk(const storepb::Manifest& c, uint64_t index, ChunkCodec* codec,
                   std::string* raw) const;

 private:
  ColdStore& store_;
  const bool v1_;
  DictionaryFinder find_;
  std::vector<std::string> paths_;
  std::map<uint64_t, std::string> manifests_;
  std::set<uint64_t> chunk_ids_;        // of chunk records whose checksums hold
  std::set<uint64_t> unparsed_copies_;  // ids of copies that do not parse as one
  std::map<uint32_t, std::shared_ptr<const Dictionary>> dicts_;  // by zstd id
  std::map<std::pair<uint64_t, uint64_t>, std::vector<BlobLoc>> chunks_;
};

}  // namespace tbfs::store
