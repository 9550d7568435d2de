// The families the registry (registry.cc) lists, one accessor each, defined
// in the family's own file (gdn.cc, mamba3.cc, kda.cc). Internal to models/:
// everything else finds a family through family.h by name.
#pragma once

#include "models/family.h"

namespace stateflow::models {

const Family& GdnFamilyInstance();
const Family& Mamba3FamilyInstance();
const Family& KdaFamilyInstance();

}  // namespace stateflow::models
