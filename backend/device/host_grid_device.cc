#include "backend/device/host_grid_device.h"

namespace stateflow::backend {

Device& HostGridDevice() {
  static HostGrid* device = new HostGrid();  // never destroyed: used at exit
  return *device;
}

}  // namespace stateflow::backend
