#include "events/digest.h"

#include <fcntl.h>
#include <xxhash.h>

#include <bit>
#include <cstring>
#include <memory>

#include "events/event_view.h"

namespace tbfs::events {

namespace {

void PutLE64(uint64_t v, unsigned char* p) {
  for (int k = 0; k < 8; ++k) p[k] = static_cast<unsigned char>(v >> (8 * k));
}

std::string_view ImplicitPlugin(ValueKind kind) {
  switch (kind) {
    case ValueKind::kSimpleValue:
      return kPluginScalars;
    case ValueKind::kOldHistogram:
    case ValueKind::kHisto:
      return kPluginHistograms;
    case ValueKind::kImage:
      return kPluginImages;
    case ValueKind::kAudio:
      return kPluginAudio;
    default:
      return {};
  }
}

// Folds one value into its tag's digest.
void AddValue(const EventView& event, const ValueView& value, TagDigest* tag) {
  if (tag->plugin.empty()) {
    std::string_view plugin = value.has_metadata ? PluginName(value.metadata) : std::string_view();
    if (plugin.empty()) plugin = ImplicitPlugin(value.kind);
    tag->plugin.assign(plugin);
  }
  std::optional<ScalarValue> scalar;
  if (value.kind == ValueKind::kSimpleValue) {
    scalar = ScalarValue{false, static_cast<double>(value.simple_value), 0};
  } else if (value.kind == ValueKind::kTensor &&
             (tag->plugin.empty() || tag->plugin == kPluginScalars)) {
    scalar = DecodeScalarTensor(value.payload);
  }

  unsigned char head[8 + 8 + 1 + 9];
  PutLE64(static_cast<uint64_t>(event.step), head);
  PutLE64(std::bit_cast<uint64_t>(event.wall_time), head + 8);
  head[16] = static_cast<unsigned char>(value.kind);
  size_t head_len = 17;
  if (scalar) {
    scalar->Canonical(head + 17);
    head_len += 9;
  }
  uint64_t h = XXH3_64bits_withSeed(head, head_len, tag->hash);
  if (!scalar) h = XXH3_64bits_withSeed(value.payload.data(), value.payload.size(), h);
  tag->hash = h;

  if (tag->count == 0) tag->first_step = event.step;
  tag->count++;
  tag->last_step = event.step;
  tag->last_wall_time = event.wall_time;
  tag->last_scalar = scalar;
}

}  // namespace

Status DigestFile(const std::string& root, const std::string& rel_path, FileDigest* out,
                  uint64_t limit_offset, std::atomic<uint64_t>* bytes_done) {
  *out = FileDigest();
  out->path = rel_path;
  const std::string abs_path = JoinPath(root, rel_path);
  auto fd = OpenRegularUnder(root, rel_path);
  if (!fd.ok()) return fd.status();
  std::unique_ptr<RecordReader> reader =
      RecordReader::Open(std::move(fd).value(), abs_path, 0, limit_offset);

  uint64_t next_checkpoint = kCheckpointBytes;
  EventView event;
  RecordView record;
  uint64_t unreported = 0;
  Status status;

  while (reader->Next(&record)) {
    status = ParseEvent(record.data, &event);
    if (!status.ok()) {
      status = Status::Corruption(abs_path + ": " + status.message() + " at offset " +
                                  std::to_string(record.offset));
      break;
    }
    out->records++;
    out->offset_bytes = record.offset + record.framed.size();
    if (event.values.empty()) {
      out->other_bytes += record.framed.size();
    }
    for (size_t i = 0; i < event.values.size(); ++i) {
      const ValueView& value = event.values[i];
      auto it = out->tags.find(value.tag);
      if (it == out->tags.end()) it = out->tags.emplace(std::string(value.tag), TagDigest()).first;
      AddValue(event, value, &it->second);
      if (i == 0) it->second.record_bytes += record.framed.size();
    }
    if (out->offset_bytes >= next_checkpoint) {
      out->checkpoints.push_back({out->offset_bytes, reader->ContentHash()});
      next_checkpoint = out->offset_bytes + kCheckpointBytes;
    }
    unreported += record.framed.size();
    if (bytes_done != nullptr && unreported >= (1 << 20)) {
      bytes_done->fetch_add(unreported, std::memory_order_relaxed);
      unreported = 0;
    }
  }
  if (bytes_done != nullptr) bytes_done->fetch_add(unreported, std::memory_order_relaxed);
  if (status.ok()) status = reader->status();
  out->partial_tail = status.ok() && reader->partial_tail();
  out->content_hash = reader->ContentHash();
  return status;
}

}  // namespace tbfs::events
