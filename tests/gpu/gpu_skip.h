// The GPU tier's one skip line: every test here needs a usable CUDA device. A test that runs installs the crash
// report (RP_CRASH_REPORT=1, which scripts/gpu-check.sh sets).
#pragma once

#include <gtest/gtest.h>

#include "device/device.h"
#include "support/crash_report.h"

#define RP_SKIP_WITHOUT_GPU()                                                               \
  do {                                                                                      \
    const ::rp::device::Inventory rp_inv = ::rp::device::probe();                           \
    if (rp_inv.cudaDevices == 0) GTEST_SKIP() << "no usable GPU (" << rp_inv.reason << ")"; \
    ::rp::test::installCrashReport();                                                       \
  } while (0)
