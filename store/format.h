// Every on-disk layout of the cold store in one place: keys, chunk framing,
// the format version. Prose and rationale: docs/format.md.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace tbfs::store {

// Bumped on any incompatible change; a store of another version is refused,
// but for version 1, which a writer upgrades in place (ColdStore::Open).
// A store is made at kFormatVersion and becomes kFormatVersionHoles with
// its first file stored with holes (Manifest.hole_runs), which a tbfs that
// reads 1 and 2 only would take for lost chunks; nothing else changes.
inline constexpr uint32_t kFormatVersion = 2;
inline constexpr uint32_t kFormatVersionV1 = 1;
inline constexpr uint32_t kFormatVersionHoles = 3;
// Format 4: the namespace is a tree of folder ids (TreeKey below), so a
// folder rename rewrites two records whatever the folder holds. New stores
// are made at 4; a writer converts an older store when it opens it
// (ColdStore::ConvertToTree); holes need no mark of their own from 4 on.
inline constexpr uint32_t kFormatVersionTree = 4;
// Format 5: chunks may need a zstd dictionary (kChunkZstdDict, records
// under kDictPrefix). New stores are made at 4 and become 5 with their
// first dictionary, so a store without one stays readable by a tbfs that
// reads 4; one with dictionaries is refused by it rather than misread.
inline constexpr uint32_t kFormatVersionDict = 5;
// Format 6: a gzip file may be stored by its content (Manifest.gzip,
// store/gzip_pieces.h), which a tbfs that reads 5 would serve inflated. A
// store becomes 6 with the first such file (ColdStore::PutFormat).
inline constexpr uint32_t kFormatVersionGzip = 6;
// Format 7: a file's chunk 0 may be shorter than the others
// (Manifest.head_chunk_bytes), which a tbfs that reads 6 would take for a
// whole chunk. A store becomes 7 with the first such file.
inline constexpr uint32_t kFormatVersionHead = 7;
// Format 8: a chunk's numbers may be stored as differences
// (kChunkZstdNumbers, store/number_deltas.h); a store becomes 8 with the
// first file that has such a chunk (Manifest.codec kCodecZstdNumbers).
inline constexpr uint32_t kFormatVersionNumbers = 8;
inline constexpr uint32_t kNewStoreFormatVersion = kFormatVersionTree;
inline constexpr uint32_t kNewestFormatVersion = kFormatVersionNumbers;

inline constexpr char kMetaInfoKey[] = "info";
// Above every file id ever handed out (8 bytes big endian), written with
// every journal record and every added file: a writer that takes a shared
// store over never hands out an id another host's reader may have seen, or
// a stale writer may still write chunks under, even one whose batch was
// undone.
inline constexpr char kMetaNextFileIdKey[] = "next_file_id";
// Meta: "retired/" + file id (8 bytes BE) -> "": a file that left the store
// while open handles of a mount still read it; its chunks stay until the
// last reader is gone (or the next recovery).
inline constexpr char kRetiredPrefix[] = "retired/";
// Meta: "lost/" + file id (8 bytes BE) -> JSON {path, batch, found_ns, why}:
// a file recovery found neither in the logdir nor in the store. It stays
// (fsck, status and the metrics report it) until an admin clears it.
inline constexpr char kLostPrefix[] = "lost/";
// Meta: "set_aside_read/" + a file's name in kLostFoundName -> "": a blob
// file a writer's open set aside that a recovery has read for the files the
// store no longer knew (store/recovery.cc); never read again.
inline constexpr char kSetAsideReadPrefix[] = "set_aside_read/";
inline constexpr char kLastBaselineKey[] = "last";

// Chunk value: [codec u8][raw_len u32 LE][checksum u64 LE][payload]. The
// checksum is XXH3-64 of the raw bytes seeded with ChunkSeed(file id, chunk
// index, raw_len): a chunk read at another key (another file, another
// index) or of another length fails it. A chunk of a file with a head
// chunk (format 7, Manifest.head_chunk_bytes) has the head's length in its
// seed too: a tbfs that knows only whole first chunks would read chunk i
// at i * chunk_bytes, and fails it instead. Format 1 chunks (codecs 0 and
// 1) had an unseeded XXH3-64; they are read in a format-1 store only.
inline constexpr size_t kChunkHeaderBytes = 13;
inline constexpr uint8_t kChunkRawV1 = 0;   // payload is the raw bytes (format 1)
inline constexpr uint8_t kChunkZstdV1 = 1;  // payload is one zstd frame (format 1)
inline constexpr uint8_t kChunkRaw = 2;     // payload is the raw bytes
inline constexpr uint8_t kChunkZstd = 3;    // payload is one zstd frame
// Format 5: payload is one zstd frame made with a dictionary, whose id the
// frame header carries (ZSTD_getDictID_fromFrame): store/dictionary.h.
inline constexpr uint8_t kChunkZstdDict = 7;
// Format 8: payload is one zstd frame (9: made with a dictionary, as 7) of
// the chunk's bytes with their numbers rewritten as differences
// (store/number_deltas.h). The checksum is of the bytes as they were.
inline constexpr uint8_t kChunkZstdNumbers = 8;
inline constexpr uint8_t kChunkZstdDictNumbers = 9;
uint64_t ChunkSeed(uint64_t file_id, uint64_t index, uint32_t raw_len, uint32_t head);

// Manifest.codec: zstd chunks (a chunk may still be raw), and whether
// their numbers may go as differences: 1 written before format 8 (never
// tried), 2 some chunks did (8 or 9: the store is format 8), 3 none did.
inline constexpr uint32_t kCodecZstd = 1;
inline constexpr uint32_t kCodecZstdNumbers = 2;
inline constexpr uint32_t kCodecZstdNoNumbers = 3;

// 8-byte big-endian integers, so keys sort numerically.
std::string EncodeId(uint64_t id);
bool DecodeId(std::string_view key, uint64_t* id);

// Manifests and journal records: the id. Chunks: file id + chunk index.
std::string ChunkKey(uint64_t file_id, uint64_t index);
bool DecodeChunkKey(std::string_view key, uint64_t* file_id, uint64_t* index);

std::string RetiredKey(uint64_t file_id);

// Every manifest has a second copy in the chunks space, under the file's
// chunk index kManifestCopyIndex: it lands in the same blob files as the
// file's chunks, so losing the manifests space (one damaged table file)
// loses no file, and the blob files alone describe every file (salvage).
// Value: [kManifestCopy u8][length u32 LE][checksum u64 LE][Manifest], the
// checksum seeded like a chunk's (ChunkSeed(file id, kManifestCopyIndex,
// length)).
inline constexpr uint64_t kManifestCopyIndex = ~uint64_t{0};
inline constexpr uint8_t kManifestCopy = 4;
std::string ManifestCopyValue(uint64_t file_id, std::string_view manifest);
// The manifest bytes of a copy found at file_id's copy key; false when the
// value is not a whole, intact copy for that file.
bool ParseManifestCopy(uint64_t file_id, std::string_view value, std::string* manifest);

// Format 4 namespace: '/' + the parent folder's id (8 bytes BE; the top
// is kTopDirId) + name -> Entry. A folder's own record, DirLink (its parent
// and name), is at TreeLinkKey(id) = '/' + its id: the children of folder
// d are the keys longer than TreeLinkKey(d) that start with it. The '/'
// keeps these keys apart from format 2's (no path starts with '/'), which
// a store being converted holds beside them. Folder ids come from the file
// ids' counter: no id names both a file and a folder.
inline constexpr uint64_t kTopDirId = 0;
std::string TreeKey(uint64_t parent, std::string_view name);
std::string TreeLinkKey(uint64_t dir);
inline constexpr char kTreeKeyPrefix[] = "/";
// A folder's DirLink also has a copy with the chunks, at
// ChunkKey(dir id, kManifestCopyIndex), framed as a manifest copy with kind
// kDirCopy: salvage finds every folder's place from the blob files alone.
inline constexpr uint8_t kDirCopy = 5;
std::string DirCopyValue(uint64_t dir_id, std::string_view link);
bool ParseDirCopy(uint64_t dir_id, std::string_view value, std::string* link);

// Format 5 dictionaries. Each has a key id from the file ids' counter (no
// file or folder has it; its zstd id is derived from it: store/dictionary.h
// kDictIdBase) and is kept twice, as the same bytes: in the meta space at
// DictKey(key id), and with the chunks at ChunkKey(key id,
// kManifestCopyIndex), so the blob files alone hold every dictionary the
// chunks in them need (salvage). Value: a copy of kind kDictCopy (framed
// and checksummed as a manifest copy, seeded with the key id) of a
// storepb::Dictionary.
inline constexpr uint8_t kDictCopy = 6;
inline constexpr char kDictPrefix[] = "dict/";
std::string DictKey(uint64_t key_id);
std::string DictCopyValue(uint64_t key_id, std::string_view dictionary);
bool ParseDictCopy(uint64_t key_id, std::string_view value, std::string* dictionary);

// Formats 1 to 3 namespace: parent path ("" at the top) + '\0' + name. The direct children
// of a folder are exactly the keys with prefix ChildPrefix(folder).
std::string EntryKey(std::string_view rel_path);
std::string ChildPrefix(std::string_view folder_rel);
// Inverse of EntryKey.
std::string PathOfEntryKey(std::string_view key);

}  // namespace tbfs::store
