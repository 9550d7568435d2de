#include "backend/comm/link_order.h"

#include <string>

#include "schedule/action.h"

namespace stateflow::backend {

LinkOrder::LinkOrder(const schedule::Plan& plan, int stage) : stage_(stage) {
  for (int from : {stage - 1, stage + 1}) {
    if (from < 0 || from >= plan.stages()) continue;
    Link& link = links_[from];
    for (const schedule::Action& a : plan.stage(from)) {
      const std::optional<int> to = schedule::OutputTo(a, plan.stages());
      if (!to || *to != stage) continue;
      const MessageKey key{a.microbatch, a.chunk, a.pass};
      link.index.emplace(key, static_cast<int>(link.order.size()));
      link.order.push_back(key);
    }
  }
}

LinkOrder::Link* LinkOrder::Find(int from) {
  auto it = links_.find(from);
  return it == links_.end() ? nullptr : &it->second;
}
const LinkOrder::Link* LinkOrder::Find(int from) const {
  auto it = links_.find(from);
  return it == links_.end() ? nullptr : &it->second;
}

const std::vector<MessageKey>& LinkOrder::Expected(int from) const {
  static const std::vector<MessageKey> kNone;
  const Link* link = Find(from);
  return link == nullptr ? kNone : link->order;
}

Status LinkOrder::Post(int from, const MessageKey& key) {
  Link* link = Find(from);
  auto it = link == nullptr ? decltype(link->index)::iterator{} : link->index.find(key);
  if (link == nullptr || it == link->index.end()) {
    return Status::Internal("stage " + std::to_string(stage_) + ": the plan has no " +
                            ToString(key) + " from stage " + std::to_string(from));
  }
  if (it->second < link->next || !link->posted.insert(key).second) {
    return Status::Internal("stage " + std::to_string(stage_) + ": " + ToString(key) +
                            " from stage " + std::to_string(from) + " posted twice");
  }
  return Status::Ok();
}

std::vector<MessageKey> LinkOrder::Issuable(int from) {
  std::vector<MessageKey> out;
  Link* link = Find(from);
  if (link == nullptr) return out;
  while (link->next < static_cast<int>(link->order.size()) &&
         link->posted.erase(link->order[link->next]) == 1) {
    out.push_back(link->order[link->next++]);
  }
  return out;
}

Result<std::vector<MessageKey>> LinkOrder::ForceUpTo(int from, const MessageKey& key,
                                                     std::vector<MessageKey>* unposted) {
  Link* link = Find(from);
  auto it = link == nullptr ? decltype(link->index)::iterator{} : link->index.find(key);
  if (link == nullptr || it == link->index.end()) {
    return Status::Internal("stage " + std::to_string(stage_) + ": the plan has no " +
                            ToString(key) + " from stage " + std::to_string(from));
  }
  std::vector<MessageKey> out;
  unposted->clear();
  while (link->next <= it->second) {
    const MessageKey& k = link->order[link->next++];
    if (link->posted.erase(k) == 0) unposted->push_back(k);
    out.push_back(k);
  }
  return out;
}

bool LinkOrder::issued(int from, const MessageKey& key) const {
  const Link* link = Find(from);
  if (link == nullptr) return false;
  auto it = link->index.find(key);
  return it != link->index.end() && it->second < link->next;
}

}  // namespace stateflow::backend
