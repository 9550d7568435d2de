// WriteRunDump: the binary file first (so the index never names bytes that
// are not there), then the JSON index beside it.
#include "backend/train/run_dump.h"

#include <google/protobuf/struct.pb.h>
#include <google/protobuf/util/json_util.h>

#include <bit>
#include <cstdint>
#include <cstdio>
#include <sstream>
#include <type_traits>

#include "common/files.h"

namespace stateflow::backend {
namespace {

static_assert(std::endian::native == std::endian::little,
              "the run dump is little-endian raw memory");

// A number as JSON (17 significant digits: doubles round-trip).
std::string JsonNumber(double x) {
  char buf[40];
  std::snprintf(buf, sizeof(buf), "%.17g", x);
  return buf;
}

std::string JsonShape(const std::vector<std::int64_t>& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    s += (i > 0 ? ", " : "") + std::to_string(shape[i]);
  }
  return s + "]";
}

// Appends tensors to the binary file and their entries to the index.
class DumpWriter {
 public:

  void Add(const std::string& name, const char* dtype, const std::vector<std::int64_t>& shape,
           const void* data, std::int64_t bytes) {
    static const char kZeros[8] = {};
    const std::int64_t pad = (8 - offset_ % 8) % 8;
    bytes_.append(kZeros, static_cast<std::size_t>(pad));
    offset_ += pad;
    bytes_.append(static_cast<const char*>(data), static_cast<std::size_t>(bytes));
    entries_ += std::string(entries_.empty() ? "\n" : ",\n") + "    {\"name\": \"" + name +
                "\", \"dtype\": \"" + dtype + "\", \"shape\": " + JsonShape(shape) +
                ", \"offset\": " + std::to_string(offset_) +
                ", \"bytes\": " + std::to_string(bytes) + "}";
    offset_ += bytes;
  }

  const std::string& bytes() const { return bytes_; }
  const std::string& entries() const { return entries_; }

 private:
  std::string bytes_;  // the binary file's contents
  std::int64_t offset_ = 0;
  std::string entries_;  // the "tensors" list's items
};

std::string ModelJson(const pb::ModelSpec& model) {
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  options.always_print_primitive_fields = true;
  std::string out;
  (void)google::protobuf::util::MessageToJsonString(model, &out, options);
  return out;
}

}  // namespace

template <typename T>
Status WriteRunDump(const std::string& path, Trainer<T>& trainer,
                    const TrainOptions& options, const TextData& text,
                    const std::vector<std::pair<std::string, double>>& constants) {
  // Parameter values in the run's storage type ("bfloat16": bf16's bits).
  constexpr const char* kDtype = std::is_same_v<T, bf16>    ? "bfloat16"
                                 : std::is_same_v<T, float> ? "float32"
                                                            : "float64";
  const TrainSetup& setup = trainer.setup();
  DumpWriter writer;
  for (int local = 0; local < trainer.num_local_stages(); ++local) {
    for (const ParamRef<T>& p : trainer.module(local).Parameters()) {
      const std::vector<T> host = p.value->ToHost();
      writer.Add(p.name, kDtype, p.value->shape(), host.data(),
                 p.value->numel() * static_cast<std::int64_t>(sizeof(T)));
    }
  }
  for (int step = 0; step < options.steps; ++step) {
    SF_ASSIGN_OR_RETURN(Batch batch,
                        text.MakeBatch(options.seed, step, setup.microbatches, setup.seq_len,
                                       setup.microbatch_size));
    writer.Add("tokens.step" + std::to_string(step), "int32",
               {batch.microbatches * batch.microbatch_size, batch.seq_len + 1}, batch.tokens.data(),
               static_cast<std::int64_t>(batch.tokens.size() * sizeof(std::int32_t)));
  }
  // Checked writes (common/files.h): a full disk is exit 1 with the
  // system's reason, like every other file the project writes.
  SF_RETURN_IF_ERROR(WriteFile(path, writer.bytes()));

  std::string constants_json;
  for (const auto& [name, value] : constants) {
    constants_json += (constants_json.empty() ? "" : ", ") + ("\"" + name + "\": ") +
                      JsonNumber(value);
  }
  const AdamWOptions& a = options.adamw;
  std::ostringstream index;
  index << "{\n  \"format\": \"stateflow-run-dump 1\",\n"
        << "  \"dtype\": \"" << kDtype << "\",\n"
        << "  \"seed\": " << options.seed << ",\n"
        << "  \"steps\": " << options.steps << ",\n"
        << "  \"microbatches\": " << setup.microbatches << ",\n"
        << "  \"microbatch_size\": " << setup.microbatch_size << ",\n"
        << "  \"seq_len\": " << setup.seq_len << ",\n"
        << "  \"adamw\": {\"learning_rate\": " << JsonNumber(a.learning_rate)
        << ", \"beta1\": " << JsonNumber(a.beta1) << ", \"beta2\": " << JsonNumber(a.beta2)
        << ", \"epsilon\": " << JsonNumber(a.epsilon)
        << ", \"weight_decay\": " << JsonNumber(a.weight_decay) << "},\n"
        << "  \"constants\": {" << constants_json << "},\n"
        << "  \"model\": " << ModelJson(setup.model) << ",\n"
        << "  \"tensors\": [" << writer.entries() << "\n  ]\n}\n";
  // Read back before it is written: the index is JSON that names the
  // binary's bytes exactly (issue 31: written files mean what they say).
  google::protobuf::Struct parsed;
  if (!google::protobuf::util::JsonStringToMessage(index.str(), &parsed).ok()) {
    return Status::Internal("run dump " + path + ".json: the index does not parse as JSON");
  }
  SF_RETURN_IF_ERROR(WriteFile(path + ".json", index.str()));
  return Status::Ok();
}

template Status WriteRunDump<float>(const std::string&, Trainer<float>&, const TrainOptions&,
                                    const TextData&,
                                    const std::vector<std::pair<std::string, double>>&);
template Status WriteRunDump<double>(const std::string&, Trainer<double>&, const TrainOptions&,
                                     const TextData&,
                                     const std::vector<std::pair<std::string, double>>&);
template Status WriteRunDump<bf16>(const std::string&, Trainer<bf16>&, const TrainOptions&,
                                     const TextData&,
                                     const std::vector<std::pair<std::string, double>>&);

}  // namespace stateflow::backend
