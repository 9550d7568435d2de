// The registry of recurrent layer families (layer_family.h): one line per
// family. The only place on the backend that maps an architecture name to
// its layer.
#include "backend/model/layer_family.h"

#include "backend/layers/gdn_layer.h"
#include "backend/layers/kda_layer.h"
#include "backend/layers/mamba3_layer.h"

namespace stateflow::backend {

const std::vector<LayerFamily>& LayerFamilies() {
  static const std::vector<LayerFamily> families = {
      MakeLayerFamily<GdnFamilyTraits>(),
      MakeLayerFamily<Mamba3FamilyTraits>(),
      MakeLayerFamily<KdaFamilyTraits>(),
  };
  return families;
}

const LayerFamily* FindLayerFamily(std::string_view architecture) {
  for (const LayerFamily& f : LayerFamilies()) {
    if (f.name == architecture) return &f;
  }
  return nullptr;
}

}  // namespace stateflow::backend
