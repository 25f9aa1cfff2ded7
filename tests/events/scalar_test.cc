#include "events/scalar.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "events/proto/tfevents.pb.h"

namespace tbfs::events {
namespace {

std::string Scalar(pb::DataType dtype, const std::function<void(pb::TensorProto*)>& fill) {
  pb::TensorProto t;
  t.set_dtype(dtype);
  t.mutable_tensor_shape();
  fill(&t);
  return t.SerializeAsString();
}

template <typename T>
std::string LE(T v) {
  std::string s(sizeof(T), '\0');
  std::memcpy(s.data(), &v, sizeof(T));
  return s;
}

TEST(DecodeScalarTensor, TypedFields) {
  auto f = DecodeScalarTensor(Scalar(pb::DT_FLOAT, [](auto* t) { t->add_float_val(0.5f); }));
  ASSERT_TRUE(f);
  EXPECT_EQ(f->f, 0.5);
  auto d = DecodeScalarTensor(Scalar(pb::DT_DOUBLE, [](auto* t) { t->add_double_val(0.1); }));
  ASSERT_TRUE(d);
  EXPECT_EQ(d->f, 0.1);
  auto h = DecodeScalarTensor(Scalar(pb::DT_HALF, [](auto* t) { t->add_half_val(0x3c00); }));
  ASSERT_TRUE(h);
  EXPECT_EQ(h->f, 1.0);
  auto b = DecodeScalarTensor(Scalar(pb::DT_BFLOAT16, [](auto* t) { t->add_half_val(0xc000); }));
  ASSERT_TRUE(b);
  EXPECT_EQ(b->f, -2.0);
  auto i = DecodeScalarTensor(Scalar(pb::DT_INT64, [](auto* t) { t->add_int64_val(1LL << 60); }));
  ASSERT_TRUE(i);
  EXPECT_TRUE(i->is_integer);
  EXPECT_EQ(i->i, 1LL << 60);
  auto i32 = DecodeScalarTensor(Scalar(pb::DT_INT32, [](auto* t) { t->add_int_val(-4); }));
  ASSERT_TRUE(i32);
  EXPECT_EQ(i32->i, -4);
}

TEST(DecodeScalarTensor, LittleEndianContent) {
  auto f = DecodeScalarTensor(
      Scalar(pb::DT_FLOAT, [](auto* t) { t->set_tensor_content(LE<float>(2.5f)); }));
  ASSERT_TRUE(f);
  EXPECT_EQ(f->f, 2.5);
  auto d = DecodeScalarTensor(
      Scalar(pb::DT_DOUBLE, [](auto* t) { t->set_tensor_content(LE<double>(1e-300)); }));
  ASSERT_TRUE(d);
  EXPECT_EQ(d->f, 1e-300);
  auto h = DecodeScalarTensor(
      Scalar(pb::DT_HALF, [](auto* t) { t->set_tensor_content(LE<uint16_t>(0x7bff)); }));
  ASSERT_TRUE(h);
  EXPECT_EQ(h->f, 65504.0);
  auto u = DecodeScalarTensor(
      Scalar(pb::DT_UINT8, [](auto* t) { t->set_tensor_content(std::string(1, '\xff')); }));
  ASSERT_TRUE(u);
  EXPECT_EQ(u->i, 255);
}

TEST(DecodeScalarTensor, NonScalarsAreRejected) {
  pb::TensorProto vec;
  vec.set_dtype(pb::DT_FLOAT);
  vec.mutable_tensor_shape()->add_dim()->set_size(2);
  vec.add_float_val(1);
  vec.add_float_val(2);
  EXPECT_FALSE(DecodeScalarTensor(vec.SerializeAsString()));
  EXPECT_FALSE(
      DecodeScalarTensor(Scalar(pb::DT_STRING, [](auto* t) { t->add_string_val("hello"); })));
  EXPECT_FALSE(
      DecodeScalarTensor(Scalar(pb::DT_FLOAT, [](auto* t) { t->set_tensor_content("abc"); })));
  EXPECT_FALSE(DecodeScalarTensor(std::string("\xff\xff\xff", 3)));
}

TEST(HalfToFloat, Vectors) {
  EXPECT_EQ(HalfToFloat(0x0000), 0.0f);
  EXPECT_EQ(HalfToFloat(0x3c00), 1.0f);
  EXPECT_EQ(HalfToFloat(0xc000), -2.0f);
  EXPECT_EQ(HalfToFloat(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(HalfToFloat(0x3555), 0.333251953125f);
  EXPECT_TRUE(std::isinf(HalfToFloat(0x7c00)));
  EXPECT_TRUE(std::isnan(HalfToFloat(0x7e00)));
  EXPECT_EQ(Bfloat16ToFloat(0x3f80), 1.0f);
}

}  // namespace
}  // namespace tbfs::events
