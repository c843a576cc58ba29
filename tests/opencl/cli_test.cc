// `nabla` with OpenCL: `nabla devices`, the backend loaded only by a run
// that asks for it, `nabla exec --device opencl` giving
// the CPU's fetches (forward and gradients), and a machine without any
// OpenCL platform (OCL_ICD_VENDORS pointing nowhere): asking for opencl is a
// one-line error with exit code 2, while cpu keeps working.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "../common/temp_dir.h"
#include "nabla/cpu/cpu.h"
#include "nabla/device.h"
#include "nabla/npy.h"
#include "nabla/tensor.h"

namespace nabla {
namespace {

namespace fs = std::filesystem;

struct Result {
  int code = -1;
  std::string out, err;
};

// A small MLP layer: the fetches cover a GEMM, a broadcast bias, an
// activation, the mean and (with --backward) their gradients.
const char* kProgram = R"(format: nabla-program/1
blocks:
  - idx: 0
    parent: -1
    vars:
      x: {shape: [-1, 6], dtype: float32, stop_gradient: true}
      w: {shape: [6, 4], dtype: float32, persistable: true, init: {type: uniform_random, min: -0.5, max: 0.5, seed: 3}}
      b: {shape: [4], dtype: float32, persistable: true, init: {type: fill_constant, value: 0.1}}
    ops:
      - {type: mul, inputs: {X: [x], Y: [w]}, outputs: {Out: [xw]}}
      - {type: elementwise_add, inputs: {X: [xw], Y: [b]}, outputs: {Out: [y]}, attrs: {axis: 1}}
      - {type: tanh, inputs: {X: [y]}, outputs: {Out: [h]}}
      - {type: mean, inputs: {X: [h]}, outputs: {Out: [loss]}}
)";

class OpenClCli : public ::testing::Test {
 protected:
  void SetUp() override {
    cpu::InitCpuBackend();
    std::ofstream(Path("prog.yaml")) << kProgram;
    Tensor x;
    float* p = x.Allocate<float>(HostDevice(), {5, 6});
    for (int i = 0; i < 30; ++i) p[i] = std::sin(0.7f * i);
    WriteNpy(Path("x.npy"), x);
  }
  std::string Path(const std::string& name) const { return (dir_ / name).string(); }

  Result Run(const std::string& args, const std::string& env = "") {
    const std::string out = Path("stdout.txt"), err = Path("stderr.txt");
    const std::string cmd = env + " " + NABLA_BIN_PATH + " " + args + " >" + out + " 2>" + err;
    Result r;
    int status = std::system(cmd.c_str());
    r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    r.out = Slurp(out);
    r.err = Slurp(err);
    return r;
  }
  static std::string Slurp(const std::string& p) {
    std::ifstream in(p);
    std::ostringstream s;
    s << in.rdbuf();
    return s.str();
  }
  std::vector<float> Fetched(const std::string& dir, const std::string& name) {
    Tensor t = ReadNpy(Path(dir) + "/" + name + ".npy", HostDevice());
    return std::vector<float>(t.Data<float>(), t.Data<float>() + t.Numel());
  }

  test_util::TempDir dir_{"nabla_opencl_cli"};
};

TEST_F(OpenClCli, DevicesListsTheOpenClDevice) {
  Result r = Run("devices");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("cpu "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("opencl:0"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("compute units"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("GiB global memory"), std::string::npos) << r.out;
}

// The backend is a device plugin the core loads on demand: the dynamic
// loader's own log (LD_DEBUG=files) of a CPU run names neither it, CLBlast
// nor PoCL, and that of an OpenCL run shows the plugin and CLBlast. (The ICD
// loader libOpenCL.so.1 is left out: Debian's oneDNN links it.)
TEST_F(OpenClCli, OnlyAnOpenClRunLoadsTheOpenClLibraries) {
  const std::string args = "exec " + Path("prog.yaml") + " --feed x=" + Path("x.npy") + " --fetch loss";
  Result cpu = Run(args + " --device cpu", "LD_DEBUG=files");
  ASSERT_EQ(cpu.code, 0) << cpu.err;
  ASSERT_NE(cpu.err.find("libnabla_core.so"), std::string::npos) << "LD_DEBUG logged nothing: " << cpu.err;
  for (const char* lib : {"libnabla_opencl", "libclblast", "libpocl"})
    EXPECT_EQ(cpu.err.find(lib), std::string::npos) << "a CPU run loaded " << lib;
  Result cl = Run(args + " --device opencl", "LD_DEBUG=files");
  ASSERT_EQ(cl.code, 0) << cl.err;
  for (const char* lib : {"libnabla_opencl", "libclblast"})
    EXPECT_NE(cl.err.find(lib), std::string::npos) << "an OpenCL run did not load " << lib;
}

TEST_F(OpenClCli, ExecOnOpenClFetchesWhatTheCpuFetches) {
  const std::string common = "exec " + Path("prog.yaml") + " --backward loss --feed x=" + Path("x.npy") +
                             " --fetch h,loss,w@GRAD,b@GRAD --out ";
  Result cpu = Run(common + Path("cpu") + " --device cpu");
  ASSERT_EQ(cpu.code, 0) << cpu.err;
  for (const char* device : {"opencl", "opencl:0"}) {
    Result cl = Run(common + Path(device) + " --device " + device);
    ASSERT_EQ(cl.code, 0) << cl.err;
    for (const char* name : {"h", "loss", "w@GRAD", "b@GRAD"}) {
      std::vector<float> want = Fetched("cpu", name), got = Fetched(device, name);
      ASSERT_EQ(want.size(), got.size()) << name;
      for (size_t i = 0; i < want.size(); ++i)
        EXPECT_NEAR(got[i], want[i], 1e-5 + 1e-4 * std::abs(want[i])) << name << "[" << i << "]";
    }
  }
}

// The RNN example: a while loop over a tensor array. Control flow, the array
// ops, reshape and transpose have no OpenCL kernels and run on the CPU with
// copies; the loop body's GEMMs and tanh run on the device. Forward and
// backward must match the CPU.
TEST_F(OpenClCli, TheWhileLoopRnnMatchesTheCpu) {
  Tensor image, label;
  float* px = image.Allocate<float>(HostDevice(), {3, 784});
  for (int i = 0; i < 3 * 784; ++i) px[i] = 0.5f + 0.5f * std::sin(0.01f * i);
  int64_t* pl = label.Allocate<int64_t>(HostDevice(), {3, 1});
  for (int i = 0; i < 3; ++i) pl[i] = 2 * i + 1;
  WriteNpy(Path("image.npy"), image);
  WriteNpy(Path("label.npy"), label);
  const std::string common = "exec " + std::string(NABLA_EXAMPLES_DIR) +
                             "/models/fashion_mnist_rnn.yaml --backward loss --feed image=" + Path("image.npy") +
                             " --feed label=" + Path("label.npy") + " --fetch loss,wx@GRAD,wh@GRAD,bo@GRAD --out ";
  Result cpu = Run(common + Path("cpu") + " --device cpu");
  ASSERT_EQ(cpu.code, 0) << cpu.err;
  Result cl = Run(common + Path("cl") + " --device opencl");
  ASSERT_EQ(cl.code, 0) << cl.err;
  EXPECT_NE(cl.err.find("op 'while' has no opencl kernel"), std::string::npos)
      << "the fallback is announced: " << cl.err;
  for (const char* name : {"loss", "wx@GRAD", "wh@GRAD", "bo@GRAD"}) {
    std::vector<float> want = Fetched("cpu", name), got = Fetched("cl", name);
    ASSERT_EQ(want.size(), got.size()) << name;
    for (size_t i = 0; i < want.size(); ++i)
      ASSERT_NEAR(got[i], want[i], 1e-5 + 1e-3 * std::abs(want[i])) << name << "[" << i << "]";
  }
}

// The GPT example's program (3 pre-norm blocks with flash_attn, gelu, tied
// logits): forward and backward stay on the device, every op but the
// weights' initialisers having an OpenCL kernel (the embedding, layer_norm
// and the reshapes too), and match the CPU.
TEST_F(OpenClCli, TheGptExampleRunsOnTheDeviceLikeTheCpu) {
  Tensor tokens, labels;
  int64_t* pt = tokens.Allocate<int64_t>(HostDevice(), {2, 128});
  int64_t* pl = labels.Allocate<int64_t>(HostDevice(), {2, 128, 1});
  for (int i = 0; i < 2 * 128; ++i) {
    pt[i] = (37 * i + 11) % 256;
    pl[i] = (53 * i + 7) % 256;
  }
  WriteNpy(Path("tokens.npy"), tokens);
  WriteNpy(Path("labels.npy"), labels);
  const std::vector<std::string> fetched = {"loss", "wte@GRAD", "wpe@GRAD", "l0_ln1_scale@GRAD", "l2_fc_w@GRAD"};
  std::string common = "exec " + std::string(NABLA_EXAMPLES_DIR) +
                       "/gpt/gpt.yaml --backward loss --feed tokens=" + Path("tokens.npy") +
                       " --feed labels=" + Path("labels.npy") + " --fetch ";
  for (const std::string& name : fetched) common += name + (name == fetched.back() ? "" : ",");
  common += " --out ";
  Result cpu = Run(common + Path("cpu") + " --device cpu");
  ASSERT_EQ(cpu.code, 0) << cpu.err;
  Result cl = Run(common + Path("cl") + " --device opencl");
  ASSERT_EQ(cl.code, 0) << cl.err;
  // Each fallback is a note naming its op: gaussian_random's alone (it
  // initialises the weights once).
  std::istringstream notes(cl.err);
  for (std::string line; std::getline(notes, line);)
    if (line.find("has no opencl kernel") != std::string::npos)
      EXPECT_NE(line.find("op 'gaussian_random'"), std::string::npos) << line;
  for (const std::string& name : fetched) {
    std::vector<float> want = Fetched("cpu", name), got = Fetched("cl", name);
    ASSERT_EQ(want.size(), got.size()) << name;
    float scale = 0;
    for (float w : want) scale = std::max(scale, std::abs(w));
    for (size_t i = 0; i < want.size(); ++i) ASSERT_NEAR(got[i], want[i], 1e-5f * scale) << name << "[" << i << "]";
  }
}

// dropout on OpenCL draws its mask on the host with the CPU kernel's
// generator: for a run seed both devices drop the same elements, so Out,
// Mask and the gradient are the CPU's bit for bit, both conventions.
TEST_F(OpenClCli, DropoutDropsWhatTheCpuDrops) {
  std::ofstream(Path("dropout.yaml")) << R"(format: nabla-program/1
blocks:
  - idx: 0
    parent: -1
    vars:
      x: {shape: [7, 9], dtype: float32, persistable: true, init: {type: uniform_random, min: -1.0, max: 1.0, seed: 1}}
    ops:
      - {type: dropout, inputs: {X: [x]}, outputs: {Out: [o], Mask: [m]}, attrs: {dropout_prob: 0.3, dropout_implementation: upscale_in_train}}
      - {type: dropout, inputs: {X: [o]}, outputs: {Out: [o2], Mask: [m2]}, attrs: {dropout_prob: 0.5}}
      - {type: mean, inputs: {X: [o2]}, outputs: {Out: [loss]}}
)";
  const std::string common =
      "exec " + Path("dropout.yaml") + " --backward loss --seed 5 --fetch o,m,o2,m2,x@GRAD --out ";
  Result cpu = Run(common + Path("cpu") + " --device cpu");
  ASSERT_EQ(cpu.code, 0) << cpu.err;
  Result cl = Run(common + Path("cl") + " --device opencl");
  ASSERT_EQ(cl.code, 0) << cl.err;
  EXPECT_EQ(cl.err.find("op 'dropout"), std::string::npos) << "dropout fell back to the host: " << cl.err;
  for (const char* name : {"o", "m", "o2", "m2", "x@GRAD"})
    EXPECT_EQ(Fetched("cl", name), Fetched("cpu", name)) << name;
  std::vector<float> mask = Fetched("cpu", "m");
  EXPECT_GT(std::count(mask.begin(), mask.end(), 0.0f), 0) << "nothing was dropped";
}

// `nabla run` with `device: opencl`: the Fashion-MNIST MLP example's
// program and data, 20 Adam steps; the metrics file's step losses (every 5
// steps) must match a cpu run to 1e-4 relative.
TEST_F(OpenClCli, RunTrainsTheFashionMnistMlpLikeTheCpu) {
  const std::string data = "/usr/share/datasets/fashion-mnist/";
  if (!fs::exists(data + "train-images-idx3-ubyte.gz")) GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  auto config = [&](const std::string& device) {
    std::ofstream(Path(device + ".yaml"))
        << "seed: 1\nprogram: " << NABLA_EXAMPLES_DIR << "/models/fashion_mnist_mlp.yaml\ndevice: " << device
        << "\nloss: loss\noptimizer: {type: adam, lr: 0.001}\n"
        << "data:\n  format: idx\n  train:\n    files: {images: " << data
        << "train-images-idx3-ubyte.gz, labels: " << data
        << "train-labels-idx1-ubyte.gz}\n    feeds: {image: images, label: labels}\n"
        << "  batch_size: 64\nsteps: 20\n"
        << "checkpoint: {dir: " << Path(device + "_ckpt") << "}\n"
        << "logging: {every_steps: 5, metrics_file: " << Path(device + ".csv") << "}\n";
    return Path(device + ".yaml");
  };
  auto losses = [&](const std::string& device) {
    std::ifstream in(Path(device + ".csv"));
    std::vector<double> out;
    std::string line;
    std::getline(in, line);  // header: phase,epoch,step,loss,...
    while (std::getline(in, line)) {
      if (line.rfind("step,", 0) != 0) continue;
      std::stringstream ss(line);
      std::string field;
      for (int i = 0; i < 4 && std::getline(ss, field, ','); ++i) {
      }
      out.push_back(std::stod(field));
    }
    return out;
  };
  Result cpu = Run("run " + config("cpu") + " --progress none");
  ASSERT_EQ(cpu.code, 0) << cpu.err;
  Result cl = Run("run " + config("opencl") + " --progress none");
  ASSERT_EQ(cl.code, 0) << cl.err;
  std::vector<double> want = losses("cpu"), got = losses("opencl");
  ASSERT_EQ(want.size(), 4u);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-4 * std::abs(want[i])) << "row " << i;
}

TEST_F(OpenClCli, NoPlatformIsAOneLineErrorAndCpuStillWorks) {
  const std::string no_icd = "OCL_ICD_VENDORS=" + Path("no_vendors_here");
  const std::string args = "exec " + Path("prog.yaml") + " --feed x=" + Path("x.npy") + " --fetch loss";
  Result cl = Run(args + " --device opencl", no_icd);
  EXPECT_EQ(cl.code, 2) << cl.err;
  EXPECT_EQ(std::count(cl.err.begin(), cl.err.end(), '\n'), 1) << cl.err;
  EXPECT_EQ(cl.err.rfind("nabla: error: ", 0), 0u) << cl.err;
  EXPECT_NE(cl.err.find("no OpenCL platform"), std::string::npos) << cl.err;
  Result cpu = Run(args + " --device cpu", no_icd);
  EXPECT_EQ(cpu.code, 0) << cpu.err;
  EXPECT_NE(cpu.out.find("loss"), std::string::npos) << cpu.out;
  Result devices = Run("devices", no_icd);
  EXPECT_EQ(devices.code, 0) << devices.err;
  EXPECT_NE(devices.out.find("no OpenCL platform found"), std::string::npos) << devices.out;
}

TEST_F(OpenClCli, ABadDeviceSpecIsBadInput) {
  for (const char* spec : {"opencl:9", "opencl:x", "tpu"}) {
    Result r = Run("exec " + Path("prog.yaml") + " --feed x=" + Path("x.npy") + " --device " + spec);
    EXPECT_EQ(r.code, 2) << spec << ": " << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  }
}

}  // namespace
}  // namespace nabla
