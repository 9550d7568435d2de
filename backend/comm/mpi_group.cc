#include <mpi.h>

#include <vector>

#include "backend/comm/mpi.h"
#include "backend/comm/mpi_wait.h"

namespace stateflow::backend {
namespace {

// Starts a nonblocking collective and waits for it under the watchdog, so a
// stalled rank ends the step collectives too.
#define SF_MPI_COLLECTIVE(what, call)                                        \
  do {                                                                        \
    MPI_Request sf_request_ = MPI_REQUEST_NULL;                               \
    const int sf_rc_ = (call);                                                \
    if (sf_rc_ != MPI_SUCCESS) return MpiFailed(#call, sf_rc_);               \
    SF_RETURN_IF_ERROR(WaitWithWatchdog(&sf_request_, MPI_STATUS_IGNORE, Where(what))); \
  } while (0)

class MpiGroup final : public Group {
 public:
  MpiGroup() {
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }

  std::string Where(const char* what) const {
    return "rank " + std::to_string(rank_) + ": " + what + " of all " + std::to_string(size_) +
           " ranks";
  }

  Result<Agreement> AgreeOrFail(const Status& local) override {
    int mine = local.ok() ? size_ : rank_;
    int first = size_;
    SF_MPI_COLLECTIVE("the end-of-step agreement",
                      MPI_Iallreduce(&mine, &first, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD, &sf_request_));
    if (first == size_) return Agreement{Status::Ok()};
    // The first failing rank tells the others its code and message.
    int header[2] = {static_cast<int>(local.code()), static_cast<int>(local.message().size())};
    SF_MPI_COLLECTIVE("the error broadcast",
                      MPI_Ibcast(header, 2, MPI_INT, first, MPI_COMM_WORLD, &sf_request_));
    std::string message = rank_ == first ? local.message() : std::string(header[1], ' ');
    SF_MPI_COLLECTIVE("the error broadcast", MPI_Ibcast(message.data(), header[1], MPI_CHAR, first,
                                                       MPI_COMM_WORLD, &sf_request_));
    switch (static_cast<Status::Code>(header[0])) {
      case Status::Code::kInvalidInput: return Agreement{Status::Invalid(message)};
      case Status::Code::kResource: return Agreement{Status::Resource(message)};
      default: return Agreement{Status::Internal(message)};
    }
  }

  Result<double> Broadcast(double value, int root) override {
    SF_MPI_COLLECTIVE("a broadcast",
                      MPI_Ibcast(&value, 1, MPI_DOUBLE, root, MPI_COMM_WORLD, &sf_request_));
    return value;
  }

  Result<double> Sum(double value) override {
    double sum = 0;
    SF_MPI_COLLECTIVE("a sum", MPI_Iallreduce(&value, &sum, 1, MPI_DOUBLE, MPI_SUM,
                                              MPI_COMM_WORLD, &sf_request_));
    return sum;
  }

  Result<std::vector<std::vector<double>>> GatherToRoot(
      const std::vector<double>& local) override {
    int count = static_cast<int>(local.size());
    std::vector<int> counts(rank_ == 0 ? size_ : 0);
    SF_MPI_COLLECTIVE("a gather", MPI_Igather(&count, 1, MPI_INT, counts.data(), 1, MPI_INT, 0,
                                              MPI_COMM_WORLD, &sf_request_));
    std::vector<int> offsets(counts.size(), 0);
    int total = 0;
    for (std::size_t k = 0; k < counts.size(); ++k) {
      offsets[k] = total;
      total += counts[k];
    }
    std::vector<double> all(static_cast<std::size_t>(total));
    SF_MPI_COLLECTIVE("a gather", MPI_Igatherv(local.data(), count, MPI_DOUBLE, all.data(),
                                               counts.data(), offsets.data(), MPI_DOUBLE, 0,
                                               MPI_COMM_WORLD, &sf_request_));
    std::vector<std::vector<double>> out;
    for (std::size_t k = 0; k < counts.size(); ++k) {
      out.emplace_back(all.begin() + offsets[k], all.begin() + offsets[k] + counts[k]);
    }
    return out;
  }

  Status Barrier() override {
    SF_MPI_COLLECTIVE("a barrier", MPI_Ibarrier(MPI_COMM_WORLD, &sf_request_));
    return Status::Ok();
  }

 private:
  int rank_ = 0;
  int size_ = 1;
};

}  // namespace

std::unique_ptr<Group> MakeMpiGroup() { return std::make_unique<MpiGroup>(); }

}  // namespace stateflow::backend
