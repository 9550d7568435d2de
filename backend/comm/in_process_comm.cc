#include "backend/comm/in_process_comm.h"

#include <cstring>
#include <map>
#include <optional>
#include <utility>

namespace stateflow::backend {
namespace {

// The mailboxes of all stages. A slot is one message to one stage: the
// receiver's posted buffer and/or the sender's unmatched tensor.
template <typename T>
class Network {
 public:
  explicit Network(int stages) : mailboxes_(stages), held_sends_(stages, 0) {}

  int stages() const { return static_cast<int>(mailboxes_.size()); }

  Status PostRecv(int to, int from, const MessageKey& key, Tensor<T> buffer) {
    Slot& slot = mailboxes_[to][key];
    if (slot.posted) return Duplicate(to, key, "receive posted");
    slot.posted = std::move(buffer);
    if (slot.unmatched) {
      if (slot.from != from) return WrongSender(to, key, from, slot.from);
      return Deliver(to, key, &slot);
    }
    slot.from = from;
    return Status::Ok();
  }

  Status Send(int from, int to, const MessageKey& key, Tensor<T> data) {
    Slot& slot = mailboxes_[to][key];
    if (slot.unmatched || slot.complete) return Duplicate(to, key, "sent");
    slot.unmatched = std::move(data);
    ++held_sends_[from];
    if (slot.posted) {
      if (slot.from != from) return WrongSender(to, key, slot.from, from);
      return Deliver(to, key, &slot);
    }
    slot.from = from;
    return Status::Ok();
  }

  Result<bool> Arrived(int to, const MessageKey& key) {
    auto it = mailboxes_[to].find(key);
    if (it == mailboxes_[to].end() || !it->second.posted) return NotPosted(to, key);
    return it->second.complete;
  }

  Result<Tensor<T>> Wait(int to, const MessageKey& key) {
    auto it = mailboxes_[to].find(key);
    if (it == mailboxes_[to].end() || !it->second.posted) return NotPosted(to, key);
    if (!it->second.complete) {
      return Status::Internal("stage " + std::to_string(to) + ": waiting for the " +
                              ToString(key) + " from stage " +
                              std::to_string(it->second.from) +
                              ", which has not been sent (one process cannot block)");
    }
    Tensor<T> out = std::move(*it->second.posted);
    mailboxes_[to].erase(it);
    return out;
  }

  int held_sends(int stage) const { return held_sends_[stage]; }

 private:
  struct Slot {
    std::optional<Tensor<T>> posted;     // receiver's buffer, (s, H)
    std::optional<Tensor<T>> unmatched;  // sender's tensor until delivered
    int from = -1;
    bool complete = false;
  };

  // Copies the sender's tensor into the posted buffer and frees it.
  Status Deliver(int to, const MessageKey& key, Slot* slot) {
    const Tensor<T>& src = *slot->unmatched;
    Tensor<T>& dst = *slot->posted;
    if (src.numel() != dst.numel()) {
      return Status::Internal("stage " + std::to_string(to) + ": the " + ToString(key) +
                              " from stage " + std::to_string(slot->from) + " has " +
                              std::to_string(src.numel()) + " elements, the receive " +
                              std::to_string(dst.numel()));
    }
    // One process, one device: both tensors live in the same memory.
    if (src.numel() > 0) dst.CopyFrom(src);
    --held_sends_[slot->from];
    slot->unmatched.reset();
    slot->complete = true;
    return Status::Ok();
  }

  static Status Duplicate(int to, const MessageKey& key, const char* what) {
    return Status::Internal("stage " + std::to_string(to) + ": the " + ToString(key) +
                            " was already " + what + " this step");
  }
  static Status NotPosted(int to, const MessageKey& key) {
    return Status::Internal("stage " + std::to_string(to) + ": no receive posted for the " +
                            ToString(key));
  }
  static Status WrongSender(int to, const MessageKey& key, int expected, int got) {
    return Status::Internal("stage " + std::to_string(to) + ": the " + ToString(key) +
                            " is expected from stage " + std::to_string(expected) +
                            " but came from stage " + std::to_string(got));
  }

  std::vector<std::map<MessageKey, Slot>> mailboxes_;  // (P), by receiver
  std::vector<int> held_sends_;                        // (P), by sender
};

template <typename T>
class InProcessComm final : public Comm<T> {
 public:
  InProcessComm(std::shared_ptr<Network<T>> network, int stage)
      : network_(std::move(network)), stage_(stage) {}

  int stage() const override { return stage_; }
  int stages() const override { return network_->stages(); }

  Status PostRecv(int from, const MessageKey& key, Tensor<T> buffer) override {
    SF_RETURN_IF_ERROR(CheckNeighbour(from, "receive from"));
    return network_->PostRecv(stage_, from, key, std::move(buffer));
  }
  Result<bool> Arrived(const MessageKey& key) override {
    return network_->Arrived(stage_, key);
  }
  Result<Tensor<T>> Wait(const MessageKey& key) override {
    return network_->Wait(stage_, key);
  }
  Status Send(int to, const MessageKey& key, Tensor<T> data) override {
    SF_RETURN_IF_ERROR(CheckNeighbour(to, "send to"));
    return network_->Send(stage_, to, key, std::move(data));
  }
  Status Progress() override { return Status::Ok(); }
  Status Flush() override {
    const int held = network_->held_sends(stage_);
    if (held == 0) return Status::Ok();
    return Status::Internal("stage " + std::to_string(stage_) + ": " + std::to_string(held) +
                            " sends were never received (one process cannot block)");
  }
  int pending_sends() const override { return network_->held_sends(stage_); }

 private:
  Status CheckNeighbour(int other, const char* what) const {
    if (IsPeer(stage_, other, stages())) return Status::Ok();
    return Status::Internal("stage " + std::to_string(stage_) + ": cannot " + what +
                            " stage " + std::to_string(other) + " (not a neighbour among " +
                            std::to_string(stages()) + " stages)");
  }

  std::shared_ptr<Network<T>> network_;
  int stage_;
};

}  // namespace

template <typename T>
std::vector<std::unique_ptr<Comm<T>>> MakeInProcessComms(int stages) {
  auto network = std::make_shared<Network<T>>(stages);
  std::vector<std::unique_ptr<Comm<T>>> out;
  for (int r = 0; r < stages; ++r) out.push_back(std::make_unique<InProcessComm<T>>(network, r));
  return out;
}

template std::vector<std::unique_ptr<Comm<float>>> MakeInProcessComms<float>(int);
template std::vector<std::unique_ptr<Comm<double>>> MakeInProcessComms<double>(int);
template std::vector<std::unique_ptr<Comm<bf16>>> MakeInProcessComms<bf16>(int);

}  // namespace stateflow::backend
