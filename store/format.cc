#include "store/format.h"

#include <xxhash.h>

#include <cstring>

namespace tbfs::store {

std::string EncodeId(uint64_t id) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>(id >> (56 - 8 * i));
  return out;
}

bool DecodeId(std::string_view key, uint64_t* id) {
  if (key.size() < 8) return false;
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v = (v << 8) | static_cast<unsigned char>(key[i]);
  *id = v;
  return true;
}

uint64_t ChunkSeed(uint64_t file_id, uint64_t index, uint32_t raw_len, uint32_t head) {
  std::string key = EncodeId(file_id) + EncodeId(index);
  for (int i = 0; i < 4; ++i) key.push_back(static_cast<char>(raw_len >> (8 * i)));
  for (int i = 0; head != 0 && i < 4; ++i) key.push_back(static_cast<char>(head >> (8 * i)));
  return XXH3_64bits(key.data(), key.size());
}

std::string ChunkKey(uint64_t file_id, uint64_t index) {
  return EncodeId(file_id) + EncodeId(index);
}

bool DecodeChunkKey(std::string_view key, uint64_t* file_id, uint64_t* index) {
  return key.size() == 16 && DecodeId(key, file_id) && DecodeId(key.substr(8), index);
}

std::string RetiredKey(uint64_t file_id) { return kRetiredPrefix + EncodeId(file_id); }

namespace {

uint64_t CopyChecksum(uint64_t file_id, std::string_view manifest) {
  const uint32_t len = static_cast<uint32_t>(manifest.size());
  return XXH3_64bits_withSeed(manifest.data(), manifest.size(),
                              ChunkSeed(file_id, kManifestCopyIndex, len, 0));
}

}  // namespace

namespace {

std::string CopyValue(uint8_t kind, uint64_t file_id, std::string_view manifest) {
  std::string value(kChunkHeaderBytes, '\0');
  value[0] = static_cast<char>(kind);
  const uint32_t len = static_cast<uint32_t>(manifest.size());
  const uint64_t sum = CopyChecksum(file_id, manifest);
  std::memcpy(value.data() + 1, &len, 4);
  std::memcpy(value.data() + 5, &sum, 8);
  value.append(manifest);
  return value;
}

bool ParseCopy(uint8_t kind, uint64_t file_id, std::string_view value, std::string* manifest) {
  if (value.size() < kChunkHeaderBytes || static_cast<uint8_t>(value[0]) != kind) return false;
  uint32_t len;
  uint64_t sum;
  std::memcpy(&len, value.data() + 1, 4);
  std::memcpy(&sum, value.data() + 5, 8);
  std::string_view bytes = value.substr(kChunkHeaderBytes);
  if (bytes.size() != len || CopyChecksum(file_id, bytes) != sum) return false;
  manifest->assign(bytes);
  return true;
}

}  // namespace

std::string ManifestCopyValue(uint64_t file_id, std::string_view manifest) {
  return CopyValue(kManifestCopy, file_id, manifest);
}

bool ParseManifestCopy(uint64_t file_id, std::string_view value, std::string* manifest) {
  return ParseCopy(kManifestCopy, file_id, value, manifest);
}

std::string DirCopyValue(uint64_t dir_id, std::string_view link) {
  return CopyValue(kDirCopy, dir_id, link);
}

bool ParseDirCopy(uint64_t dir_id, std::string_view value, std::string* link) {
  return ParseCopy(kDirCopy, dir_id, value, link);
}

std::string DictKey(uint64_t key_id) { return kDictPrefix + EncodeId(key_id); }

std::string DictCopyValue(uint64_t key_id, std::string_view dictionary) {
  return CopyValue(kDictCopy, key_id, dictionary);
}

bool ParseDictCopy(uint64_t key_id, std::string_view value, std::string* dictionary) {
  return ParseCopy(kDictCopy, key_id, value, dictionary);
}

std::string TreeLinkKey(uint64_t dir) { return kTreeKeyPrefix + EncodeId(dir); }

std::string TreeKey(uint64_t parent, std::string_view name) {
  std::string key = TreeLinkKey(parent);
  key.append(name);
  return key;
}

std::string EntryKey(std::string_view rel_path) {
  size_t slash = rel_path.find_last_of('/');
  std::string key;
  if (slash != std::string_view::npos) key.assign(rel_path.substr(0, slash));
  key.push_back('\0');
  key.append(slash == std::string_view::npos ? rel_path : rel_path.substr(slash + 1));
  return key;
}

std::string ChildPrefix(std::string_view folder_rel) {
  std::string p(folder_rel);
  p.push_back('\0');
  return p;
}

std::string PathOfEntryKey(std::string_view key) {
  size_t zero = key.find('\0');
  if (zero == std::string_view::npos) return std::string(key);
  std::string_view parent = key.substr(0, zero), name = key.substr(zero + 1);
  if (parent.empty()) return std::string(name);
  return std::string(parent) + "/" + std::string(name);
}

}  // namespace tbfs::store
