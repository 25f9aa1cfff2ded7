#include "events/scalar.h"

#include <bit>
#include <cmath>
#include <cstring>

#include "events/proto/tfevents.pb.h"

namespace tbfs::events {

namespace {

template <typename T>
T LoadLE(const char* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

ScalarValue Float(double v) { return ScalarValue{false, v, 0}; }
ScalarValue Int(int64_t v) { return ScalarValue{true, 0, v}; }

size_t ElementCount(const pb::TensorShapeProto& shape) {
  if (shape.unknown_rank()) return 0;
  size_t n = 1;
  for (const auto& dim : shape.dim()) {
    if (dim.size() < 0) return 0;
    n *= static_cast<size_t>(dim.size());
  }
  return n;
}

std::optional<ScalarValue> FromContent(pb::DataType dtype, const std::string& c) {
  auto need = [&](size_t n) { return c.size() == n; };
  switch (dtype) {
    case pb::DT_FLOAT:
      if (need(4)) return Float(LoadLE<float>(c.data()));
      break;
    case pb::DT_DOUBLE:
      if (need(8)) return Float(LoadLE<double>(c.data()));
      break;
    case pb::DT_HALF:
      if (need(2)) return Float(HalfToFloat(LoadLE<uint16_t>(c.data())));
      break;
    case pb::DT_BFLOAT16:
      if (need(2)) return Float(Bfloat16ToFloat(LoadLE<uint16_t>(c.data())));
      break;
    case pb::DT_INT8:
      if (need(1)) return Int(LoadLE<int8_t>(c.data()));
      break;
    case pb::DT_UINT8:
      if (need(1)) return Int(LoadLE<uint8_t>(c.data()));
      break;
    case pb::DT_INT16:
      if (need(2)) return Int(LoadLE<int16_t>(c.data()));
      break;
    case pb::DT_UINT16:
      if (need(2)) return Int(LoadLE<uint16_t>(c.data()));
      break;
    case pb::DT_INT32:
      if (need(4)) return Int(LoadLE<int32_t>(c.data()));
      break;
    case pb::DT_UINT32:
      if (need(4)) return Int(LoadLE<uint32_t>(c.data()));
      break;
    case pb::DT_INT64:
      if (need(8)) return Int(LoadLE<int64_t>(c.data()));
      break;
    case pb::DT_UINT64:
      if (need(8)) return Int(static_cast<int64_t>(LoadLE<uint64_t>(c.data())));
      break;
    case pb::DT_BOOL:
      if (need(1)) return Int(c[0] != 0);
      break;
    default:
      break;
  }
  return std::nullopt;
}

std::optional<ScalarValue> FromTypedField(const pb::TensorProto& t) {
  switch (t.dtype()) {
    case pb::DT_FLOAT:
      if (t.float_val_size() == 1) return Float(t.float_val(0));
      break;
    case pb::DT_DOUBLE:
      if (t.double_val_size() == 1) return Float(t.double_val(0));
      break;
    case pb::DT_HALF:
      if (t.half_val_size() == 1) return Float(HalfToFloat(static_cast<uint16_t>(t.half_val(0))));
      break;
    case pb::DT_BFLOAT16:
      if (t.half_val_size() == 1) {
        return Float(Bfloat16ToFloat(static_cast<uint16_t>(t.half_val(0))));
      }
      break;
    case pb::DT_INT8:
    case pb::DT_UINT8:
    case pb::DT_INT16:
    case pb::DT_UINT16:
    case pb::DT_INT32:
      if (t.int_val_size() == 1) return Int(t.int_val(0));
      break;
    case pb::DT_INT64:
      if (t.int64_val_size() == 1) return Int(t.int64_val(0));
      break;
    case pb::DT_UINT32:
      if (t.uint32_val_size() == 1) return Int(t.uint32_val(0));
      break;
    case pb::DT_UINT64:
      if (t.uint64_val_size() == 1) return Int(static_cast<int64_t>(t.uint64_val(0)));
      break;
    case pb::DT_BOOL:
      if (t.bool_val_size() == 1) return Int(t.bool_val(0));
      break;
    default:
      break;
  }
  return std::nullopt;
}

}  // namespace

void ScalarValue::Canonical(unsigned char out[9]) const {
  out[0] = is_integer ? 1 : 0;
  uint64_t bits = is_integer ? static_cast<uint64_t>(i) : std::bit_cast<uint64_t>(f);
  for (int k = 0; k < 8; ++k) out[1 + k] = static_cast<unsigned char>(bits >> (8 * k));
}

float HalfToFloat(uint16_t h) {
  uint32_t sign = (h >> 15) & 1;
  uint32_t exp = (h >> 10) & 0x1f;
  uint32_t mant = h & 0x3ff;
  float v;
  if (exp == 0) {
    v = std::ldexp(static_cast<float>(mant), -24);  // subnormal or zero
  } else if (exp == 31) {
    v = mant == 0 ? INFINITY : NAN;
  } else {
    v = std::ldexp(static_cast<float>(mant | 0x400), static_cast<int>(exp) - 25);
  }
  return sign ? -v : v;
}

float Bfloat16ToFloat(uint16_t bits) {
  return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16);
}

std::optional<ScalarValue> DecodeScalarTensor(std::string_view bytes) {
  thread_local pb::TensorProto tensor;  // reused: parsing a scalar allocates nothing
  if (!tensor.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) return std::nullopt;
  if (ElementCount(tensor.tensor_shape()) != 1) return std::nullopt;
  if (!tensor.tensor_content().empty()) return FromContent(tensor.dtype(), tensor.tensor_content());
  return FromTypedField(tensor);
}

}  // namespace tbfs::events
