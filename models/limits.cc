#include "models/limits.h"

#include <cmath>
#include <cstdio>

namespace stateflow::models {
namespace {

// Shortest form that reads back: 65536, 1e+18, 3600, 0.5.
std::string Num(double v) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.6g", v);
  return text;
}

// Appended piece by piece: GCC 12 at -O3 warns (-Wrestrict, a false
// positive: its bug 105329) on `"[" + std::string(...)`.
std::string OutOfRange(std::string_view field, const std::string& range, const std::string& got) {
  std::string text(field);
  text.append(" must be in ").append(range).append(" (got ").append(got).append(")");
  return text;
}

}  // namespace

std::string RangeText(const IntRange& range) {
  std::string text("[");
  text.append(std::to_string(range.lo)).append(", ").append(std::to_string(range.hi)).append("]");
  return text;
}

std::string RangeText(const RealRange& range) {
  std::string text(range.lo_open ? "(" : "[");
  text.append(Num(range.lo)).append(", ").append(Num(range.hi)).append("]");
  return text;
}

Status CheckRange(std::string_view field, std::uint64_t value, const IntRange& range) {
  if (value <= static_cast<std::uint64_t>(INT64_MAX)) {
    return CheckRange(field, static_cast<std::int64_t>(value), range);
  }
  return Status::Invalid(OutOfRange(field, RangeText(range), std::to_string(value)));
}

Status CheckRange(std::string_view field, std::int64_t value, const IntRange& range) {
  if (value >= range.lo && value <= range.hi) return Status::Ok();
  return Status::Invalid(OutOfRange(field, RangeText(range), std::to_string(value)));
}

Status CheckRange(std::string_view field, double value, const RealRange& range) {
  const bool above_lo = range.lo_open ? value > range.lo : value >= range.lo;
  if (above_lo && value <= range.hi) return Status::Ok();  // false for NaN
  return Status::Invalid(OutOfRange(field, RangeText(range), Num(value)));
}

}  // namespace stateflow::models
