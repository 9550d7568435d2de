// The registry of recurrent families (family.h): one line per family. The
// only place that maps an architecture name to its family.
#include <cstdlib>
#include <string>

#include "models/families/registry.h"

namespace stateflow::models {

const std::vector<const Family*>& Families() {
  static const std::vector<const Family*> families = {
      &GdnFamilyInstance(),
      &Mamba3FamilyInstance(),
      &KdaFamilyInstance(),
  };
  return families;
}

const Family* FindFamily(std::string_view architecture) {
  for (const Family* f : Families()) {
    if (f->name() == architecture) return f;
  }
  return nullptr;
}

std::string FamilyNames() {
  std::string names;
  for (const Family* f : Families()) {
    if (!names.empty()) names += ", ";
    names += f->name();
  }
  return names;
}

Result<const Family*> FamilyOf(const pb::ModelSpec& model) {
  const Family* f = FindFamily(model.architecture());
  if (f == nullptr) {
    return Status::Invalid("model.architecture: unknown '" + model.architecture() +
                           "' (known: " + FamilyNames() + ")");
  }
  return f;
}

const Family& FamilyOfValid(const pb::ModelSpec& model) {
  const Family* f = FindFamily(model.architecture());
  // REQUIRES: ValidateModel(model).ok(), which checks the name.
  if (f == nullptr) std::abort();
  return *f;
}

}  // namespace stateflow::models
