#include "events/event_view.h"

#include <gtest/gtest.h>

#include "events/proto/tfevents.pb.h"

namespace tbfs::events {
namespace {

TEST(ParseEvent, FileVersionEvent) {
  pb::Event e;
  e.set_wall_time(1.5);
  e.set_file_version("brain.Event:2");
  std::string bytes = e.SerializeAsString();  // views point into it
  EventView v;
  ASSERT_TRUE(ParseEvent(bytes, &v).ok());
  EXPECT_EQ(v.what, kEventFileVersion);
  EXPECT_EQ(v.file_version, "brain.Event:2");
  EXPECT_DOUBLE_EQ(v.wall_time, 1.5);
  EXPECT_TRUE(v.values.empty());
}

TEST(ParseEvent, SummaryValuesKeepTheirBytes) {
  pb::Event e;
  e.set_wall_time(2.0);
  e.set_step(-7);
  auto* s = e.mutable_summary();
  auto* a = s->add_value();
  a->set_tag("loss");
  a->set_simple_value(0.25f);
  auto* b = s->add_value();
  b->set_tag("w");
  b->mutable_histo()->set_num(3);
  b->mutable_metadata()->mutable_plugin_data()->set_plugin_name("histograms");
  std::string bytes = e.SerializeAsString();
  EventView v;
  ASSERT_TRUE(ParseEvent(bytes, &v).ok());
  EXPECT_EQ(v.step, -7);
  ASSERT_EQ(v.values.size(), 2u);
  EXPECT_EQ(v.values[0].tag, "loss");
  EXPECT_EQ(v.values[0].kind, ValueKind::kSimpleValue);
  EXPECT_FLOAT_EQ(v.values[0].simple_value, 0.25f);
  EXPECT_FALSE(v.values[0].has_metadata);
  EXPECT_EQ(v.values[1].kind, ValueKind::kHisto);
  EXPECT_EQ(v.values[1].payload, b->histo().SerializeAsString());
  EXPECT_EQ(PluginName(v.values[1].metadata), "histograms");
}

TEST(ParseEvent, UnknownFieldsAreSkipped) {
  pb::Event e;
  e.set_step(3);
  e.mutable_summary()->add_value()->set_tag("t");
  std::string bytes = e.SerializeAsString();
  bytes += std::string("\xa8\x06\x01", 3);  // field 101, varint 1
  EventView v;
  ASSERT_TRUE(ParseEvent(bytes, &v).ok());
  EXPECT_EQ(v.step, 3);
  ASSERT_EQ(v.values.size(), 1u);
}

TEST(ParseEvent, GarbageIsCorruption) {
  EventView v;
  EXPECT_TRUE(ParseEvent(std::string("\x2a\xff\xff\xff\x0f", 5), &v).IsCorruption());
  EXPECT_TRUE(ParseEvent(std::string("\x2a\x05\x0a\x09", 4), &v).IsCorruption());
  EXPECT_TRUE(ParseEvent(std::string("\xff\xff", 2), &v).IsCorruption());
  EXPECT_TRUE(ParseEvent("", &v).ok());  // an empty Event is valid protobuf
}

// Every kind of unknown field, and every malformed one, is judged as
// protobuf's own parser judges it: the walker accepts exactly the bytes
// pb::Event accepts.
TEST(ParseEvent, UnknownFieldsOfEveryWireTypeAgreeWithProtobuf) {
  pb::Event e;
  e.set_step(5);
  e.mutable_summary()->add_value()->set_tag("t");
  const std::string valid = e.SerializeAsString();
  struct Case {
    const char* what;
    std::string tail;
  } cases[] = {
      {"varint", std::string("\xa8\x06\x96\x01", 4)},  // field 101
      {"fixed64", std::string("\xa9\x06", 2) + std::string(8, '\x01')},
      {"length", std::string("\xaa\x06\x03"
                             "abc",
                             5)},
      {"fixed32", std::string("\xad\x06", 2) + std::string(4, '\x02')},
      {"group", std::string("\xab\x06\x08\x01\xac\x06", 6)},  // {field 1: 1}
      {"nested group", std::string("\xab\x06\xb3\x06\xb4\x06\xac\x06", 8)},
      {"unterminated group", std::string("\xab\x06\x08\x01", 4)},
      {"group ended by another field's tag", std::string("\xab\x06\xb4\x06", 4)},
      {"end tag with no group", std::string("\xac\x06", 2)},
      {"wire type 6", std::string("\xae\x06\x00", 3)},
      {"wire type 7", std::string("\xaf\x06\x00", 3)},
      {"fixed64 cut short", std::string("\xa9\x06\x01\x02", 4)},
      {"length past the end", std::string("\xaa\x06\x09"
                                          "ab",
                                          5)},
  };
  for (const Case& c : cases) {
    std::string bytes = valid + c.tail;
    pb::Event parsed;
    bool protobuf_ok = parsed.ParseFromString(bytes);
    EventView v;
    Status st = ParseEvent(bytes, &v);
    EXPECT_EQ(st.ok(), protobuf_ok) << c.what << ": " << st.ToString();
    if (st.ok()) {
      EXPECT_EQ(v.step, 5) << c.what;
      EXPECT_EQ(v.values.size(), 1u) << c.what;
    }
  }
}

TEST(PluginName, MissingPluginDataIsEmpty) {
  pb::SummaryMetadata md;
  md.set_display_name("x");
  EXPECT_EQ(PluginName(md.SerializeAsString()), "");
  EXPECT_EQ(PluginName(""), "");
}

}  // namespace
}  // namespace tbfs::events
