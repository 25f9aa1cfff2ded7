// Reading chunk values straight out of the engine's blob files, without the
// engine: salvage's last resort when RocksDB cannot open the store (its
// MANIFEST or CURRENT damaged) or cannot find values through a damaged
// table file.
//
// A blob file is a 30-byte header, then records, then a 32-byte footer. A
// record is key length (u64 LE), value length (u64 LE), expiration (u64),
// a masked CRC32C of those 24 bytes, a masked CRC32C of key and value, the
// key and the value. Only the chunks space lives in blob files, so every
// key is a chunk key (16 bytes) and every value a chunk value or a manifest
// copy (store/format.h), each with a checksum bound to its key.
//
// The scan trusts nothing in the file: it finds records by their 16-byte
// key length, takes a value's length from a record header whose CRC holds,
// or else from the value itself (the chunk header and the zstd frame), and
// reports candidates; the caller believes a value only when its own bound
// checksum verifies. A damaged header or value costs that one value; the
// scan goes on with the next record.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "base/status.h"

namespace tbfs::store {

struct BlobCandidate {
  uint64_t file_id = 0;
  uint64_t index = 0;
  uint64_t offset = 0;  // of the value, in the blob file
  std::string_view value;
  // The record's header and its key-and-value checksums hold: key and value
  // are as the engine wrote them.
  bool checked = false;
};

// Calls fn on every record-shaped (key, value) in the blob file at `path`,
// in file order. IOError when the file cannot be read.
Status ScanBlobFile(const std::string& path, const std::function<void(const BlobCandidate&)>& fn);

// Whether the finished blob file at `path` reads as the engine reads it
// when a compaction copies its live chunks out: its header (magic number,
// version, column family `space_id`, no compression, no expiration), its
// footer (magic number, CRC, no expiration, the count of its records), and
// every record (header CRC, key-and-value CRC), ending where the footer
// begins. Any damaged record counts, a deleted chunk's too: with the key
// under the same CRC as the value, a damaged key cannot be told from the
// key of a chunk deleted since (red team: a flipped byte in a live chunk's
// key read as a deleted chunk, and the compaction then failed). Corruption
// naming the file and what is wrong where; IOError when it cannot be read
// (or is no regular file: never opened blocking, a FIFO would hang).
Status CheckBlobFile(const std::string& path, uint32_t space_id);

// The key of the first record of the blob file at `path`, when the file's
// header and the record's header (its CRC) hold, the key is a chunk key's
// length and the value at most `max_value` bytes; "" otherwise (nothing
// is believed beyond that: the caller only reads the key). Reads 78 bytes.
std::string FirstBlobKey(const std::string& path, uint64_t max_value);

}  // namespace tbfs::store
