// Model and cluster presets. Every number here is explained in docs/models.md
// (models) and docs/cost-model.md (clusters); which ones are the paper's and
// which are our assumptions is said there.
#include <array>
#include <functional>
#include <string>
#include <string_view>
#include <utility>

#include <google/protobuf/text_format.h>

#include "models/model.h"

namespace stateflow::models {
namespace {

// The paper's three sizes ("Model Configurations"): layers, hidden size,
// GDN / softmax-attention heads, Mamba-3 SSM heads, GQA group size.
struct PaperSize {
  const char* suffix;
  int layers;
  int hidden;
  int heads;        // GDN and softmax attention
  int ssm_heads;    // Mamba-3
  int gqa_group;    // hybrids
};
constexpr std::array<PaperSize, 3> kPaperSizes = {{
    {"3b", 32, 2560, 20, 80, 4},
    {"15b", 40, 5120, 40, 160, 5},
    {"32b", 64, 6144, 64, 192, 4},
}};

constexpr int kPaperVocab = 50304;
constexpr int kPresetConvWidth = 4;
constexpr int kMambaHeadDim = 64;
constexpr int kMambaStateDim = 128;
constexpr int kPresetHybridPeriod = 3;  // 3 recurrence layers per attention layer

// The common SwiGLU size: (8/3) * hidden rounded up to a multiple of 256.
int SwigluSize(int hidden) {
  const int raw = (8 * hidden + 2) / 3;  // ceil(8 h / 3)
  return (raw + 255) / 256 * 256;
}

pb::ModelSpec Common(const std::string& name, int layers, int hidden,
                     int vocab, int mlp) {
  pb::ModelSpec m;
  m.set_name(name);
  m.set_layer_pattern("recurrent");
  m.set_num_layers(layers);
  m.set_hidden_size(hidden);
  m.set_vocab_size(vocab);
  m.set_mlp_size(mlp);
  m.set_conv_width(kPresetConvWidth);
  m.set_untied_embeddings(true);
  return m;
}

// GDN and KDA: one key and one value head dim of hidden / heads
// (docs/models.md says why not GDN's expand_v = 2 layout; Kimi Linear's KDA
// has expand_v = 1).
void SetDeltaRule(pb::ModelSpec* m, const char* architecture, int heads, int head_dim) {
  m->set_architecture(architecture);
  m->set_num_heads(heads);
  m->set_head_dim_k(head_dim);
  m->set_head_dim_v(head_dim);
}
void SetGdn(pb::ModelSpec* m, int heads, int head_dim) { SetDeltaRule(m, "gdn", heads, head_dim); }
void SetKda(pb::ModelSpec* m, int heads, int head_dim) { SetDeltaRule(m, "kda", heads, head_dim); }

// DeltaNet (the gdn family without its decay gate) in the form published
// DeltaNet pipeline runs train: LayerNorm pre-norms and final norm, a GELU
// MLP with biases, a bias on the output projection, one head dim of
// hidden / heads for q, k and v (docs/models.md, "DeltaNet").
void SetDeltaNet(pb::ModelSpec* m, int heads) {
  SetDeltaRule(m, "gdn", heads, static_cast<int>(m->hidden_size()) / heads);
  m->set_decay("none");
  m->set_norm("layernorm");
  m->set_mlp("gelu");
  m->set_mlp_bias(true);
  m->set_out_proj_bias(true);
}

// DeltaNet's sizes: layers, hidden, heads (head dim hidden / heads), MLP 4 h.
pb::ModelSpec DeltaNetModel(const std::string& name, int layers, int hidden, int heads,
                            int vocab) {
  pb::ModelSpec m = Common(name, layers, hidden, vocab, 4 * hidden);
  SetDeltaNet(&m, heads);
  return m;
}

// Mamba-3: heads of head_dim channels, state_dim states each.
void SetMamba3(pb::ModelSpec* m, int heads, int head_dim, int state_dim) {
  m->set_architecture("mamba3");
  m->set_num_heads(heads);
  m->set_head_dim_v(head_dim);
  m->set_state_dim(state_dim);
}

void SetHybrid(pb::ModelSpec* m, int period, int attn_heads, int head_dim,
               int gqa_group) {
  m->set_layer_pattern("hybrid");
  m->set_hybrid_period(period);
  m->set_attn_heads(attn_heads);
  m->set_attn_head_dim(head_dim);
  m->set_gqa_group_size(gqa_group);
}

// The mixer families of the paper's sizes, and KDA's (Kimi Linear's
// mixer, at the GDN heads of each size).
enum class PaperMixer { kGdn, kMamba3, kKda };

pb::ModelSpec PaperModel(const PaperSize& size, PaperMixer mixer, bool hybrid) {
  const char* family = mixer == PaperMixer::kGdn    ? "gdn"
                       : mixer == PaperMixer::kKda ? "kda"
                                                   : "mamba3";
  std::string name = std::string(family) + (hybrid ? "-hybrid-" : "-") + size.suffix;
  pb::ModelSpec m = Common(name, size.layers, size.hidden, kPaperVocab,
                           SwigluSize(size.hidden));
  const int head_dim = size.hidden / size.heads;
  switch (mixer) {
    case PaperMixer::kGdn: SetGdn(&m, size.heads, head_dim); break;
    case PaperMixer::kKda: SetKda(&m, size.heads, head_dim); break;
    case PaperMixer::kMamba3: SetMamba3(&m, size.ssm_heads, kMambaHeadDim, kMambaStateDim); break;
  }
  if (hybrid) SetHybrid(&m, kPresetHybridPeriod, size.heads, head_dim, size.gqa_group);
  return m;
}

// Tiny models for the CPU backend (byte-level vocabulary) and the simulator.
std::vector<pb::ModelSpec> TinyModels() {
  std::vector<pb::ModelSpec> out;
  pb::ModelSpec gdn_tiny = Common("gdn-tiny", 4, 64, 256, 128);
  SetGdn(&gdn_tiny, 2, 32);
  out.push_back(gdn_tiny);

  pb::ModelSpec gdn_small = Common("gdn-small", 6, 128, 256, 384);
  SetGdn(&gdn_small, 4, 32);
  out.push_back(gdn_small);

  pb::ModelSpec gdn_hybrid_tiny = Common("gdn-hybrid-tiny", 4, 64, 256, 128);
  SetGdn(&gdn_hybrid_tiny, 2, 32);
  SetHybrid(&gdn_hybrid_tiny, kPresetHybridPeriod, 4, 16, 2);
  out.push_back(gdn_hybrid_tiny);

  // expand 2: 128 inner channels = 4 heads of 32.
  pb::ModelSpec mamba_tiny = Common("mamba3-tiny", 4, 64, 256, 128);
  SetMamba3(&mamba_tiny, 4, 32, 16);
  out.push_back(mamba_tiny);

  pb::ModelSpec mamba_hybrid_tiny =
      Common("mamba3-hybrid-tiny", 4, 64, 256, 128);
  SetMamba3(&mamba_hybrid_tiny, 4, 32, 16);
  SetHybrid(&mamba_hybrid_tiny, kPresetHybridPeriod, 4, 16, 2);
  out.push_back(mamba_hybrid_tiny);

  pb::ModelSpec kda_tiny = Common("kda-tiny", 4, 64, 256, 128);
  SetKda(&kda_tiny, 2, 32);
  out.push_back(kda_tiny);

  pb::ModelSpec kda_hybrid_tiny = Common("kda-hybrid-tiny", 4, 64, 256, 128);
  SetKda(&kda_hybrid_tiny, 2, 32);
  SetHybrid(&kda_hybrid_tiny, kPresetHybridPeriod, 4, 16, 2);
  out.push_back(kda_hybrid_tiny);

  out.push_back(DeltaNetModel("deltanet-tiny", 4, 64, 2, 256));
  return out;
}

std::vector<pb::ModelSpec> AllModels() {
  std::vector<pb::ModelSpec> out;
  for (PaperMixer mixer : {PaperMixer::kGdn, PaperMixer::kMamba3}) {
    for (bool hybrid : {false, true}) {
      for (const PaperSize& size : kPaperSizes) {
        out.push_back(PaperModel(size, mixer, hybrid));
      }
    }
  }
  // Kimi-Linear-style hybrids: 3 KDA layers to 1 softmax-attention layer.
  for (const PaperSize& size : kPaperSizes) {
    out.push_back(PaperModel(size, PaperMixer::kKda, /*hybrid=*/true));
  }
  // DeltaNet at the two sizes of the published DeltaNet runs.
  out.push_back(DeltaNetModel("deltanet-1.3b", 24, 2048, 16, kPaperVocab));
  out.push_back(DeltaNetModel("deltanet-2.7b", 32, 2560, 32, kPaperVocab));
  for (pb::ModelSpec& m : TinyModels()) out.push_back(std::move(m));
  return out;
}

pb::LinkSpec Link(double latency_s, double bandwidth_bytes_per_s) {
  pb::LinkSpec link;
  link.set_latency_s(latency_s);
  link.set_bandwidth_bytes_per_s(bandwidth_bytes_per_s);
  return link;
}

// models/presets/*-kernels.textproto, compiled in.
constexpr std::string_view kA100KernelCosts =
#include "a100_kernel_costs.inc"
    ;
constexpr std::string_view kH100KernelCosts =
#include "h100_kernel_costs.inc"
    ;
constexpr std::string_view kH200KernelCosts =
#include "h200_kernel_costs.inc"
    ;

// A GPU cluster preset: 8 GPUs per node on NVLink / NVSwitch, nodes on
// InfiniBand, one NIC per GPU. Each figure's source is in docs/cost-model.md
// ("Cluster presets"); the efficiency curve and the latencies are
// assumptions, the same for every GPU preset.
struct GpuPreset {
  const char* name;
  const char* device;
  double peak_flops;         // dense BF16 tensor-core peak
  double memory_bandwidth;   // HBM, bytes/s
  double memory_capacity;    // bytes
  double nvlink_bandwidth;   // per direction, bytes/s
  double network_bandwidth;  // per GPU between nodes, bytes/s
  std::string_view kernel_costs;  // text format; empty: none
  const char* kernel_costs_file;
};

constexpr double kGiB = 1024.0 * 1024 * 1024;

constexpr GpuPreset kGpuPresets[] = {
    {"a100-80gb-nvlink", "A100-SXM4-80GB", 312e12, 2.039e12, 80 * kGiB, 300e9, 25e9,
     kA100KernelCosts, "a100-sxm4-80gb-kernels.textproto"},
    // The same chip and NVSwitch fabric as the 80 GB part: its kernel costs
    // (an assumption: only the HBM differs).
    {"a100-40gb-nvlink", "A100-SXM4-40GB", 312e12, 1.555e12, 42405855232.0, 300e9, 25e9,
     kA100KernelCosts, "a100-sxm4-80gb-kernels.textproto"},
    {"h100-80gb-nvlink", "H100-SXM5-80GB", 989.5e12, 3.35e12, 80e9, 450e9, 50e9,
     kH100KernelCosts, "h100-sxm5-80gb-kernels.textproto"},
    {"h200-141gb-nvlink", "H200-SXM-141GB", 989.5e12, 4.8e12, 141e9, 450e9, 50e9,
     kH200KernelCosts, "h200-sxm-141gb-kernels.textproto"},
    {"b200-180gb-nvlink", "B200-SXM-180GB", 2.25e15, 8e12, 180e9, 900e9, 50e9, {}, ""},
};

// The GPU presets' efficiency curve (**an assumption**, docs/cost-model.md):
// the fraction of the peak a layer's kernels reach on t tokens in one call.
// It times what the kernel costs (public measurements, each source named in
// its file) do not cover.
constexpr std::array<std::pair<double, double>, 8> kAssumedEfficiency = {{{128, 0.30},
                                                                           {256, 0.38},
                                                                           {512, 0.46},
                                                                           {1024, 0.53},
                                                                           {2048, 0.59},
                                                                           {4096, 0.64},
                                                                           {8192, 0.68},
                                                                           {16384, 0.70}}};

Result<pb::ClusterSpec> GpuCluster(const GpuPreset& g) {
  pb::ClusterSpec c;
  c.set_name(g.name);
  pb::DeviceSpec* d = c.mutable_device();
  d->set_name(g.device);
  d->set_peak_flops(g.peak_flops);
  d->set_memory_bandwidth_bytes_per_s(g.memory_bandwidth);
  d->set_memory_capacity_bytes(g.memory_capacity);
  for (const auto& [tokens, efficiency] : kAssumedEfficiency) {
    pb::EfficiencyPoint* p = d->add_efficiency();
    p->set_tokens(tokens);
    p->set_efficiency(efficiency);
  }
  *c.mutable_pipeline_link() = Link(3e-6, g.nvlink_bandwidth);
  *c.mutable_intra_node_link() = Link(3e-6, g.nvlink_bandwidth);
  *c.mutable_inter_node_link() = Link(5e-6, g.network_bandwidth);
  c.set_devices_per_node(8);
  if (!g.kernel_costs.empty() &&
      !google::protobuf::TextFormat::ParseFromString(std::string(g.kernel_costs),
                                                     c.mutable_kernel_costs())) {
    return Status::Internal(std::string("models/presets/") + g.kernel_costs_file +
                            " (compiled in) does not parse");
  }
  return c;
}

// This kind of machine, one device = one core running fp32 Eigen kernels
// built without -march (measured ~10-11 GFLOP/s single-core sgemm and
// ~10 GB/s streaming, docs/cost-model.md); MPI ranks talk through shared
// memory (assumed figures). The peak is a bound on one x86-64 core's
// float32 rate, two 512-bit FMA units x 16 lanes x 2 FLOP at a 3.9 GHz
// boost = 250 GFLOP/s (the native build's single-core sgemm measured 90-117
// GFLOP/s, docs/cost-model.md), and the measured rate is its flat
// efficiency 0.04 (until 2026-11-28 the preset said peak 1e10 at efficiency
// 1: the same rate, but calibration bounds an efficiency by 1,
// sim/calibrate.h).
pb::ClusterSpec CpuCluster() {
  pb::ClusterSpec c;
  c.set_name("cpu");
  pb::DeviceSpec* d = c.mutable_device();
  d->set_name("cpu-core");
  d->set_peak_flops(2.5e11);
  d->set_memory_bandwidth_bytes_per_s(10e9);
  d->set_memory_capacity_bytes(24.0 * 1024 * 1024 * 1024);
  pb::EfficiencyPoint* flat = d->add_efficiency();
  flat->set_tokens(1);
  flat->set_efficiency(0.04);
  *c.mutable_pipeline_link() = Link(3e-6, 4e9);
  *c.mutable_intra_node_link() = Link(3e-6, 4e9);
  *c.mutable_inter_node_link() = Link(50e-6, 1.25e9);
  c.set_devices_per_node(2);
  return c;
}

std::string JoinNames(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& n : names) {
    if (!out.empty()) out += ", ";
    out += n;
  }
  return out;
}

}  // namespace

std::vector<std::string> ModelPresetNames() {
  std::vector<std::string> names;
  for (const pb::ModelSpec& m : AllModels()) names.push_back(m.name());
  return names;
}

Result<pb::ModelSpec> ModelPreset(std::string_view name) {
  for (pb::ModelSpec& m : AllModels()) {
    if (m.name() == name) return std::move(m);
  }
  return Status::Invalid("model_preset: unknown '" + std::string(name) +
                         "' (known: " + JoinNames(ModelPresetNames()) + ")");
}

std::vector<std::string> ClusterPresetNames() {
  std::vector<std::string> names;
  for (const GpuPreset& g : kGpuPresets) names.push_back(g.name);
  names.push_back("cpu");
  return names;
}

Result<pb::ClusterSpec> ClusterPreset(std::string_view name) {
  for (const GpuPreset& g : kGpuPresets) {
    if (name == g.name) return GpuCluster(g);
  }
  if (name == "cpu") return CpuCluster();
  return Status::Invalid("cluster_preset: unknown '" + std::string(name) +
                         "' (known: " + JoinNames(ClusterPresetNames()) + ")");
}

}  // namespace stateflow::models
