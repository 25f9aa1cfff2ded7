// Scalar values as TensorBoard's scalars dashboard sees them.
//
// A scalar is either a Summary.Value.simple_value (PyTorch, TF1) or a
// TensorProto holding exactly one number (TF2 / Keras, PyTorch with
// new_style): float, double, half, bfloat16 or an integer type, stored in
// the typed *_val fields or little-endian in tensor_content.
//
// A ScalarValue keeps the number exactly: floating types are widened to
// double without loss, integers stay 64-bit integers. Thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace tbfs::events {

struct ScalarValue {
  bool is_integer = false;
  double f = 0;   // when !is_integer
  int64_t i = 0;  // when is_integer (uint64 values keep their bits)

  // 9 bytes, fixed byte order: the form hashed by digests.
  void Canonical(unsigned char out[9]) const;
  bool operator==(const ScalarValue& o) const = default;
};

// The single number held by a serialized TensorProto, or nullopt when it is
// not a one-element numeric tensor (or does not parse).
std::optional<ScalarValue> DecodeScalarTensor(std::string_view tensor_proto);

// IEEE half and bfloat16 bit patterns to float, exactly.
float HalfToFloat(uint16_t bits);
float Bfloat16ToFloat(uint16_t bits);

}  // namespace tbfs::events
