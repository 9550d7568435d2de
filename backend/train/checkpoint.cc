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

// 2: the body lists pieces (a parameter range each), so that a distributed
// optimizer's shard is a file (1 held whole parameters only).
constexpr char kMagic[] = "stateflow-checkpoint 2";
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
          {"parallel.tensor_size", std::to_string(k.tensor_size)},
          {"parallel.distributed_optimizer", k.distributed_optimizer ? "true" : "false"},
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
                                                             int step, std::size_t params,
                                                             const CheckpointPart& part) {
  auto fields = KeyFields(key);
  fields.insert(fields.end(), {{"stage", std::to_string(stage)},
                               {"stage.layers", std::to_string(layers.first) + "-" +
                                                    std::to_string(layers.last)},
                               {"tensor_rank", std::to_string(std::max(0, part.tensor_rank))},
                               {"shard", std::to_string(part.shard)},
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
  k.tensor_size = setup.tensor_size;
  k.distributed_optimizer = setup.distributed_optimizer && setup.data_size > 1;
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

std::string CheckpointPart::Suffix() const {
  std::string s;
  if (tensor_rank >= 0) s += ".tp-" + std::to_string(tensor_rank);
  if (shard >= 0) s += ".shard-" + std::to_string(shard);
  return s;
}

std::string StageCheckpointPath(const std::string& dir, int stage, int step,
                                const CheckpointPart& part) {
  return dir + "/stage-" + std::to_string(stage) + part.Suffix() + ".step-" +
         std::to_string(step) + ".ckpt";
}

namespace {

// Piece j's stored weights on the host: in bf16 its fp32 master weights
// (the value is their rounding: AdamW::NarrowMasters), else its range of the
// parameter's value.
template <typename T>
std::vector<MasterOf<T>> StoredWeights(AdamW<T>& opt, std::size_t j) {
  if constexpr (kHasMaster<T>) {
    return opt.master(j).ToHost();
  } else {
    const auto& piece = opt.pieces()[j];
    const std::vector<T> whole = opt.params()[piece.param].value->ToHost();
    return std::vector<T>(whole.begin() + piece.offset,
                          whole.begin() + piece.offset + piece.count);
  }
}

// Elements [offset, offset + values.size()) of `t` = values.
template <typename V>
void WriteRange(Tensor<V>* t, std::int64_t offset, const std::vector<V>& values) {
  std::vector<V> host = t->ToHost();
  std::copy(values.begin(), values.end(), host.begin() + offset);
  t->FromHost(host);
}

}  // namespace

template <typename T>
std::string EncodeStageCheckpoint(const CheckpointKey& key, int stage,
                                  const models::StageLayers& layers, int step, AdamW<T>& opt,
                                  const CheckpointPart& part) {
  const std::vector<ParamRef<T>>& params = opt.params();
  auto fields = StageFields(key, stage, layers, step, params.size(), part);
  fields.emplace_back("pieces", std::to_string(opt.pieces().size()));
  std::string out = Header(fields);
  using M = MasterOf<T>;
  for (std::size_t j = 0; j < opt.pieces().size(); ++j) {
    const auto& piece = opt.pieces()[j];
    const std::string& name = params[piece.param].name;
    Put(static_cast<std::uint32_t>(name.size()), &out);
    out += name;
    Put(static_cast<std::uint32_t>(piece.param), &out);
    Put(static_cast<std::int64_t>(params[piece.param].value->numel()), &out);
    Put(piece.offset, &out);
    Put(piece.count, &out);
    for (const std::vector<M>& host :
         {StoredWeights(opt, j), opt.first_moment(j).ToHost(), opt.second_moment(j).ToHost()}) {
      out.append(reinterpret_cast<const char*>(host.data()), sizeof(M) * host.size());
    }
  }
  Put(static_cast<std::int64_t>(opt.steps_taken()), &out);
  Put(Fnv1a(out), &out);
  return out;
}

namespace {

// One piece of a file: parameter `param` elements [offset, offset + count).
template <typename M>
struct FilePiece {
  std::size_t param = 0;
  std::int64_t offset = 0, count = 0;
  std::vector<M> stored, m, v;  // count each
};

template <typename M>
struct FileContents {
  std::vector<FilePiece<M>> pieces;
  std::int64_t steps_taken = 0;
};

// Parses and checks `bytes` (from `path`) as part `part` of stage `stage`:
// the checksum, the key, the parameters' names and sizes, pieces inside
// them; with `own`, the pieces must be `opt`'s own. `values` false: checks
// only (the read-back of a file just written).
template <typename T>
Result<FileContents<MasterOf<T>>> ParseStageFile(std::string_view bytes, const std::string& path,
                                                 const CheckpointKey& key, int stage,
                                                 const models::StageLayers& layers, int step,
                                                 const AdamW<T>& opt, const CheckpointPart& part,
                                                 bool own, bool values) {
  using M = MasterOf<T>;
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
  const std::vector<ParamRef<T>>& params = opt.params();
  SF_RETURN_IF_ERROR(CheckFields(fields, StageFields(key, stage, layers, step, params.size(), part),
                                 path, key.may_differ));
  auto pieces_field = fields.find("pieces");
  char* rest = nullptr;
  const long long count =
      pieces_field == fields.end() ? -1 : std::strtoll(pieces_field->second.c_str(), &rest, 10);
  if (count < 0 || rest == nullptr || *rest != '\0' ||
      count > static_cast<long long>(2 * params.size() + 2) ||
      (own && count != static_cast<long long>(opt.pieces().size()))) {
    return Status::Invalid(path + ": corrupt checkpoint (pieces)");
  }
  Reader in(body.substr(end));
  FileContents<M> contents;
  const std::string corrupt = path + ": corrupt checkpoint (piece ";
  for (long long j = 0; j < count; ++j) {
    std::uint32_t name_size = 0, param = 0;
    std::int64_t numel = 0;
    FilePiece<M> piece;
    std::string name;
    if (!in.Get(&name_size) || name_size > 4096) {
      return Status::Invalid(corrupt + std::to_string(j) + ")");
    }
    name.resize(name_size);
    if (!in.Raw(name.data(), name_size) || !in.Get(&param) || !in.Get(&numel) ||
        !in.Get(&piece.offset) || !in.Get(&piece.count)) {
      return Status::Invalid(corrupt + std::to_string(j) + ")");
    }
    if (param >= params.size() || name != params[param].name ||
        numel != params[param].value->numel()) {
      return Status::Invalid(path + ": the checkpoint's piece " + std::to_string(j) + " is of " +
                             name + " (" + std::to_string(numel) + " elements), not of this " +
                             "run's parameter " + std::to_string(param) + " " +
                             (param < params.size()
                                  ? params[param].name + " (" +
                                        std::to_string(params[param].value->numel()) +
                                        " elements)"
                                  : std::string("(none)")));
    }
    if (piece.offset < 0 || piece.count < 0 || piece.offset + piece.count > numel) {
      return Status::Invalid(corrupt + std::to_string(j) + ": range)");
    }
    piece.param = param;
    if (own) {
      const auto& mine = opt.pieces()[static_cast<std::size_t>(j)];
      if (mine.param != piece.param || mine.offset != piece.offset || mine.count != piece.count) {
        return Status::Invalid(path + ": the checkpoint's piece " + std::to_string(j) + " of " +
                               name + " is elements [" + std::to_string(piece.offset) + ", " +
                               std::to_string(piece.offset + piece.count) + "), this run's [" +
                               std::to_string(mine.offset) + ", " +
                               std::to_string(mine.offset + mine.count) + ")");
      }
    }
    const std::size_t n = static_cast<std::size_t>(piece.count);
    if (!values) {
      if (!in.Skip(3 * sizeof(M) * n)) return Status::Invalid(corrupt + std::to_string(j) + ")");
      continue;
    }
    for (std::vector<M>* t : {&piece.stored, &piece.m, &piece.v}) {
      t->resize(n);
      if (!in.Raw(t->data(), sizeof(M) * n)) {
        return Status::Invalid(corrupt + std::to_string(j) + ")");
      }
    }
    contents.pieces.push_back(std::move(piece));
  }
  std::int64_t steps_taken = 0;
  if (!in.Get(&steps_taken) || !in.at_end() || steps_taken < 0 || steps_taken > (1 << 30)) {
    return Status::Invalid(path + ": corrupt checkpoint (optimizer step)");
  }
  contents.steps_taken = steps_taken;
  return contents;
}

// Puts an own file's pieces into `opt` (weights, moments, masters, the step
// counter).
template <typename T>
void ApplyOwn(const FileContents<MasterOf<T>>& c, AdamW<T>* opt) {
  for (std::size_t j = 0; j < c.pieces.size(); ++j) {
    const FilePiece<MasterOf<T>>& p = c.pieces[j];
    if constexpr (kHasMaster<T>) {
      opt->master(j).FromHost(p.stored);
    } else {
      WriteRange(opt->params()[p.param].value, p.offset, p.stored);
    }
    opt->first_moment(j).FromHost(p.m);
    opt->second_moment(j).FromHost(p.v);
  }
  opt->NarrowMasters();  // bf16: the values the layers read; else nothing
  opt->set_steps_taken(static_cast<int>(c.steps_taken));
}

// Puts another shard's pieces into the parameters' values only (the ranges
// its owner updates; in bf16 its masters rounded, as the owner's Narrow).
template <typename T>
void ApplyValues(const FileContents<MasterOf<T>>& c, AdamW<T>* opt) {
  for (const FilePiece<MasterOf<T>>& p : c.pieces) {
    if constexpr (kHasMaster<T>) {
      std::vector<T> narrow(p.stored.size());
      for (std::size_t e = 0; e < narrow.size(); ++e) narrow[e] = T(p.stored[e]);
      WriteRange(opt->params()[p.param].value, p.offset, narrow);
    } else {
      WriteRange(opt->params()[p.param].value, p.offset, p.stored);
    }
  }
}

}  // namespace

template <typename T>
Status DecodeStageCheckpoint(std::string_view bytes, const std::string& path,
                             const CheckpointKey& key, int stage,
                             const models::StageLayers& layers, int step, AdamW<T>* opt,
                             const CheckpointPart& part) {
  SF_ASSIGN_OR_RETURN(auto contents, ParseStageFile(bytes, path, key, stage, layers, step, *opt,
                                                    part, /*own=*/true, /*values=*/true));
  ApplyOwn(contents, opt);
  return Status::Ok();
}

template <typename T>
Status WriteStageCheckpoint(const std::string& dir, const CheckpointKey& key, int stage,
                            const models::StageLayers& layers, int step, AdamW<T>& opt,
                            const CheckpointPart& part) {
  if (mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) {
    return ReadErrno(dir + ": cannot make the checkpoint directory");
  }
  const std::string path = StageCheckpointPath(dir, stage, step, part);
  const std::string bytes = EncodeStageCheckpoint(key, stage, layers, step, opt, part);
  SF_RETURN_IF_ERROR(WriteFileDurably(path, bytes));
  // Read back as --resume reads it (issue 31: written files mean what they
  // say): the file holds these bytes, and they decode for this run.
  SF_ASSIGN_OR_RETURN(std::string back, ReadFile(path, kMaxCheckpointBytes));
  if (back != bytes) {
    return Status::Resource(path + ": the file read back differs from what was written");
  }
  const auto decoded = ParseStageFile(back, path, key, stage, layers, step, opt, part,
                                      /*own=*/true, /*values=*/false);
  if (!decoded.ok()) return Status::Internal("checkpoint read back: " + decoded.status().message());
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
                           const models::StageLayers& layers, int step, AdamW<T>* opt,
                           const CheckpointPart& part) {
  if (part.shard < 0) {
    const std::string path = StageCheckpointPath(dir, stage, step, part);
    SF_ASSIGN_OR_RETURN(std::string bytes, ReadFile(path, kMaxCheckpointBytes));
    return DecodeStageCheckpoint(bytes, path, key, stage, layers, step, opt, part);
  }
  // A shard: every replica's file of this stage (and tensor rank), its own
  // whole, the others' parameter ranges; all read and checked before any is
  // applied.
  std::vector<FileContents<MasterOf<T>>> files;
  for (int d = 0; d < key.data_size; ++d) {
    CheckpointPart other = part;
    other.shard = d;
    const std::string path = StageCheckpointPath(dir, stage, step, other);
    SF_ASSIGN_OR_RETURN(std::string bytes, ReadFile(path, kMaxCheckpointBytes));
    SF_ASSIGN_OR_RETURN(auto contents,
                        ParseStageFile(bytes, path, key, stage, layers, step, *opt, other,
                                       /*own=*/d == part.shard, /*values=*/true));
    files.push_back(std::move(contents));
  }
  for (int d = 0; d < key.data_size; ++d) {
    if (d != part.shard) ApplyValues(files[static_cast<std::size_t>(d)], opt);
  }
  ApplyOwn(files[static_cast<std::size_t>(part.shard)], opt);
  return Status::Ok();
}

void RemoveStaleStageCheckpoints(const std::string& dir, int stage, int keep_step,
                                 const CheckpointPart& part) {
  const std::string prefix = "stage-" + std::to_string(stage) + part.Suffix() + ".step-";
  const std::string keep = prefix + std::to_string(keep_step) + ".ckpt";
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(prefix, 0) == 0 && name != keep) std::filesystem::remove(entry.path(), ec);
  }
}

#define SF_INSTANTIATE(T)                                                                   \
  template std::string EncodeStageCheckpoint<T>(const CheckpointKey&, int,                 \
                                                const models::StageLayers&, int, AdamW<T>&, \
                                                const CheckpointPart&);                    \
  template Status DecodeStageCheckpoint<T>(std::string_view, const std::string&,           \
                                           const CheckpointKey&, int,                      \
                                           const models::StageLayers&, int, AdamW<T>*,     \
                                           const CheckpointPart&);                         \
  template Status WriteStageCheckpoint<T>(const std::string&, const CheckpointKey&, int,   \
                                          const models::StageLayers&, int, AdamW<T>&,      \
                                          const CheckpointPart&);                          \
  template Status ReadStageCheckpoint<T>(const std::string&, const CheckpointKey&, int,    \
                                         const models::StageLayers&, int, AdamW<T>*,       \
                                         const CheckpointPart&);
SF_INSTANTIATE(float)
SF_INSTANTIATE(double)
SF_INSTANTIATE(bf16)
#undef SF_INSTANTIATE

}  // namespace stateflow::backend
