#include "tools/sweep_options.h"

#include <unistd.h>

#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <vector>

#include "tools/cli.h"

namespace stateflow::tools {
namespace {

// The items of "a,b,c"; errors name the flag.
Result<std::vector<std::string>> Items(const std::string& flag, const std::string& text) {
  if (Trim(text).empty()) {
    return Status::Invalid("--" + flag + " is empty (give one or more values, comma-separated)");
  }
  std::vector<std::string> items;
  std::size_t begin = 0;
  while (true) {
    const std::size_t comma = text.find(',', begin);
    const std::string item =
        Trim(text.substr(begin, comma == std::string::npos ? std::string::npos : comma - begin));
    if (item.empty()) {
      return Status::Invalid("--" + flag + ": empty item " + std::to_string(items.size()) +
                             " in '" + text + "'");
    }
    items.push_back(item);
    if (comma == std::string::npos) return items;
    begin = comma + 1;
  }
}

template <typename Field>
Status WholeNumbers(const std::string& flag, const std::string& text, Field* out) {
  SF_ASSIGN_OR_RETURN(std::vector<std::string> items, Items(flag, text));
  out->Clear();
  for (const std::string& item : items) {
    unsigned long long v = 0;
    const auto [end, err] = std::from_chars(item.data(), item.data() + item.size(), v);
    if (err != std::errc() || end != item.data() + item.size()) {
      return Status::Invalid("--" + flag + ": '" + item + "' is not a whole number >= 0");
    }
    // The field's own range (models/limits.h) is checked by the sweep; here
    // only what its integer type holds, named as such rather than as "not a
    // number".
    if (v > std::numeric_limits<typename Field::value_type>::max()) {
      return Status::Invalid("--" + flag + ": " + item + " is too large (at most " +
                             std::to_string(std::numeric_limits<typename Field::value_type>::max()) +
                             ")");
    }
    out->Add(static_cast<typename Field::value_type>(v));
  }
  return Status::Ok();
}

Status Reals(const std::string& flag, const std::string& text,
             google::protobuf::RepeatedField<double>* out) {
  SF_ASSIGN_OR_RETURN(std::vector<std::string> items, Items(flag, text));
  out->Clear();
  for (const std::string& item : items) {
    char* end = nullptr;
    const double v = std::strtod(item.c_str(), &end);
    if (end != item.c_str() + item.size() || !std::isfinite(v)) {
      return Status::Invalid("--" + flag + ": '" + item + "' is not a number");
    }
    out->Add(v);
  }
  return Status::Ok();
}

void RedrawLine(const std::string& text) {
  std::fprintf(stderr, "\r%s\033[K", text.c_str());
  std::fflush(stderr);
}

}  // namespace

void AddSweepOptions(po::options_description* desc, SweepFlags* f, bool batches_and_lengths) {
  desc->add_options()
      ("chunks-list", Optional(&f->chunks), "N values to sweep, e.g. 2,4,6,8,16,32")
      ("alpha-list", Optional(&f->alpha), "alpha values to sweep, e.g. 0,0.5,1,1.25")
      ("policies", Optional(&f->policies), "policies to sweep, e.g. 1f1b,stateflow")
      ("st-overlap-list", Optional(&f->st_overlap),
       "ST split-and-overlap settings to sweep: on, off or both, e.g. off,on")
      ("st-tile-list", Optional(&f->st_tile), "ST tiles B_V to sweep, e.g. 16,32,64")
      ("virtual-stages-list", Optional(&f->virtual_stages),
       "v values to sweep for policies interleaved and zb-interleaved, e.g. 1,2,4 (the other "
       "policies run at their own: zbv 2, else 1)");
  if (!batches_and_lengths) return;
  desc->add_options()
      ("seq-len-list", Optional(&f->seq_len), "sequence lengths, e.g. 65536,131072,262144")
      ("global-batch-list", Optional(&f->global_batch),
       "global batches (sequences per step; M = batch / (microbatch size x DP)), e.g. 4,8,16")
      ("microbatches-list", Optional(&f->microbatches), "M values (instead of global batches)");
}

Status ApplySweepFlags(const SweepFlags& f, pb::SweepSpec* sweep) {
  if (f.chunks) SF_RETURN_IF_ERROR(WholeNumbers("chunks-list", *f.chunks, sweep->mutable_chunks()));
  if (f.alpha) SF_RETURN_IF_ERROR(Reals("alpha-list", *f.alpha, sweep->mutable_alpha()));
  if (f.seq_len) {
    SF_RETURN_IF_ERROR(WholeNumbers("seq-len-list", *f.seq_len, sweep->mutable_seq_len()));
  }
  if (f.global_batch) {
    SF_RETURN_IF_ERROR(
        WholeNumbers("global-batch-list", *f.global_batch, sweep->mutable_global_batch()));
    sweep->clear_microbatches();
  }
  if (f.microbatches) {
    SF_RETURN_IF_ERROR(
        WholeNumbers("microbatches-list", *f.microbatches, sweep->mutable_microbatches()));
    if (!f.global_batch) sweep->clear_global_batch();
  }
  if (f.policies) {
    SF_ASSIGN_OR_RETURN(std::vector<std::string> items, Items("policies", *f.policies));
    sweep->clear_policies();
    for (std::string& p : items) sweep->add_policies(std::move(p));
  }
  if (f.st_overlap) {
    SF_ASSIGN_OR_RETURN(std::vector<std::string> items, Items("st-overlap-list", *f.st_overlap));
    sweep->clear_st_overlap();
    for (const std::string& item : items) {
      if (item != "on" && item != "off") {
        return Status::Invalid("--st-overlap-list: '" + item + "' is not on or off");
      }
      sweep->add_st_overlap(item == "on");
    }
  }
  if (f.st_tile) {
    SF_RETURN_IF_ERROR(WholeNumbers("st-tile-list", *f.st_tile, sweep->mutable_st_tile()));
  }
  if (f.virtual_stages) {
    SF_RETURN_IF_ERROR(WholeNumbers("virtual-stages-list", *f.virtual_stages,
                                    sweep->mutable_virtual_stages()));
  }
  return Status::Ok();
}

ProgressBar::ProgressBar(std::string what)
    : what_(std::move(what)), terminal_(isatty(STDERR_FILENO) != 0), start_(Clock::now()) {}

ProgressBar::~ProgressBar() {
  if (drawn_) RedrawLine("");
}

void ProgressBar::Update(std::size_t done, std::size_t total) {
  if (!terminal_ || total == 0) return;
  const Clock::time_point now = Clock::now();
  if (now - start_ < std::chrono::seconds(1)) return;
  if (drawn_ && done < total && now - last_draw_ < std::chrono::milliseconds(100)) return;
  constexpr std::size_t kWidth = 30;
  const std::size_t filled = kWidth * done / total;
  std::string line(1, '[');
  line.append(filled, '#').append(kWidth - filled, '.').append("]  ");
  line.append(std::to_string(done)).append("/").append(std::to_string(total));
  line.append(" ").append(what_);
  RedrawLine(line);
  drawn_ = true;
  last_draw_ = now;
}

Result<std::vector<std::string>> ListItems(const std::string& flag, const std::string& text) {
  return Items(flag, text);
}

}  // namespace stateflow::tools
