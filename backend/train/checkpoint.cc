#include "backend/train/checkpoint.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <optional>
#include <vector>

#include "common/files.h"
#include "common/text.h"
#include "common/hash.h"
#include "schedule/plan_text.h"

namespace stateflow::backend {
namespace {

constexpr char kMagic[] = "stateflow-checkpoint 1";
constexpr char kManifest[] = "MANIFEST";
// Parameters, moments and headers of the backend's models: far below this.
constexpr std::int64_t kMaxCheckpointBytes = std::int64_t{16} << 30;

std::uint64_t Fnv1a(std::string_view bytes) { return Fnv1a64(bytes); }

// A double as the shortest text (of %.15g, %.16g, %.17g) that reads back to it.
std::string Exact(double v) {
  char buf[32];
  for (int digits = 15; digits <= 17; ++digits) {
    std::snprintf(buf, sizeof(buf), "%.*g", digits, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  return buf;
}

std::string Hex(std::uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

// The key's lines, each "field value" with the field as the scenario names it.
// The model's name passes through Printable: a newline in it cannot end its
// line (issue 31); the model itself is compared by its hash.
std::vector<std::pair<std::string, std::string>> KeyFields(const CheckpointKey& k) {
  return {{"model.name", Printable(k.model)},
          {"model.hash", Hex(k.model_hash)},
          {"parallel.pipeline_size", std::to_string(k.stages)},
          {"parallel.microbatches", std::to_string(k.microbatches)},
          {"parallel.data_size", std::to_string(k.data_size)},
          {"schedule.chunks", std::to_string(k.chunks)},
          {"parallel.microbatch_size", std::to_string(k.microbatch_size)},
          {"seq_len", std::to_string(k.seq_len)},
          {"train.dtype", k.dtype},
          {"train.seed", std::to_string(k.seed)},
          {"schedule.partition", k.partition},
          {"schedule.plan_hash", Hex(k.plan_hash)},
          {"schedule.st_overlap", k.st_overlap ? "true" : "false"},
          {"schedule.st_tile", std::to_string(k.st_tile)},
          {"train.text_hash", Hex(k.text_hash)},
          {"train.text_bytes", std::to_string(k.text_bytes)},
          {"train.device", k.device},
          {"train.learning_rate", Exact(k.adamw.learning_rate)},
          {"train.adamw_beta1", Exact(k.adamw.beta1)},
          {"train.adamw_beta2", Exact(k.adamw.beta2)},
          {"train.adamw_epsilon", Exact(k.adamw.epsilon)},
          {"train.weight_decay", Exact(k.adamw.weight_decay)}};
}

std::string Header(const std::vector<std::pair<std::string, std::string>>& fields) {
  std::string out = std::string(kMagic) + "\n";
  for (const auto& [name, value] : fields) out += name + " " + value + "\n";
  return out + "end\n";
}

// Parses the header at the start of `bytes`; `*end` is the offset after it.
Result<std::map<std::string, std::string>> ParseHeader(std::string_view bytes,
                                                       const std::string& path,
                                                       std::size_t* end) {
  const std::string corrupt = path + ": not a stateflow checkpoint or corrupt (header)";
  std::size_t pos = 0;
  auto line = [&]() -> std::optional<std::string_view> {
    const std::size_t nl = bytes.find('\n', pos);
    if (nl == std::string_view::npos || nl - pos > 4096) return std::nullopt;
    std::string_view l = bytes.substr(pos, nl - pos);
    pos = nl + 1;
    return l;
  };
  std::optional<std::string_view> first = line();
  if (!first || *first != kMagic) return Status::Invalid(corrupt);
  std::map<std::string, std::string> out;
  for (;;) {
    std::optional<std::string_view> l = line();
    if (!l) return Status::Invalid(corrupt);
    if (*l == "end") break;
    const std::size_t space = l->find(' ');
    if (space == std::string_view::npos) return Status::Invalid(corrupt);
    out[std::string(l->substr(0, space))] = std::string(l->substr(space + 1));
  }
  *end = pos;
  return out;
}

// Every expected field equal in `got`, else an error naming the first that
// differs; a field in `may_differ` may differ, each difference appended to
// `changed` (if not null).
Status CheckFields(const std::map<std::string, std::string>& got,
                   const std::vector<std::pair<std::string, std::string>>& expected,
                   const std::string& path, const std::vector<std::string>& may_differ = {},
                   std::vector<std::string>* changed = nullptr) {
  for (const auto& [name, value] : expected) {
    auto it = got.find(name);
    if (it == got.end()) {
      // A checkpoint written before the field joined the key reads as one
      // whose run cannot be checked.
      return Status::Invalid(path + ": not a stateflow checkpoint or corrupt (no " + name +
                             "; a checkpoint of an older stateflow lacks it)");
    }
    if (it->second == value) continue;
    if (std::find(may_differ.begin(), may_differ.end(), name) != may_differ.end()) {
      if (changed != nullptr) changed->push_back(name + " " + it->second + " -> " + value);
      continue;
    }
    std::string hint;
    for (const char* c : kResumeChangeable) {
      if (name == c) hint = " (to change it on resuming, name it: --resume-change " + name + ")";
    }
    return Status::Invalid(path + ": the checkpoint has " + name + " " + it->second +
                           ", this run " + value + hint);
  }
  return Status::Ok();
}

std::vector<std::pair<std::string, std::string>> StageFields(const CheckpointKey& key,
                                                             int stage,
                                                             const models::StageLayers& layers,
                                                             int step, std::size_t params) {
  auto fields = KeyFields(key);
  fields.insert(fields.end(), {{"stage", std::to_string(stage)},
                               {"stage.layers", std::to_string(layers.first) + "-" +
                                                    std::to_string(layers.last)},
                               {"step", std::to_string(step)},
                               {"parameters", std::to_string(params)}});
  return fields;
}

template <typename V>
void Put(const V& v, std::string* out) {
  out->append(reinterpret_cast<const char*>(&v), sizeof(V));
}

// Reads sequentially from a byte range, failing (not reading) past its end.
class Reader {
 public:
  explicit Reader(std::string_view bytes) : bytes_(bytes) {}
  bool Raw(void* dst, std::size_t n) {
    if (n > bytes_.size() - pos_) return false;
    std::memcpy(dst, bytes_.data() + pos_, n);
    pos_ += n;
    return true;
  }
  template <typename V>
  bool Get(V* v) {
    return Raw(v, sizeof(V));
  }
  bool Skip(std::size_t n) {
    if (n > bytes_.size() - pos_) return false;
    pos_ += n;
    return true;
  }
  bool at_end() const { return pos_ == bytes_.size(); }

 private:
  std::string_view bytes_;
  std::size_t pos_ = 0;
};

Status ReadErrno(const std::string& what) {
  return Status::Resource(what + ": " + std::strerror(errno));
}

}  // namespace

CheckpointKey MakeCheckpointKey(const TrainSetup& setup, const TrainOptions& options,
                                const TextData& text, std::string dtype) {
  CheckpointKey k;
  k.model = setup.model.name();
  k.model_hash = Fnv1a(setup.model.SerializeAsString());
  k.stages = setup.stages;
  k.microbatches = setup.microbatches;
  k.data_size = setup.data_size;
  k.chunks = setup.partition.num_chunks();
  k.microbatch_size = setup.microbatch_size;
  k.seq_len = setup.seq_len;
  k.dtype = std::move(dtype);
  k.seed = options.seed;
  for (int i = 0; i < setup.partition.num_chunks(); ++i) {
    if (i > 0) k.partition += ',';
    k.partition += std::to_string(setup.partition.length(i));
  }
  k.plan_hash = Fnv1a(schedule::PlanToText(setup.plan));
  k.st_overlap = setup.st_overlap;
  k.st_tile = setup.st_tile;
  k.text_hash = text.content_hash();
  k.text_bytes = text.size();
  k.device = options.device;
  k.adamw = options.adamw;
  return k;
}

template <>
std::string DtypeName<float>() {
  return "float32";
}
template <>
std::string DtypeName<double>() {
  return "float64";
}
template <>
std::string DtypeName<bf16>() {
  return "bf16";
}

std::string CheckpointManifestPath(const std::string& dir) { return dir + "/" + kManifest; }

std::string StageCheckpointPath(const std::string& dir, int stage, int step) {
  return dir + "/stage-" + std::to_string(stage) + ".step-" + std::to_string(step) + ".ckpt";
}

// The first of a parameter's three stored tensors: its value, or in bf16
// its fp32 master weights (the value is their rounding: AdamW::NarrowMasters).
template <typename T>
Tensor<MasterOf<T>>* StoredWeights(AdamW<T>& opt, std::size_t k) {
  if constexpr (kHasMaster<T>) {
    return &opt.master(k);
  } else {
    return opt.params()[k].value;
  }
}

template <typename T>
std::string EncodeStageCheckpoint(const CheckpointKey& key, int stage,
                                  const models::StageLayers& layers, int step, AdamW<T>& opt) {
  const std::vector<ParamRef<T>>& params = opt.params();
  std::string out = Header(StageFields(key, stage, layers, step, params.size()));
  for (std::size_t k = 0; k < params.size(); ++k) {
    Put(static_cast<std::uint32_t>(params[k].name.size()), &out);
    out += params[k].name;
    const std::int64_t n = params[k].value->numel();
    Put(n, &out);
    using M = MasterOf<T>;
    for (const Tensor<M>* t : {StoredWeights(opt, k), &opt.first_moment(k), &opt.second_moment(k)}) {
      const std::vector<M> host = t->ToHost();  // from the tensor's device
      out.append(reinterpret_cast<const char*>(host.data()), sizeof(M) * n);
    }
  }
  Put(static_cast<std::int64_t>(opt.steps_taken()), &out);
  Put(Fnv1a(out), &out);
  return out;
}

namespace {

// DecodeStageCheckpoint, and with `apply` false the same checks without
// touching `opt` (the read-back of a file just written).
template <typename T>
Status DecodeInto(std::string_view bytes, const std::string& path, const CheckpointKey& key,
                  int stage, const models::StageLayers& layers, int step, AdamW<T>* opt,
                  bool apply) {
  std::uint64_t stored = 0;
  if (bytes.size() < sizeof(stored)) {
    return Status::Invalid(path + ": truncated checkpoint (" + std::to_string(bytes.size()) +
                           " bytes)");
  }
  const std::string_view body = bytes.substr(0, bytes.size() - sizeof(stored));
  std::memcpy(&stored, bytes.data() + body.size(), sizeof(stored));
  if (Fnv1a(body) != stored) {
    return Status::Invalid(path + ": truncated or corrupt checkpoint (checksum mismatch)");
  }
  std::size_t end = 0;
  SF_ASSIGN_OR_RETURN(auto fields, ParseHeader(body, path, &end));
  const std::vector<ParamRef<T>>& params = opt->params();
  SF_RETURN_IF_ERROR(CheckFields(fields, StageFields(key, stage, layers, step, params.size()),
                                 path, key.may_differ));
  // Read everything before writing anything into `opt`.
  Reader in(body.substr(end));
  using M = MasterOf<T>;
  std::vector<std::vector<M>> data(params.size());
  const std::string corrupt = path + ": corrupt checkpoint (parameter ";
  for (std::size_t k = 0; k < params.size(); ++k) {
    std::uint32_t name_size = 0;
    std::int64_t n = 0;
    std::string name;
    if (!in.Get(&name_size) || name_size > 4096) {
      return Status::Invalid(corrupt + params[k].name + ")");
    }
    name.resize(name_size);
    if (!in.Raw(name.data(), name_size) || !in.Get(&n)) {
      return Status::Invalid(corrupt + params[k].name + ")");
    }
    if (name != params[k].name || n != params[k].value->numel()) {
      return Status::Invalid(path + ": the checkpoint's parameter " + std::to_string(k) + " is " +
                             name + " of " + std::to_string(n) + " elements, this run's " +
                             params[k].name + " of " +
                             std::to_string(params[k].value->numel()));
    }
    const std::size_t values = static_cast<std::size_t>(3 * n);
    if (!apply) {
      if (!in.Skip(sizeof(M) * values)) return Status::Invalid(corrupt + params[k].name + ")");
      continue;
    }
    data[k].resize(values);
    if (!in.Raw(data[k].data(), sizeof(M) * data[k].size())) {
      return Status::Invalid(corrupt + params[k].name + ")");
    }
  }
  std::int64_t steps_taken = 0;
  if (!in.Get(&steps_taken) || !in.at_end() || steps_taken < 0 || steps_taken > (1 << 30)) {
    return Status::Invalid(path + ": corrupt checkpoint (optimizer step)");
  }
  if (!apply) return Status::Ok();
  for (std::size_t k = 0; k < params.size(); ++k) {
    const std::size_t n = data[k].size() / 3;
    Tensor<M>* targets[] = {StoredWeights(*opt, k), &opt->first_moment(k),
                            &opt->second_moment(k)};
    for (int t = 0; t < 3; ++t) {
      targets[t]->FromHost(std::vector<M>(data[k].begin() + t * n, data[k].begin() + (t + 1) * n));
    }
  }
  opt->NarrowMasters();  // bf16: the values the layers read; else nothing
  opt->set_steps_taken(static_cast<int>(steps_taken));
  return Status::Ok();
}

}  // namespace

template <typename T>
Status DecodeStageCheckpoint(std::string_view bytes, const std::string& path,
                             const CheckpointKey& key, int stage,
                             const models::StageLayers& layers, int step, AdamW<T>* opt) {
  return DecodeInto(bytes, path, key, stage, layers, step, opt, /*apply=*/true);
}

template <typename T>
Status WriteStageCheckpoint(const std::string& dir, const CheckpointKey& key, int stage,
                            const models::StageLayers& layers, int step, AdamW<T>& opt) {
  if (mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) {
    return ReadErrno(dir + ": cannot make the checkpoint directory");
  }
  const std::string path = StageCheckpointPath(dir, stage, step);
  const std::string bytes = EncodeStageCheckpoint(key, stage, layers, step, opt);
  SF_RETURN_IF_ERROR(WriteFileDurably(path, bytes));
  // Read back as --resume reads it (issue 31: written files mean what they
  // say): the file holds these bytes, and they decode for this run.
  SF_ASSIGN_OR_RETURN(std::string back, ReadFile(path, kMaxCheckpointBytes));
  if (back != bytes) {
    return Status::Resource(path + ": the file read back differs from what was written");
  }
  const Status decoded = DecodeInto(back, path, key, stage, layers, step, &opt, /*apply=*/false);
  if (!decoded.ok()) return Status::Internal("checkpoint read back: " + decoded.message());
  return Status::Ok();
}

Status WriteCheckpointManifest(const std::string& dir, const CheckpointKey& key, int step) {
  auto fields = KeyFields(key);
  fields.emplace_back("step", std::to_string(step));
  SF_RETURN_IF_ERROR(WriteFileDurably(CheckpointManifestPath(dir), Header(fields)));
  // Read back as --resume reads it: the manifest names this step for this run.
  Result<int> back = ReadCheckpointManifest(dir, key);
  if (!back.ok() || *back != step) {
    return Status::Internal(CheckpointManifestPath(dir) + ": the manifest does not read back" +
                            (back.ok() ? " as step " + std::to_string(step)
                                       : ": " + back.status().message()));
  }
  return Status::Ok();
}

Result<int> ReadCheckpointManifest(const std::string& dir, const CheckpointKey& key,
                                   std::vector<std::string>* changed) {
  const std::string path = CheckpointManifestPath(dir);
  struct stat st {};
  if (stat(path.c_str(), &st) != 0 && errno == ENOENT) {
    return Status::Invalid(dir + ": no checkpoint (no " + kManifest + ")");
  }
  SF_ASSIGN_OR_RETURN(std::string text, ReadFile(path, 1 << 20));
  std::size_t end = 0;
  SF_ASSIGN_OR_RETURN(auto fields, ParseHeader(text, path, &end));
  if (end != text.size()) return Status::Invalid(path + ": corrupt checkpoint manifest");
  SF_RETURN_IF_ERROR(CheckFields(fields, KeyFields(key), path, key.may_differ, changed));
  auto it = fields.find("step");
  char* rest = nullptr;
  const long long step = it == fields.end() ? -1 : std::strtoll(it->second.c_str(), &rest, 10);
  if (it == fields.end() || rest == nullptr || *rest != '\0' || step < 0 || step > (1 << 30)) {
    return Status::Invalid(path + ": corrupt checkpoint manifest (step)");
  }
  return static_cast<int>(step);
}

template <typename T>
Status ReadStageCheckpoint(const std::string& dir, const CheckpointKey& key, int stage,
                           const models::StageLayers& layers, int step, AdamW<T>* opt) {
  const std::string path = StageCheckpointPath(dir, stage, step);
  SF_ASSIGN_OR_RETURN(std::string bytes, ReadFile(path, kMaxCheckpointBytes));
  return DecodeStageCheckpoint(bytes, path, key, stage, layers, step, opt);
}

void RemoveStaleStageCheckpoints(const std::string& dir, int stage, int keep_step) {
  const std::string prefix = "stage-" + std::to_string(stage) + ".step-";
  const std::string keep = prefix + std::to_string(keep_step) + ".ckpt";
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(prefix, 0) == 0 && name != keep) std::filesystem::remove(entry.path(), ec);
  }
}

template std::string EncodeStageCheckpoint<float>(const CheckpointKey&, int,
                                                  const models::StageLayers&, int, AdamW<float>&);
template std::string EncodeStageCheckpoint<double>(const CheckpointKey&, int,
                                                   const models::StageLayers&, int,
                                                   AdamW<double>&);
template Status DecodeStageCheckpoint<float>(std::string_view, const std::string&,
                                             const CheckpointKey&, int,
                                             const models::StageLayers&, int, AdamW<float>*);
template Status DecodeStageCheckpoint<double>(std::string_view, const std::string&,
                                              const CheckpointKey&, int,
                                              const models::StageLayers&, int, AdamW<double>*);
template Status WriteStageCheckpoint<float>(const std::string&, const CheckpointKey&, int,
                                            const models::StageLayers&, int, AdamW<float>&);
template Status WriteStageCheckpoint<double>(const std::string&, const CheckpointKey&, int,
                                             const models::StageLayers&, int, AdamW<double>&);
template Status ReadStageCheckpoint<float>(const std::string&, const CheckpointKey&, int,
                                           const models::StageLayers&, int, AdamW<float>*);
template Status ReadStageCheckpoint<double>(const std::string&, const CheckpointKey&, int,
                                            const models::StageLayers&, int, AdamW<double>*);
template std::string EncodeStageCheckpoint<bf16>(const CheckpointKey&, int,
                                                   const models::StageLayers&, int,
                                                   AdamW<bf16>&);
template Status DecodeStageCheckpoint<bf16>(std::string_view, const std::string&,
                                              const CheckpointKey&, int,
                                              const models::StageLayers&, int, AdamW<bf16>*);
template Status WriteStageCheckpoint<bf16>(const std::string&, const CheckpointKey&, int,
                                             const models::StageLayers&, int, AdamW<bf16>&);
template Status ReadStageCheckpoint<bf16>(const std::string&, const CheckpointKey&, int,
                                            const models::StageLayers&, int, AdamW<bf16>*);

}  // namespace stateflow::backend
