// Zero-copy views of an Event record's fields.
//
// The verifier reads every record of every tfevents file, so it does not
// build protobuf message objects: it walks the wire format with protobuf's
// CodedInputStream and keeps views into the record bytes. The payload of a
// summary value is kept exactly as it is in the file, so digests hash what
// is on disk, not a re-serialisation. Field numbers: events/proto/tfevents.proto.
//
// Views are valid as long as the record bytes are. Thread-compatible.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace tbfs::events {

// Field numbers of the Summary.Value `value` oneof.
enum class ValueKind : int {
  kNone = 0,
  kSimpleValue = 2,
  kOldHistogram = 3,
  kImage = 4,
  kHisto = 5,
  kAudio = 6,
  kTensor = 8,
};

struct ValueView {
  std::string_view tag;
  std::string_view metadata;  // serialized SummaryMetadata; empty when absent
  bool has_metadata = false;
  ValueKind kind = ValueKind::kNone;
  float simple_value = 0;    // when kind == kSimpleValue
  std::string_view payload;  // raw bytes of the oneof field otherwise
};

// Field numbers of the Event `what` oneof that tbfs cares about.
inline constexpr int kEventFileVersion = 3;
inline constexpr int kEventSummary = 5;

struct EventView {
  double wall_time = 0;
  int64_t step = 0;
  int what = 0;  // field number of `what`; 0 when unset
  std::string_view file_version;
  std::vector<ValueView> values;  // the summary's values, in order
};

// Parses one Event record into *event (reusing its storage). Returns
// Corruption when the bytes are not a valid Event.
Status ParseEvent(std::string_view record, EventView* event);

// The plugin_data.plugin_name of a serialized SummaryMetadata ("" if none).
std::string_view PluginName(std::string_view metadata);

}  // namespace tbfs::events
