// Errors as values: Status (ok, or a one-line message) and Result<T> (a value,
// or a Status). Library code returns these; only the command line turns them
// into a message on stderr and an exit code.
//
// A message names what is wrong and where: the field, file:line:column, stage,
// rank, microbatch or chunk. It is one line, without a trailing period.
// A status may carry a detail beside it: lines the program made (a plan's
// grid around a bad step, the stages blocked behind a deadlock), which the
// command line prints as lines after the message.
//
//   Result<Plan> plan = MakePlan(spec);
//   if (!plan.ok()) return plan.status();   // or: SF_ASSIGN_OR_RETURN
//
// Not an exception mechanism: nothing here throws.
#pragma once

#include <cassert>
#include <optional>
#include <string>
#include <utility>

namespace stateflow {

class [[nodiscard]] Status {
 public:
  // What kind of failure, so that the command line can pick an exit code:
  // kInvalidInput (exit 2: the user's input is wrong), kResource (out of
  // memory capacity, a rank died), kInternal (a bug: an invariant broke).
  enum class Code { kOk, kInvalidInput, kResource, kInternal };

  Status() = default;
  static Status Ok() { return Status(); }
  static Status Invalid(std::string message) {
    return Status(Code::kInvalidInput, std::move(message));
  }
  static Status Resource(std::string message) {
    return Status(Code::kResource, std::move(message));
  }
  static Status Internal(std::string message) {
    return Status(Code::kInternal, std::move(message));
  }

  bool ok() const { return code_ == Code::kOk; }
  Code code() const { return code_; }
  const std::string& message() const { return message_; }
  // Lines after the message (newline-separated, no final newline); empty
  // for most errors.
  const std::string& detail() const { return detail_; }

  // Returns a copy whose message is "prefix: message" (for adding context such
  // as the file name on the way up); the detail is kept.
  Status WithPrefix(const std::string& prefix) const {
    if (ok()) return *this;
    Status s(code_, prefix + ": " + message_);
    s.detail_ = detail_;
    return s;
  }
  // Returns a copy with `detail` as its detail.
  Status WithDetail(std::string detail) const {
    Status s = *this;
    s.detail_ = std::move(detail);
    return s;
  }

 private:
  Status(Code code, std::string message)
      : code_(code), message_(std::move(message)) {}

  Code code_ = Code::kOk;
  std::string message_;
  std::string detail_;
};

template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : value_(std::move(value)) {}  // NOLINT: implicit on purpose
  Result(Status status) : status_(std::move(status)) {  // NOLINT
    assert(!status_.ok() && "Result constructed from an ok Status");
  }

  bool ok() const { return value_.has_value(); }
  const Status& status() const { return status_; }

  // REQUIRES: ok().
  T& value() & {
    assert(ok());
    return *value_;
  }
  const T& value() const& {
    assert(ok());
    return *value_;
  }
  T&& value() && {
    assert(ok());
    return std::move(*value_);
  }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  std::optional<T> value_;
  Status status_;
};

}  // namespace stateflow

#define SF_CONCAT_INNER_(a, b) a##b
#define SF_CONCAT_(a, b) SF_CONCAT_INNER_(a, b)

// Returns the status from the enclosing function if `expr` is not ok.
#define SF_RETURN_IF_ERROR(expr)                      \
  do {                                                \
    ::stateflow::Status sf_status_ = (expr);          \
    if (!sf_status_.ok()) return sf_status_;          \
  } while (0)

// `SF_ASSIGN_OR_RETURN(auto x, MakeX());` declares x from a Result's value or
// returns its status.
#define SF_ASSIGN_OR_RETURN(lhs, expr) \
  SF_ASSIGN_OR_RETURN_IMPL_(SF_CONCAT_(sf_result_, __LINE__), lhs, expr)
#define SF_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                              \
  if (!tmp.ok()) return tmp.status();             \
  lhs = std::move(tmp).value()
