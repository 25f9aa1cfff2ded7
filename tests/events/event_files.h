// Building tfevents files for tests.
#pragma once

#include <string>
#include <vector>

#include "events/proto/tfevents.pb.h"
#include "events/record.h"
#include "tests/test_util.h"

namespace tbfs::testing {

inline pb::Event FileVersion(double wall_time = 1000.0) {
  pb::Event e;
  e.set_wall_time(wall_time);
  e.set_file_version("brain.Event:2");
  return e;
}

inline pb::Event SimpleScalar(const std::string& tag, int64_t step, float value,
                              double wall_time = 0) {
  pb::Event e;
  e.set_wall_time(wall_time != 0 ? wall_time : 1000.0 + static_cast<double>(step));
  e.set_step(step);
  auto* v = e.mutable_summary()->add_value();
  v->set_tag(tag);
  v->set_simple_value(value);
  return e;
}

// A TF2 scalar: float tensor_content, metadata only when asked.
inline pb::Event TensorScalar(const std::string& tag, int64_t step, float value,
                              bool with_metadata) {
  pb::Event e;
  e.set_wall_time(1000.0 + static_cast<double>(step));
  e.set_step(step);
  auto* v = e.mutable_summary()->add_value();
  v->set_tag(tag);
  if (with_metadata) v->mutable_metadata()->mutable_plugin_data()->set_plugin_name("scalars");
  auto* t = v->mutable_tensor();
  t->set_dtype(pb::DT_FLOAT);
  t->mutable_tensor_shape();
  std::string content(4, '\0');
  std::memcpy(content.data(), &value, 4);
  t->set_tensor_content(content);
  return e;
}

inline std::string Frame(const std::vector<pb::Event>& events) {
  std::string out;
  for (const auto& e : events) events::AppendFramedRecord(e.SerializeAsString(), &out);
  return out;
}

inline void WriteEvents(const std::string& path, const std::vector<pb::Event>& events) {
  WriteBytes(path, Frame(events));
}

inline void AppendEvents(const std::string& path, const std::vector<pb::Event>& events) {
  WriteBytes(path, ReadBytes(path) + Frame(events));
}

}  // namespace tbfs::testing
