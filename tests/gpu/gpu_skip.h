// The GPU tier's one skip line: every test here needs a usable CUDA device.
#pragma once

#include <gtest/gtest.h>

#include "device/device.h"

#define RP_SKIP_WITHOUT_GPU()                                                               \
  do {                                                                                      \
    const ::rp::device::Inventory rp_inv = ::rp::device::probe();                           \
    if (rp_inv.cudaDevices == 0) GTEST_SKIP() << "no usable GPU (" << rp_inv.reason << ")"; \
  } while (0)
