#include "schedule/action.h"

#include <charconv>
#include <system_error>

namespace stateflow::schedule {
namespace {

// Reads a non-negative decimal int at text[*pos]; advances *pos past it.
// Returns false (and leaves *pos) if there is no digit there; sets
// *overflow if the digits do not fit in an int.
bool ReadNumber(std::string_view text, std::size_t* pos, int* value,
                bool* overflow) {
  const char* first = text.data() + *pos;
  const char* last = text.data() + text.size();
  if (first == last || *first < '0' || *first > '9') return false;
  auto [end, ec] = std::from_chars(first, last, *value);
  *overflow = (ec == std::errc::result_out_of_range);
  if (*overflow) {
    while (end != last && *end >= '0' && *end <= '9') ++end;
  }
  *pos = static_cast<std::size_t>(end - text.data());
  return true;
}

Status Bad(std::string_view text, const std::string& problem) {
  return Status::Invalid("bad action '" + std::string(text) + "': " + problem);
}

}  // namespace

char PassLetter(Pass pass) {
  switch (pass) {
    case Pass::kForward:
      return 'F';
    case Pass::kBackward:
      return 'B';
    case Pass::kWeight:
      return 'W';
  }
  return '?';
}

std::string ToString(const Action& action) {
  std::string text = std::to_string(action.stage);
  text += PassLetter(action.pass);
  text += std::to_string(action.microbatch);
  text += '.';
  text += std::to_string(action.chunk);
  return text;
}

Result<Action> ParseAction(std::string_view text) {
  if (text.empty()) return Bad(text, "empty");
  Action action;
  std::size_t pos = 0;
  bool overflow = false;
  if (!ReadNumber(text, &pos, &action.stage, &overflow)) {
    return Bad(text, "expected a stage number at the start");
  }
  if (overflow) return Bad(text, "stage number too large");
  if (pos == text.size()) return Bad(text, "expected a pass letter F, B or W after the stage");
  switch (text[pos]) {
    case 'F':
      action.pass = Pass::kForward;
      break;
    case 'B':
      action.pass = Pass::kBackward;
      break;
    case 'W':
      action.pass = Pass::kWeight;
      break;
    default:
      return Bad(text, "pass must be F, B or W");
  }
  ++pos;
  if (!ReadNumber(text, &pos, &action.microbatch, &overflow)) {
    return Bad(text, "expected a microbatch number after the pass letter");
  }
  if (overflow) return Bad(text, "microbatch number too large");
  if (pos == text.size() || text[pos] != '.') {
    return Bad(text, "expected '.' and a chunk number after the microbatch");
  }
  ++pos;
  if (!ReadNumber(text, &pos, &action.chunk, &overflow)) {
    return Bad(text, "expected a chunk number after '.'");
  }
  if (overflow) return Bad(text, "chunk number too large");
  if (pos != text.size()) {
    return Bad(text, "unexpected '" + std::string(1, text[pos]) +
                         "' after the chunk number");
  }
  return action;
}


}  // namespace stateflow::schedule
