#include "events/event_view.h"

#include <google/protobuf/io/coded_stream.h>

#include <bit>
#include <climits>
#include <cstring>

namespace tbfs::events {

namespace {

using google::protobuf::io::CodedInputStream;

// The protobuf wire format (protobuf.dev/programming-guides/encoding): a
// tag is (field number << 3) | wire type.
constexpr int kVarint = 0;
constexpr int kFixed64 = 1;
constexpr int kLen = 2;
constexpr int kStartGroup = 3;
constexpr int kEndGroup = 4;
constexpr int kFixed32 = 5;
// Groups nested deeper than protobuf's own parser allows are malformed.
constexpr int kMaxGroupDepth = 100;

constexpr int FieldOf(uint32_t tag) { return static_cast<int>(tag >> 3); }
constexpr int WireOf(uint32_t tag) { return static_cast<int>(tag & 7); }
constexpr uint32_t MakeTag(int field, int wire) {
  return (static_cast<uint32_t>(field) << 3) | static_cast<uint32_t>(wire);
}

// A CodedInputStream over a view that can hand out sub-views.
class WireReader {
 public:
  explicit WireReader(std::string_view bytes)
      : base_(reinterpret_cast<const uint8_t*>(bytes.data())),
        in_(base_, static_cast<int>(bytes.size())) {}

  // Next field; false at the end.
  bool NextTag(uint32_t* tag) {
    *tag = in_.ReadTag();
    return *tag != 0;
  }
  bool ReadLen(std::string_view* out) {
    uint32_t len;
    if (!in_.ReadVarint32(&len)) return false;
    int pos = in_.CurrentPosition();
    if (!in_.Skip(static_cast<int>(len))) return false;
    *out = std::string_view(reinterpret_cast<const char*>(base_) + pos, len);
    return true;
  }
  bool ReadFixed64(uint64_t* v) { return in_.ReadLittleEndian64(v); }
  bool ReadFixed32(uint32_t* v) { return in_.ReadLittleEndian32(v); }
  bool ReadVarint64(uint64_t* v) { return in_.ReadVarint64(v); }
  // Skips the value of the field `tag` opened; false when it is malformed.
  bool Skip(uint32_t tag, int depth = 0) {
    switch (WireOf(tag)) {
      case kVarint: {
        uint64_t v;
        return in_.ReadVarint64(&v);
      }
      case kFixed64:
        return in_.Skip(8);
      case kLen: {
        uint32_t len;
        return in_.ReadVarint32(&len) && len <= static_cast<uint32_t>(INT32_MAX) &&
               in_.Skip(static_cast<int>(len));
      }
      case kFixed32:
        return in_.Skip(4);
      case kStartGroup: {  // deprecated, still valid: skip to its end tag
        if (depth >= kMaxGroupDepth) return false;
        uint32_t inner;
        while ((inner = in_.ReadTag()) != 0) {
          if (inner == MakeTag(FieldOf(tag), kEndGroup)) return true;
          if (!Skip(inner, depth + 1)) return false;
        }
        return false;
      }
      default:  // an end tag with no group open, or wire types 6 and 7
        return false;
    }
  }
  // After NextTag() returned false: true for a clean end of the bytes,
  // false when a malformed tag stopped the walk.
  bool AtCleanEnd() { return in_.ConsumedEntireMessage(); }

 private:
  const uint8_t* base_;
  CodedInputStream in_;
};

bool ParseValue(std::string_view bytes, ValueView* v) {
  WireReader r(bytes);
  uint32_t tag;
  while (r.NextTag(&tag)) {
    int field = FieldOf(tag);
    int wire = WireOf(tag);
    bool ok = true;
    if (field == 1 && wire == kLen) {
      ok = r.ReadLen(&v->tag);
    } else if (field == 9 && wire == kLen) {
      ok = r.ReadLen(&v->metadata);
      v->has_metadata = ok;
    } else if (field == 2 && wire == kFixed32) {
      uint32_t bits;
      ok = r.ReadFixed32(&bits);
      v->simple_value = std::bit_cast<float>(bits);
      v->kind = ValueKind::kSimpleValue;
      v->payload = {};
    } else if ((field == 3 || field == 4 || field == 5 || field == 6 || field == 8) &&
               wire == kLen) {
      ok = r.ReadLen(&v->payload);
      v->kind = static_cast<ValueKind>(field);
    } else {
      ok = r.Skip(tag);
    }
    if (!ok) return false;
  }
  return r.AtCleanEnd();
}

bool ParseSummary(std::string_view bytes, std::vector<ValueView>* values) {
  WireReader r(bytes);
  uint32_t tag;
  while (r.NextTag(&tag)) {
    if (tag == MakeTag(1, kLen)) {
      std::string_view value_bytes;
      if (!r.ReadLen(&value_bytes)) return false;
      values->emplace_back();
      if (!ParseValue(value_bytes, &values->back())) return false;
    } else if (!r.Skip(tag)) {
      return false;
    }
  }
  return r.AtCleanEnd();
}

}  // namespace

Status ParseEvent(std::string_view record, EventView* event) {
  event->wall_time = 0;
  event->step = 0;
  event->what = 0;
  event->file_version = {};
  event->values.clear();
  if (record.size() > static_cast<size_t>(INT32_MAX)) {
    return Status::Corruption("event record too large to parse");
  }
  WireReader r(record);
  uint32_t tag;
  while (r.NextTag(&tag)) {
    int field = FieldOf(tag);
    int wire = WireOf(tag);
    bool ok = true;
    if (field == 1 && wire == kFixed64) {
      uint64_t bits;
      ok = r.ReadFixed64(&bits);
      event->wall_time = std::bit_cast<double>(bits);
    } else if (field == 2 && wire == kVarint) {
      uint64_t v;
      ok = r.ReadVarint64(&v);
      event->step = static_cast<int64_t>(v);
    } else if (field == kEventFileVersion && wire == kLen) {
      ok = r.ReadLen(&event->file_version);
      event->what = field;
      event->values.clear();
    } else if (field == kEventSummary && wire == kLen) {
      std::string_view summary;
      ok = r.ReadLen(&summary);
      event->what = field;
      event->values.clear();
      ok = ok && ParseSummary(summary, &event->values);
    } else {
      if (field >= 4 && field <= 9) event->what = field;
      ok = r.Skip(tag);
    }
    if (!ok) return Status::Corruption("record is not a valid Event protobuf");
  }
  if (!r.AtCleanEnd()) return Status::Corruption("record is not a valid Event protobuf");
  return Status::OK();
}

std::string_view PluginName(std::string_view metadata) {
  WireReader r(metadata);
  uint32_t tag;
  std::string_view plugin_data;
  bool found = false;
  while (r.NextTag(&tag)) {
    if (tag == MakeTag(1, kLen)) {
      found = r.ReadLen(&plugin_data);
      if (!found) return {};
    } else if (!r.Skip(tag)) {
      return {};
    }
  }
  if (!found) return {};
  WireReader p(plugin_data);
  std::string_view name;
  while (p.NextTag(&tag)) {
    if (tag == MakeTag(1, kLen)) {
      if (!p.ReadLen(&name)) return {};
    } else if (!p.Skip(tag)) {
      return {};
    }
  }
  return name;
}

}  // namespace tbfs::events
