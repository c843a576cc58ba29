#include <gtest/gtest.h>

TEST(OpcheckCli, Placeholder) { SUCCEED(); }
