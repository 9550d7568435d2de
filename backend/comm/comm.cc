#include "backend/comm/comm.h"

namespace stateflow::backend {

std::string ToString(const MessageKey& key) {
  std::string out = std::string(key.pass == schedule::Pass::kBackward ? "gradient" : "activation") +
                    " of microbatch " + std::to_string(key.microbatch) + " chunk " +
                    std::to_string(key.chunk);
  if (key.virtual_index > 0) out += " for model stage index " + std::to_string(key.virtual_index);
  return out;
}

long long MessageTag(const MessageKey& key, int chunks, int virtual_stages) {
  const long long unit =
      (static_cast<long long>(key.microbatch) * virtual_stages + key.virtual_index) * chunks +
      key.chunk;
  return unit * 2 + (key.pass == schedule::Pass::kBackward ? 1 : 0);
}

Status CheckTagRange(int microbatches, int chunks, long long tag_upper_bound,
                     int virtual_stages) {
  const long long largest = 2LL * microbatches * chunks * virtual_stages - 1;
  if (largest > tag_upper_bound) {
    return Status::Invalid("microbatches " + std::to_string(microbatches) + " x chunks " +
                           std::to_string(chunks) +
                           (virtual_stages > 1
                                ? " x virtual stages " + std::to_string(virtual_stages)
                                : std::string()) +
                           " need message tags up to " +
                           std::to_string(largest) + ", above this MPI's MPI_TAG_UB " +
                           std::to_string(tag_upper_bound));
  }
  return Status::Ok();
}

}  // namespace stateflow::backend
