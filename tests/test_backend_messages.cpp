// test_backend_messages.cpp - issue 8 item 14: on a machine without a GPU,
// tg_backend_cuda says there is no device (and, in a CUDA build without an
// NVIDIA driver, that no driver is installed) instead of the CUDA runtime's
// "driver version is insufficient".
#include <gtest/gtest.h>

#include <string>

#include "tinygml.h"

TEST(BackendMessages, NoGpuIsNotBlamedOnTheDriverVersion) {
    if (tg_cuda_available()) GTEST_SKIP() << "a CUDA device is present: nothing to check";
    tg_backend *b = tg_backend_cuda(0);
    ASSERT_EQ(b, nullptr);
    const std::string msg = tg_last_error();
    EXPECT_EQ(msg.rfind("[backend_cuda] ", 0), 0u) << msg;
    EXPECT_EQ(msg.find("insufficient"), std::string::npos) << msg;
    EXPECT_EQ(msg.find("driver version"), std::string::npos) << msg;
    EXPECT_TRUE(msg.find("no CUDA device present") != std::string::npos ||
                msg.find("has no CUDA backend (TG_CUDA=OFF)") != std::string::npos)
        << msg;
}
