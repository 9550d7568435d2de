#include "scenario/report_header.h"

#include <algorithm>

namespace stateflow::scenario {

void FillReportHeader(const ReportHeader& h, pb::Report* report) {
  report->set_scenario(h.scenario);
  report->set_source(h.source);
  report->set_model(h.model);
  report->set_policy(h.plan->policy());
  report->set_pipeline_size(static_cast<std::uint32_t>(h.pipeline_size));
  report->set_tensor_size(static_cast<std::uint32_t>(h.tensor_size));
  report->set_data_size(static_cast<std::uint32_t>(h.data_size));
  report->set_microbatches(static_cast<std::uint32_t>(h.microbatches));
  report->set_context_size(static_cast<std::uint32_t>(std::max(1, h.context_size)));
  report->set_chunks(static_cast<std::uint32_t>(h.partition->num_chunks()));
  report->set_alpha(h.alpha);
  report->set_seq_len(static_cast<double>(h.seq_len));
  report->set_recompute(std::string(models::RecomputeName(h.recompute)));
  report->set_st_tile(static_cast<std::uint32_t>(h.st_tile));
  report->set_st_overlap(h.st_overlap);
  report->set_cost_model(h.cost_model);
  report->set_time_unit(h.time_unit);
  for (std::int64_t b : h.partition->boundaries()) report->add_chunk_boundaries(b);
  report->set_num_tasks(h.plan->num_actions());
}

}  // namespace stateflow::scenario
