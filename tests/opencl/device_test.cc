// The OpenCL device layer on PoCL: discovery, copies, the buffer pool, the
// program cache, build failures with their log, out-of-memory errors, status
// names, device specs, and CLBlast GEMM against the CPU.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "nabla/cpu/cpu.h"
#include "nabla/error.h"
#include "nabla/opencl/opencl.h"
#include "nabla/opencl/opencl_c.h"
#include "nabla/tensor.h"

// The table libnabla_opencl exports (src/c_table.cc), which this test links.
extern "C" const nabla_opencl_api nabla_opencl_api_v1;

namespace nabla::opencl {
namespace {

class OpenClDeviceTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { cpu::InitCpuBackend(); }
  OpenClDevice& Dev() { return GetDevice(0); }
};

const char* kSource = R"CL(
__kernel void axpb(__global const float* x, __global float* y, long n, float a, float b) {
  long i = get_global_id(0);
  if (i < n) y[i] = a * x[i] + b;
}
)CL";

TEST_F(OpenClDeviceTest, ListsThePoclPlatformWithMemoryAndComputeUnits) {
  auto platforms = ListPlatforms();
  ASSERT_FALSE(platforms.empty()) << "no OpenCL platform: is pocl-opencl-icd installed?";
  ASSERT_FALSE(platforms[0].devices.empty());
  const DeviceInfo& d = platforms[0].devices[0];
  EXPECT_EQ(d.index, 0);
  EXPECT_FALSE(d.name.empty());
  EXPECT_GT(d.compute_units, 0u);
  EXPECT_GT(d.global_mem_bytes, 0u);
  EXPECT_GE(d.global_mem_bytes, d.max_alloc_bytes);
  EXPECT_EQ(Dev().Name(), "opencl:0 (" + d.name + ")");
  EXPECT_EQ(Dev().Type(), DeviceType::kOpenCL);
  EXPECT_EQ(&GetDevice(0), &Dev()) << "one device object per process";
}

TEST_F(OpenClDeviceTest, CopiesRoundTripThroughTheDevice) {
  std::vector<float> src(1000), back(1000, 0.0f);
  std::iota(src.begin(), src.end(), 0.5f);
  void* a = Dev().Allocate(src.size() * sizeof(float));
  void* b = Dev().Allocate(src.size() * sizeof(float));
  Dev().CopyFromHost(a, src.data(), src.size() * sizeof(float));
  Dev().CopyOnDevice(b, a, src.size() * sizeof(float));
  Dev().CopyToHost(back.data(), b, back.size() * sizeof(float));
  EXPECT_EQ(back, src);
  const float seven = 7.0f;
  Dev().Fill(b, 4 * sizeof(float), 2 * sizeof(float), &seven, sizeof seven);
  Dev().CopyRegion(b, 0, a, 10 * sizeof(float), sizeof(float));
  Dev().CopyToHost(back.data(), b, back.size() * sizeof(float));
  EXPECT_EQ(back[0], 10.5f);
  EXPECT_EQ(back[3], 3.5f);
  EXPECT_EQ(back[4], 7.0f);
  EXPECT_EQ(back[5], 7.0f);
  EXPECT_EQ(back[6], 6.5f);
  Dev().Free(a, src.size() * sizeof(float));
  Dev().Free(b, src.size() * sizeof(float));
}

TEST_F(OpenClDeviceTest, FreedBuffersAreReusedFromThePool) {
  const size_t live = Dev().LiveBytes();
  void* a = Dev().Allocate(5000);
  EXPECT_GE(Dev().LiveBytes(), live + 5000);
  Dev().Free(a, 5000);
  EXPECT_EQ(Dev().LiveBytes(), live);
  EXPECT_GE(Dev().PooledBytes(), 5000u);
  // Same size class: the same buffer comes back.
  void* b = Dev().Allocate(4900);
  EXPECT_EQ(b, a);
  Dev().Free(b, 4900);
  Dev().ReleasePool();
  EXPECT_EQ(Dev().PooledBytes(), 0u);
}

TEST_F(OpenClDeviceTest, LaunchesAKernelAndCachesItsProgram) {
  const int64_t n = 100;
  std::vector<float> x(n), y(n);
  std::iota(x.begin(), x.end(), 0.0f);
  void* xb = Dev().Allocate(n * sizeof(float));
  void* yb = Dev().Allocate(n * sizeof(float));
  Dev().CopyFromHost(xb, x.data(), n * sizeof(float));
  EXPECT_FALSE(Dev().IsProgramCached(kSource, "-DUNUSED=1"));
  Dev().Launch(kSource, "-DUNUSED=1", "axpb",
               {KernelArg::Buffer(xb), KernelArg::Buffer(yb), KernelArg(n), KernelArg(2.0f), KernelArg(1.0f)}, n);
  EXPECT_TRUE(Dev().IsProgramCached(kSource, "-DUNUSED=1"));
  Dev().CopyToHost(y.data(), yb, n * sizeof(float));
  for (int64_t i = 0; i < n; ++i) EXPECT_EQ(y[i], 2.0f * i + 1.0f);
  Dev().Free(xb, n * sizeof(float));
  Dev().Free(yb, n * sizeof(float));
}

TEST_F(OpenClDeviceTest, AFailedBuildCarriesItsBuildLog) {
  try {
    Dev().Launch("__kernel void broken(__global float* x) { x[0] = undeclared_thing; }", "", "broken",
                 {KernelArg::Buffer(nullptr)}, 1);
    FAIL() << "the build should fail";
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_EQ(e.kind(), ErrorKind::kExternal);
    EXPECT_NE(msg.find("CL_BUILD_PROGRAM_FAILURE"), std::string::npos) << msg;
    EXPECT_NE(msg.find("build log"), std::string::npos) << msg;
    EXPECT_NE(msg.find("undeclared_thing"), std::string::npos) << msg;
    EXPECT_NE(msg.find("opencl:0"), std::string::npos) << msg;
  }
}

TEST_F(OpenClDeviceTest, AnUnknownKernelNameIsAnErrorByName) {
  try {
    Dev().Launch(kSource, "", "no_such_kernel", {}, 1);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("CL_INVALID_KERNEL_NAME"), std::string::npos) << e.what();
  }
}

TEST_F(OpenClDeviceTest, RunningOutOfDeviceMemoryIsAClearError) {
  const uint64_t too_big = Dev().Info().max_alloc_bytes + 1;
  try {
    Dev().Allocate(too_big);
    FAIL() << "allocating more than CL_DEVICE_MAX_MEM_ALLOC_SIZE should fail";
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_EQ(e.kind(), ErrorKind::kExternal);
    EXPECT_NE(msg.find("out of device memory"), std::string::npos) << msg;
    EXPECT_NE(msg.find(std::to_string(too_big)), std::string::npos) << msg;
  }
  // The device still works afterwards.
  void* ok = Dev().Allocate(16);
  Dev().Free(ok, 16);
}

TEST_F(OpenClDeviceTest, StatusCodesHaveNames) {
  EXPECT_EQ(StatusName(-5), "CL_OUT_OF_RESOURCES");
  EXPECT_EQ(StatusName(-4), "CL_MEM_OBJECT_ALLOCATION_FAILURE");
  EXPECT_EQ(StatusName(-11), "CL_BUILD_PROGRAM_FAILURE");
  EXPECT_EQ(StatusName(-1001), "CL_PLATFORM_NOT_FOUND_KHR");
  EXPECT_EQ(StatusName(-12345), "CL_UNKNOWN_ERROR(-12345)");
  EXPECT_EQ(ClBlastStatusName(-1009), "kInsufficientMemoryC");
  EXPECT_EQ(ClBlastStatusName(-2044), "kNoDoublePrecision");
  EXPECT_EQ(ClBlastStatusName(-5), "CL_OUT_OF_RESOURCES");
}

TEST_F(OpenClDeviceTest, DeviceSpecs) {
  EXPECT_EQ(&ResolveDevice("cpu"), &HostDevice());
  EXPECT_EQ(&ResolveDevice("opencl"), &GetDevice(0));
  EXPECT_EQ(&ResolveDevice("opencl:0"), &GetDevice(0));
  try {
    ResolveDevice("opencl:7");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kNotFound);
    EXPECT_NE(std::string(e.what()).find("opencl:0 ("), std::string::npos) << "lists what exists: " << e.what();
  }
  for (const char* bad : {"gpu", "opencl:", "opencl:x", "opencl:-1", "OpenCL"}) {
    try {
      ResolveDevice(bad);
      FAIL() << bad;
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument) << bad;
    }
  }
}

template <typename T>
void CheckGemm(OpenClDevice& dev, bool ta, bool tb, int64_t m, int64_t n, int64_t k) {
  std::mt19937 rng(42);
  std::uniform_real_distribution<T> u(-1, 1);
  std::vector<T> a(m * k), b(k * n), c(m * n), want(m * n);
  for (auto& v : a) v = u(rng);
  for (auto& v : b) v = u(rng);
  const int64_t lda = ta ? m : k, ldb = tb ? k : n;
  cpu::Gemm(ta, tb, m, n, k, T(1.5), a.data(), lda, b.data(), ldb, T(0), want.data(), n);
  void* ab = dev.Allocate(a.size() * sizeof(T));
  void* bb = dev.Allocate(b.size() * sizeof(T));
  void* cb = dev.Allocate(c.size() * sizeof(T));
  dev.CopyFromHost(ab, a.data(), a.size() * sizeof(T));
  dev.CopyFromHost(bb, b.data(), b.size() * sizeof(T));
  dev.Gemm(ta, tb, m, n, k, T(1.5), ab, 0, lda, bb, 0, ldb, T(0), cb, 0, n);
  dev.CopyToHost(c.data(), cb, c.size() * sizeof(T));
  for (size_t i = 0; i < c.size(); ++i) ASSERT_NEAR(c[i], want[i], 1e-4) << i;
  dev.Free(ab, a.size() * sizeof(T));
  dev.Free(bb, b.size() * sizeof(T));
  dev.Free(cb, c.size() * sizeof(T));
}

TEST_F(OpenClDeviceTest, ClBlastGemmMatchesTheCpu) {
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      SCOPED_TRACE(std::to_string(ta) + std::to_string(tb));
      CheckGemm<float>(Dev(), ta, tb, 17, 9, 33);
      CheckGemm<double>(Dev(), ta, tb, 5, 7, 3);
    }
}

TEST_F(OpenClDeviceTest, GemmWithAnEmptyInnerDimensionZeroesTheOutput) {
  std::vector<float> c(6, 3.0f);
  void* cb = Dev().Allocate(c.size() * sizeof(float));
  Dev().CopyFromHost(cb, c.data(), c.size() * sizeof(float));
  Dev().Gemm(false, false, 2, 3, 0, 1.0f, cb, 0, 1, cb, 0, 3, 0.0f, cb, 0, 3);
  Dev().CopyToHost(c.data(), cb, c.size() * sizeof(float));
  for (float v : c) EXPECT_EQ(v, 0.0f);
  Dev().Free(cb, c.size() * sizeof(float));
}

// The C table plugins on the C ABI use (nabla/opencl/opencl_c.h), called as
// such a plugin would: what works gives OpenClDevice's results, and every
// bad handle, range or device is an error through set_error, never a crash.
std::string g_error;
void RecordError(int32_t, const char* message) { g_error = message ? message : ""; }

class OpenClCTableTest : public OpenClDeviceTest {
 protected:
  void SetUp() override {
    api_.set_error = RecordError;
    g_error.clear();
  }
  nabla_device* Handle() { return reinterpret_cast<nabla_device*>(static_cast<Device*>(&Dev())); }
  // Expects a failure whose message holds `what`.
  void ExpectError(int32_t status, const std::string& what) {
    EXPECT_EQ(status, NABLA_C_ERROR);
    EXPECT_NE(g_error.find(what), std::string::npos) << g_error;
    g_error.clear();
  }
  const nabla_opencl_api& cl_ = nabla_opencl_api_v1;
  nabla_api api_{};
};

TEST_F(OpenClCTableTest, IsVersionTwoWithEveryFunction) {
  EXPECT_EQ(cl_.api_version, 2u);
  EXPECT_EQ(cl_.struct_size, sizeof(nabla_opencl_api));
  for (const void* f : {(const void*)cl_.buffer_allocate, (const void*)cl_.buffer_free, (const void*)cl_.stage_tensor,
                        (const void*)cl_.fill, (const void*)cl_.copy_region, (const void*)cl_.copy_from_host,
                        (const void*)cl_.copy_to_host, (const void*)cl_.gemm})
    EXPECT_NE(f, nullptr);
}

TEST_F(OpenClCTableTest, BuffersCopiesFillAndGemmWork) {
  const nabla_api* api = &api_;
  void* a = cl_.buffer_allocate(api, Handle(), 6 * sizeof(float));
  void* b = cl_.buffer_allocate(api, Handle(), 6 * sizeof(float));
  void* c = cl_.buffer_allocate(api, Handle(), 4 * sizeof(float));
  ASSERT_TRUE(a && b && c) << g_error;
  const float av[6] = {1, 2, 3, 4, 5, 6}, bv[6] = {1, 0, 0, 1, 1, 1};
  ASSERT_EQ(cl_.copy_from_host(api, Handle(), a, 0, av, sizeof av), NABLA_C_OK) << g_error;
  ASSERT_EQ(cl_.copy_from_host(api, Handle(), b, 0, bv, sizeof bv), NABLA_C_OK) << g_error;
  // [2 x 3] x [3 x 2].
  ASSERT_EQ(cl_.gemm(api, Handle(), NABLA_C_FLOAT32, 0, 0, 2, 2, 3, 1.0, a, 0, 3, b, 0, 2, 0.0, c, 0, 2), NABLA_C_OK)
      << g_error;
  float cv[4] = {};
  ASSERT_EQ(cl_.copy_to_host(api, Handle(), cv, c, 0, sizeof cv), NABLA_C_OK) << g_error;
  EXPECT_EQ(std::vector<float>(cv, cv + 4), (std::vector<float>{4, 5, 10, 11}));
  // Offsets: a[4..6) = 7, b[1] = a[5], read back from offset 4 bytes.
  const float seven = 7;
  ASSERT_EQ(cl_.fill(api, Handle(), a, 4 * sizeof(float), 2 * sizeof(float), &seven, sizeof seven), NABLA_C_OK);
  ASSERT_EQ(cl_.copy_region(api, Handle(), b, sizeof(float), a, 5 * sizeof(float), sizeof(float)), NABLA_C_OK);
  const float nine = 9;
  ASSERT_EQ(cl_.copy_from_host(api, Handle(), b, 2 * sizeof(float), &nine, sizeof nine), NABLA_C_OK) << g_error;
  float back[3] = {};
  ASSERT_EQ(cl_.copy_to_host(api, Handle(), back, b, sizeof(float), sizeof back), NABLA_C_OK) << g_error;
  EXPECT_EQ(std::vector<float>(back, back + 3), (std::vector<float>{7, 9, 1}));
  for (void* p : {a, b, c}) EXPECT_EQ(cl_.buffer_free(api, Handle(), p), NABLA_C_OK) << g_error;
}

TEST_F(OpenClCTableTest, StagesHostTensorsAndUsesDeviceTensorsInPlace) {
  const nabla_api* api = &api_;
  Tensor host;
  float* h = static_cast<float*>(host.Allocate(HostDevice(), DType::kFloat32, {3}));
  h[0] = 1.5f, h[1] = -2, h[2] = 3;
  void* buf = nullptr;
  int32_t owned = -1;
  ASSERT_EQ(cl_.stage_tensor(api, Handle(), reinterpret_cast<const nabla_tensor*>(&host), &buf, &owned), NABLA_C_OK)
      << g_error;
  EXPECT_EQ(owned, 1);
  float back[3] = {};
  ASSERT_EQ(cl_.copy_to_host(api, Handle(), back, buf, 0, sizeof back), NABLA_C_OK) << g_error;
  EXPECT_EQ(std::vector<float>(back, back + 3), (std::vector<float>{1.5f, -2, 3}));
  EXPECT_EQ(cl_.buffer_free(api, Handle(), buf), NABLA_C_OK) << g_error;

  Tensor on_device;
  void* data = on_device.Allocate(Dev(), DType::kFloat32, {3});
  ASSERT_EQ(cl_.stage_tensor(api, Handle(), reinterpret_cast<const nabla_tensor*>(&on_device), &buf, &owned),
            NABLA_C_OK)
      << g_error;
  EXPECT_EQ(owned, 0);
  EXPECT_EQ(buf, data);
}

TEST_F(OpenClCTableTest, RefusesBadHandlesRangesAndDevices) {
  const nabla_api* api = &api_;
  void* a = cl_.buffer_allocate(api, Handle(), 4 * sizeof(float));
  ASSERT_NE(a, nullptr) << g_error;
  int stack = 0;
  void* bogus = &stack;
  const float one = 1;
  float host[8] = {};
  ExpectError(cl_.fill(api, Handle(), bogus, 0, sizeof one, &one, sizeof one), "is not a live buffer");
  ExpectError(cl_.fill(api, Handle(), nullptr, 0, sizeof one, &one, sizeof one), "received NULL");
  ExpectError(cl_.fill(api, Handle(), a, 0, 4096, &one, sizeof one), "outside the buffer");
  ExpectError(cl_.fill(api, Handle(), a, 0, 6, &one, 3), "pattern");
  ExpectError(cl_.copy_to_host(api, Handle(), host, a, 1024, sizeof host), "outside the buffer");
  ExpectError(cl_.copy_from_host(api, Handle(), a, 0, nullptr, 4), "received NULL");
  ExpectError(cl_.copy_region(api, Handle(), a, 0, bogus, 0, 4), "is not a live buffer");
  ExpectError(cl_.copy_region(api, Handle(), a, 0, a, 2, 4), "overlap");
  // C is 2 x 2 but the buffer's 256 bytes hold 64 floats: ldc 100 reaches past them.
  ExpectError(cl_.gemm(api, Handle(), NABLA_C_FLOAT32, 0, 0, 2, 2, 1, 1.0, a, 0, 1, a, 0, 2, 0.0, a, 0, 100),
              "outside the buffer");
  ExpectError(cl_.gemm(api, Handle(), NABLA_C_FLOAT32, 0, 0, 2, 2, 3, 1.0, a, 0, 2, a, 0, 2, 0.0, a, 0, 2),
              "leading dimension");
  ExpectError(cl_.gemm(api, Handle(), 5, 0, 0, 1, 1, 1, 1.0, a, 0, 1, a, 0, 1, 0.0, a, 0, 1), "dtype");
  ExpectError(cl_.gemm(api, Handle(), NABLA_C_FLOAT32, 0, 0, -1, 1, 1, 1.0, a, 0, 1, a, 0, 1, 0.0, a, 0, 1),
              "negative");
  // An empty matrix is never read: matmul's empty batches pass ld 0 (A and C
  // are 0 x 3 and 0 x 2 here), which must compute nothing, not fail.
  EXPECT_EQ(cl_.gemm(api, Handle(), NABLA_C_FLOAT32, 0, 0, 0, 2, 3, 1.0, a, 0, 0, a, 0, 2, 0.0, a, 0, 0), NABLA_C_OK)
      << g_error;
  ExpectError(cl_.buffer_free(api, Handle(), bogus), "is not a live buffer");
  EXPECT_EQ(cl_.buffer_allocate(api, Handle(), 0), nullptr);
  EXPECT_NE(g_error.find("bytes > 0"), std::string::npos) << g_error;
  // Devices: none, or not an OpenCL one.
  auto* cpu = reinterpret_cast<nabla_device*>(&HostDevice());
  ExpectError(cl_.fill(api, nullptr, a, 0, 4, &one, 4), "expected an OpenCL device");
  ExpectError(cl_.buffer_free(api, cpu, a), "expected an OpenCL device");
  ExpectError(cl_.stage_tensor(api, Handle(), nullptr, nullptr, nullptr), "received NULL");
  // A buffer argument that is no buffer, and one freed.
  nabla_opencl_arg arg{};
  arg.kind = NABLA_OPENCL_ARG_BUFFER;
  arg.value = bogus;
  ExpectError(cl_.launch(api, Handle(), kSource, std::strlen(kSource), "", "axpb", &arg, 1, 1, 0),
              "is not a live buffer");
  ASSERT_EQ(cl_.buffer_free(api, Handle(), a), NABLA_C_OK) << g_error;
  ExpectError(cl_.buffer_free(api, Handle(), a), "is not a live buffer");
  arg.value = a;
  ExpectError(cl_.launch(api, Handle(), kSource, std::strlen(kSource), "", "axpb", &arg, 1, 1, 0),
              "is not a live buffer");
}

}  // namespace
}  // namespace nabla::opencl
