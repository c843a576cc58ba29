// `nabla run` under faults (issue 17): Ctrl-C and SIGTERM stop after the
// step with a checkpoint, kill -9 at any moment (inside a checkpoint write
// too) leaves a resumable folder, and resuming is bit for bit the same as a
// run never interrupted; damaged or foreign checkpoints, full disks and
// unwritable folders are one-line errors that keep the previous files.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <thread>

#include "nabla/cpu/cpu.h"
#include "nabla/train/checkpoint.h"
#include "nabla/train/metrics.h"
#include "run_util.h"

namespace nabla::train {
namespace {

namespace fs = std::filesystem;

// `nabla ARGS` started in the background in `dir` (stdout.txt, stderr.txt);
// killed and reaped if the test leaves before waiting for it.
class Child {
 public:
  Child(const TempDir& dir, const std::string& args, const std::string& env = "") {
    const std::string cmd = "cd '" + dir.Dir().string() + "' && exec env " + env + " " + NABLA_BIN_PATH + " " + args +
                            " >stdout.txt 2>stderr.txt";
    pid_ = fork();
    if (pid_ == 0) {
      execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
      _exit(127);
    }
  }
  ~Child() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      Wait();
    }
  }
  void Signal(int sig) const { kill(pid_, sig); }
  // The exit code, or 128 + the signal that ended it.
  int Wait() {
    int status = 0;
    waitpid(pid_, &status, 0);
    pid_ = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }

 private:
  pid_t pid_ = -1;
};

// Waits (at most 30 s) until `dir` holds a checkpoint of at least `step`.
bool WaitForCheckpoint(const std::string& dir, int64_t step) {
  for (int i = 0; i < 6000; ++i) {
    auto all = ListCheckpoints(dir);
    if (!all.empty() && all.back().step >= step) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return false;
}

void ExpectSameTensors(const SafetensorsFile& a, const SafetensorsFile& b, const std::string& what) {
  ASSERT_EQ(a.tensors.size(), b.tensors.size()) << what;
  for (const auto& [name, t] : a.tensors) {
    ASSERT_TRUE(b.tensors.count(name)) << what << ": " << name;
    const Tensor& u = b.tensors.at(name);
    ASSERT_EQ(t.Bytes(), u.Bytes()) << what << ": " << name;
    EXPECT_EQ(std::memcmp(t.RawData(), u.RawData(), t.Bytes()), 0) << what << ": " << name << " differs";
  }
}

int64_t StepIn(const std::string& err) {
  const std::string key = "after step ";
  size_t at = err.find(key);
  return at == std::string::npos ? -1 : std::stoll(err.substr(at + key.size()));
}

int Lines(const std::string& s) { return static_cast<int>(std::count(s.begin(), s.end(), '\n')); }

class FaultTest : public ::testing::Test {
 protected:
  void SetUp() override {
    cpu::InitCpuBackend();
    dir_.Write("train.csv", BlobsCsv(150, 1));
    dir_.Write("eval.csv", BlobsCsv(60, 2));
  }
  // Adam, so the moments and beta powers must resume exactly too.
  void WriteConfig(const std::string& checkpoint, const std::string& extra = "") {
    dir_.Write("run.yaml", Config("{type: adam, lr: 0.01}", "checkpoint: " + checkpoint + "\n" + extra));
  }
  // The weights after `steps` steps of a run never interrupted (same config,
  // its own checkpoint folder).
  SafetensorsFile Straight(int64_t steps) {
    std::string cfg = Slurp(dir_.Path("run.yaml"));
    cfg.replace(cfg.find("dir: ckpt"), 9, "dir: straight");
    dir_.Write("straight.yaml", cfg);
    fs::remove_all(dir_.Path("straight"));
    Result r = Nabla(dir_, "run straight.yaml --progress none --steps " + std::to_string(steps));
    EXPECT_EQ(r.rc, 0) << r.err;
    return ReadSafetensors(CheckpointPath(dir_.Path("straight"), steps));
  }
  std::string Ckpt(int64_t step) const { return CheckpointPath(dir_.Path("ckpt"), step); }
  // Runs to completion with extra environment variables.
  int RunWithEnv(const std::string& env, const std::string& args) { return Child(dir_, args, env).Wait(); }

  TempDir dir_;
};

// Ctrl-C (and SIGTERM) finish the step, write a checkpoint, name it in one
// line and exit 130 (143); --resume then lands where a straight run does.
TEST_F(FaultTest, SignalStopsWithACheckpointAndResumesBitForBit) {
  for (int sig : {SIGINT, SIGTERM}) {
    fs::remove_all(dir_.Path("ckpt"));
    WriteConfig("{dir: ckpt, every_steps: 40, keep_last: 2}");
    Child run(dir_, "run run.yaml --progress none --steps 1000000");
    ASSERT_TRUE(WaitForCheckpoint(dir_.Path("ckpt"), 40));
    run.Signal(sig);
    EXPECT_EQ(run.Wait(), 128 + sig);
    const std::string err = Slurp(dir_.Path("stderr.txt"));
    const int64_t stopped = StepIn(err);
    ASSERT_GE(stopped, 40) << err;
    EXPECT_EQ(Lines(err), 1) << err;
    const std::string name = "ckpt/" + fs::path(Ckpt(stopped)).filename().string();
    EXPECT_NE(err.find(std::string("nabla: stopped by ") + (sig == SIGINT ? "SIGINT" : "SIGTERM") + " after step " +
                       std::to_string(stopped) + "; checkpoint " + name + "; continue with --resume"),
              std::string::npos)
        << err;
    ASSERT_TRUE(fs::exists(Ckpt(stopped)));

    const int64_t total = stopped + 25;
    Result r = Nabla(dir_, "run run.yaml --progress none --resume --steps " + std::to_string(total));
    ASSERT_EQ(r.rc, 0) << r.err;
    EXPECT_NE(r.out.find("resumed from " + name), std::string::npos) << r.out;
    ExpectSameTensors(ReadSafetensors(Ckpt(total)), Straight(total), "resumed after a signal");
  }
}

// A second signal ends the run at once; every checkpoint left is intact and
// the run resumes from the newest.
TEST_F(FaultTest, SecondSignalStopsAtOnceKeepingTheLastGoodCheckpoint) {
  WriteConfig("{dir: ckpt, every_steps: 1, keep_last: 3}");
  Child run(dir_, "run run.yaml --progress none --steps 1000000");
  ASSERT_TRUE(WaitForCheckpoint(dir_.Path("ckpt"), 30));
  run.Signal(SIGTERM);
  run.Signal(SIGTERM);
  EXPECT_EQ(run.Wait(), 143);
  auto all = ListCheckpoints(dir_.Path("ckpt"));
  ASSERT_FALSE(all.empty());
  for (const auto& c : all) EXPECT_NO_THROW(ReadSafetensors(c.path)) << c.path;
  const int64_t total = all.back().step + 10;
  Result r = Nabla(dir_, "run run.yaml --progress none --resume --steps " + std::to_string(total));
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("resumed from ckpt/" + fs::path(all.back().path).filename().string()), std::string::npos)
      << r.out;
  ExpectSameTensors(ReadSafetensors(Ckpt(total)), Straight(total), "resumed after two signals");
}

// kill -9 at many moments (a checkpoint is written every step, so many land
// inside a write), each time resumed: the end matches a straight run, and no
// temp file of a killed write survives the next run.
TEST_F(FaultTest, KillNineAnywhereThenResumeIsBitForBit) {
  WriteConfig("{dir: ckpt, every_steps: 1, keep_last: 2}");
  const int64_t total = 400;
  std::mt19937 rng(17);
  // The kill times scale with how long a start takes here (slower under
  // sanitizers), so they land during training, not before it.
  int start_ms = 0;
  int progressed = 0;
  for (int round = 0; round < 8; ++round) {
    const auto t0 = std::chrono::steady_clock::now();
    Child run(dir_, std::string("run run.yaml --progress none --steps ") + std::to_string(total) +
                        (round == 0 ? "" : " --resume"));
    if (round == 0) {
      ASSERT_TRUE(WaitForCheckpoint(dir_.Path("ckpt"), 1));
      start_ms = static_cast<int>(
          std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0).count());
    }
    const int64_t before =
        ListCheckpoints(dir_.Path("ckpt")).empty() ? 0 : ListCheckpoints(dir_.Path("ckpt")).back().step;
    std::this_thread::sleep_until(
        t0 + std::chrono::milliseconds(std::uniform_int_distribution<int>(start_ms, 2 * start_ms + 20)(rng)));
    run.Signal(SIGKILL);
    run.Wait();
    auto all = ListCheckpoints(dir_.Path("ckpt"));
    for (const auto& c : all) ASSERT_NO_THROW(ReadSafetensors(c.path)) << c.path;
    progressed += !all.empty() && all.back().step > before;
  }
  EXPECT_GE(progressed, 3);  // the kills landed while it trained
  Result r = Nabla(dir_, "run run.yaml --progress none --resume --steps " + std::to_string(total));
  ASSERT_EQ(r.rc, 0) << r.err;
  ExpectSameTensors(ReadSafetensors(Ckpt(total)), Straight(total), "resumed after kill -9");
  for (const auto& e : fs::directory_iterator(dir_.Path("ckpt"))) {
    EXPECT_EQ(e.path().string().find(".tmp."), std::string::npos) << e.path();
  }
}

// Rows the killed run wrote after its last checkpoint are dropped on resume,
// so the metrics file reads as if the run had never been interrupted.
TEST_F(FaultTest, ResumedMetricsHaveNoDuplicateSteps) {
  for (const std::string file : {"m.csv", "m.jsonl"}) {
    fs::remove_all(dir_.Path("ckpt"));
    fs::remove(dir_.Path(file));
    WriteConfig("{dir: ckpt, every_steps: 5, keep_last: 2}", "logging: {metrics_file: " + file + ", every_steps: 1}\n");
    EXPECT_EQ(RunWithEnv("NABLA_TEST_KILL_IN_CHECKPOINT_WRITE=15", "run run.yaml --progress none --steps 30"),
              128 + SIGKILL);
    std::vector<MetricRow> rows = ReadMetrics(dir_.Path(file));
    ASSERT_FALSE(rows.empty());
    EXPECT_EQ(rows.back().step, 15);  // written before the checkpoint that was killed
    Result r = Nabla(dir_, "run run.yaml --progress none --resume --steps 30");
    ASSERT_EQ(r.rc, 0) << r.err;
    std::vector<int64_t> steps;
    for (const auto& row : ReadMetrics(dir_.Path(file))) {
      if (row.phase == "step") steps.push_back(row.step);
    }
    ASSERT_EQ(steps.size(), 30u) << file;
    for (size_t i = 0; i < steps.size(); ++i) EXPECT_EQ(steps[i], static_cast<int64_t>(i + 1)) << file;
  }
}

// A kill half-way through a checkpoint write (the test hook leaves the half
// temp file a real one would): the previous checkpoint is the newest, it
// resumes exactly, and the next run deletes the temp file.
TEST_F(FaultTest, KillInsideACheckpointWriteKeepsThePreviousOne) {
  WriteConfig("{dir: ckpt, every_steps: 5, keep_last: 2}");
  EXPECT_EQ(RunWithEnv("NABLA_TEST_KILL_IN_CHECKPOINT_WRITE=15", "run run.yaml --progress none --steps 40"),
            128 + SIGKILL);
  auto all = ListCheckpoints(dir_.Path("ckpt"));
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all.back().step, 10);
  int temps = 0;
  for (const auto& e : fs::directory_iterator(dir_.Path("ckpt")))
    temps += e.path().string().find(".tmp.") != std::string::npos;
  EXPECT_EQ(temps, 1);
  Result r = Nabla(dir_, "run run.yaml --progress none --resume --steps 40");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("resumed from ckpt/ckpt-00000010.safetensors (step 10"), std::string::npos) << r.out;
  ExpectSameTensors(ReadSafetensors(Ckpt(40)), Straight(40), "resumed after a kill inside a write");
  for (const auto& e : fs::directory_iterator(dir_.Path("ckpt"))) {
    EXPECT_EQ(e.path().string().find(".tmp."), std::string::npos) << e.path();
  }
}

void FlipByte(const std::string& path, std::streamoff from_end) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(-from_end, std::ios::end);
  char c = 0;
  f.read(&c, 1);
  f.seekp(-from_end, std::ios::end);
  c = static_cast<char>(c ^ 0x5a);
  f.write(&c, 1);
}

// The newest checkpoint damaged (a flipped data byte, a truncation): one
// warning line naming it, and the run resumes from the one before, exactly.
TEST_F(FaultTest, DamagedNewestCheckpointFallsBackToThePreviousOne) {
  WriteConfig("{dir: ckpt, every_steps: 5, keep_last: 3}");
  for (int damage = 0; damage < 2; ++damage) {
    fs::remove_all(dir_.Path("ckpt"));
    ASSERT_EQ(Nabla(dir_, "run run.yaml --progress none --steps 15").rc, 0);
    if (damage == 0) {
      FlipByte(Ckpt(15), 3);
    } else {
      fs::resize_file(Ckpt(15), fs::file_size(Ckpt(15)) - 7);
    }
    Result r = Nabla(dir_, "run run.yaml --progress none --resume --steps 30");
    ASSERT_EQ(r.rc, 0) << r.err;
    EXPECT_EQ(Lines(r.err), 1) << r.err;
    EXPECT_NE(r.err.find("warning: ckpt/ckpt-00000015.safetensors: "), std::string::npos) << r.err;
    EXPECT_NE(r.err.find(damage == 0 ? "the data fails its checksum" : "the file is truncated: its tensors need"),
              std::string::npos)
        << r.err;
    EXPECT_NE(r.err.find("; moved aside to ckpt/ckpt-00000015.safetensors.damaged; falling back to "
                         "ckpt/ckpt-00000010.safetensors"),
              std::string::npos)
        << r.err;
    EXPECT_TRUE(fs::exists(Ckpt(15) + ".damaged"));
    EXPECT_NE(r.out.find("resumed from ckpt/ckpt-00000010.safetensors (step 10"), std::string::npos) << r.out;
    ExpectSameTensors(ReadSafetensors(Ckpt(30)), Straight(30), "resumed past a damaged checkpoint");
  }
}

TEST_F(FaultTest, NoIntactCheckpointIsExit2NamingThem) {
  WriteConfig("{dir: ckpt, every_steps: 5, keep_last: 2}");
  ASSERT_EQ(Nabla(dir_, "run run.yaml --progress none --steps 10").rc, 0);
  FlipByte(Ckpt(10), 1);
  fs::resize_file(Ckpt(5), 5);
  Result r = Nabla(dir_, "run run.yaml --progress none --resume --steps 30");
  EXPECT_EQ(r.rc, 2) << r.err;
  const size_t last = r.err.rfind("nabla: error: ");
  ASSERT_NE(last, std::string::npos) << r.err;
  const std::string line = r.err.substr(last);
  EXPECT_EQ(Lines(line), 1) << r.err;
  EXPECT_NE(line.find("no intact checkpoint to resume from in ckpt: ckpt/ckpt-00000010.safetensors, "
                      "ckpt/ckpt-00000005.safetensors are all damaged"),
            std::string::npos)
      << line;
}

// Rewrites the newest checkpoint with `edit` applied to its tensors and
// metadata (the checksum is dropped: these files are well formed).
void Rewrite(const std::string& path,
             const std::function<void(NamedTensors&, std::map<std::string, std::string>&)>& edit) {
  SafetensorsFile f = ReadSafetensors(path);
  NamedTensors tensors(f.tensors.begin(), f.tensors.end());
  f.metadata.erase("data_crc32");
  edit(tensors, f.metadata);
  std::ofstream(path, std::ios::binary) << EncodeSafetensors(tensors, f.metadata);
}

TEST_F(FaultTest, BadCountsInCheckpointMetadataAreExit2) {
  WriteConfig("{dir: ckpt, every_steps: 5, keep_last: 1}");
  for (const auto& [key, value] : std::vector<std::pair<std::string, std::string>>{
           {"batch", "-3"}, {"step", "abc"}, {"epoch", "-1"}, {"step", "99999999999999999999"}}) {
    fs::remove_all(dir_.Path("ckpt"));
    ASSERT_EQ(Nabla(dir_, "run run.yaml --progress none --steps 5").rc, 0);
    Rewrite(Ckpt(5), [&](NamedTensors&, std::map<std::string, std::string>& m) { m[key] = value; });
    Result r = Nabla(dir_, "run run.yaml --progress none --resume --steps 30");
    EXPECT_EQ(r.rc, 2) << key << "=" << value << ": " << r.err;
    EXPECT_EQ(Lines(r.err), 1) << r.err;
    EXPECT_NE(r.err.find("ckpt/ckpt-00000005.safetensors: checkpoint metadata '" + key +
                         "' must be a count (0, 1, 2, ...), but is \"" + value + "\""),
              std::string::npos)
        << r.err;
  }
}

// A checkpoint another program wrote: the first difference, exit 2.
TEST_F(FaultTest, CheckpointOfAnotherProgramIsExit2NamingTheFirstDifference) {
  WriteConfig("{dir: ckpt, every_steps: 5, keep_last: 1}");
  struct Case {
    std::function<void(NamedTensors&)> edit;
    std::string expected;
  };
  auto find = [](NamedTensors& t, const std::string& name) {
    return std::find_if(t.begin(), t.end(), [&](const auto& p) { return p.first == name; });
  };
  const std::vector<Case> cases = {
      {[&](NamedTensors& t) { t.erase(find(t, "b@moment1")); }, "the checkpoint has no tensor 'b@moment1'"},
      {[&](NamedTensors& t) { t.emplace_back("a_extra", t.front().second); },
       "the checkpoint holds tensor 'a_extra', which the program does not have"},
      {[&](NamedTensors& t) {
         Tensor w;
         w.Resize({3, 4});
         w.SetDType(DType::kFloat32);
         w.Allocate(HostDevice());
         find(t, "w")->second = w;
       },
       "tensor 'w' is float32[3, 4], but the program's var is float32[4, 3]"},
      {[&](NamedTensors& t) {
         Tensor b;
         b.Resize({3});
         b.SetDType(DType::kFloat64);
         b.Allocate(HostDevice());
         find(t, "b")->second = b;
       },
       "tensor 'b' is float64[3], but the program's var is float32[3]"},
  };
  for (const auto& c : cases) {
    fs::remove_all(dir_.Path("ckpt"));
    ASSERT_EQ(Nabla(dir_, "run run.yaml --progress none --steps 5").rc, 0);
    Rewrite(Ckpt(5), [&](NamedTensors& t, std::map<std::string, std::string>&) { c.edit(t); });
    Result r = Nabla(dir_, "run run.yaml --progress none --resume --steps 30");
    EXPECT_EQ(r.rc, 2) << c.expected << ": " << r.err;
    EXPECT_EQ(Lines(r.err), 1) << r.err;
    EXPECT_NE(r.err.find("nabla: error: ckpt/ckpt-00000005.safetensors: " + c.expected), std::string::npos) << r.err;
  }
}

// A fresh run must not mix its checkpoints with an earlier run's (keep_last
// would delete its own newer files and --resume continue the old run), nor
// make the user clean up to run the same command again: it starts run 2 in
// a folder beside the first, says where, and --resume continues the newest.
TEST_F(FaultTest, FreshRunStartsANumberedRunBesideTheEarlierOne) {
  WriteConfig("{dir: ckpt, every_steps: 5, keep_last: 2}");
  ASSERT_EQ(Nabla(dir_, "run run.yaml --progress none --steps 20").rc, 0);
  Result r = Nabla(dir_, "run run.yaml --progress none --steps 10");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("run 2: the configured outputs hold an earlier run, so this one writes to run-2/ckpt"),
            std::string::npos)
      << r.out;
  EXPECT_EQ(ListCheckpoints(dir_.Path("ckpt")).back().step, 20);
  EXPECT_EQ(ListCheckpoints(dir_.Path("run-2/ckpt")).back().step, 10);
  r = Nabla(dir_, "run run.yaml --progress none --steps 15 --resume");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("resumed from run-2/ckpt/ckpt-00000010.safetensors"), std::string::npos) << r.out;
  EXPECT_EQ(ListCheckpoints(dir_.Path("run-2/ckpt")).back().step, 15);
  r = Nabla(dir_, "run run.yaml --progress none --steps 5");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(ListCheckpoints(dir_.Path("run-3/ckpt")).back().step, 5);
  EXPECT_EQ(ListCheckpoints(dir_.Path("ckpt")).back().step, 20);
}

// A file-size limit (ulimit -f) in the middle of a checkpoint write: one line
// naming the file and EFBIG, exit 1, the previous checkpoint intact, no temp
// file left. The model carries an unused 16 KiB parameter so checkpoints
// outgrow the limit while the other files stay under it.
TEST_F(FaultTest, FileSizeLimitDuringACheckpointIsOneLineAndKeepsThePrevious) {
  std::string cfg = Config("{type: sgd, lr: 0.1}", "checkpoint: {dir: ckpt, every_steps: 5, keep_last: 2}\n");
  cfg.replace(
      cfg.find("        b: {"), 0,
      "        big: {shape: [4096], dtype: float32, persistable: true, init: {type: fill_constant, value: 1}}\n");
  dir_.Write("run.yaml", cfg);
  ASSERT_EQ(Nabla(dir_, "run run.yaml --progress none --steps 5").rc, 0);
  const SafetensorsFile before = ReadSafetensors(Ckpt(5));
  const std::string cmd = "cd '" + dir_.Dir().string() + "' && sh -c 'ulimit -f 8; exec " + NABLA_BIN_PATH +
                          " run run.yaml --progress none --resume --steps 20' >stdout.txt 2>stderr.txt";
  ASSERT_GT(fs::file_size(Ckpt(5)), 8u * 1024);
  const int status = std::system(cmd.c_str());
  EXPECT_EQ(WIFEXITED(status) ? WEXITSTATUS(status) : -1, 1);
  const std::string err = Slurp(dir_.Path("stderr.txt"));
  EXPECT_EQ(Lines(err), 1) << err;
  EXPECT_NE(err.find("nabla: error: cannot write 'ckpt/ckpt-00000010.safetensors': write failed: File too large"),
            std::string::npos)
      << err;
  auto all = ListCheckpoints(dir_.Path("ckpt"));
  ASSERT_EQ(all.size(), 1u);
  ExpectSameTensors(ReadSafetensors(all.back().path), before, "the checkpoint before the failed write");
  for (const auto& e : fs::directory_iterator(dir_.Path("ckpt"))) {
    EXPECT_EQ(e.path().string().find(".tmp."), std::string::npos) << e.path();
  }
}

// The metrics file past a file-size limit used to be cut silently (exit 0).
TEST_F(FaultTest, FileSizeLimitOnTheMetricsFileIsOneLine) {
  dir_.Write("run.yaml", Config("{type: sgd, lr: 0.1}", "logging: {metrics_file: m.csv, every_steps: 1}\n"));
  const std::string cmd = "cd '" + dir_.Dir().string() + "' && sh -c 'ulimit -f 2; exec " + NABLA_BIN_PATH +
                          " run run.yaml --progress none --steps 200' >stdout.txt 2>stderr.txt";
  const int status = std::system(cmd.c_str());
  EXPECT_EQ(WIFEXITED(status) ? WEXITSTATUS(status) : -1, 1);
  const std::string err = Slurp(dir_.Path("stderr.txt"));
  EXPECT_EQ(Lines(err), 1) << err;
  EXPECT_NE(err.find("nabla: error: cannot write the metrics file 'm.csv': File too large"), std::string::npos) << err;
}

// Folders that cannot be made (a path under a regular file: unwritable even
// for root): one line naming the path, exit 1, before any step.
TEST_F(FaultTest, UnwritableFoldersAreOneLine) {
  dir_.Write("file.txt", "a regular file\n");
  WriteConfig("{dir: file.txt/ckpt, every_steps: 5}");
  Result r = Nabla(dir_, "run run.yaml --progress none --steps 10");
  EXPECT_EQ(r.rc, 1) << r.err;
  EXPECT_EQ(Lines(r.err), 1) << r.err;
  EXPECT_NE(r.err.find("nabla: error: cannot create the checkpoint folder 'file.txt/ckpt'"), std::string::npos)
      << r.err;

  WriteConfig("{dir: ckpt, every_steps: 5}", "logging: {metrics_file: file.txt/m.csv}\n");
  r = Nabla(dir_, "run run.yaml --progress none --steps 10");
  EXPECT_EQ(r.rc, 1) << r.err;
  EXPECT_EQ(Lines(r.err), 1) << r.err;
  EXPECT_NE(r.err.find("nabla: error: cannot open the metrics file 'file.txt/m.csv'"), std::string::npos) << r.err;
  EXPECT_TRUE(ListCheckpoints(dir_.Path("ckpt")).empty());  // failed before any step
}

// `nabla exec --out` past a file-size limit, and into a folder that cannot
// be made: one line naming the file and the reason, exit 1, no partial file.
TEST_F(FaultTest, ExecOutWriteFailuresAreOneLine) {
  dir_.Write("p.yaml", R"(format: nabla-program/1
blocks:
  - idx: 0
    parent: -1
    vars:
      big: {shape: [4096], dtype: float32, persistable: true, init: {type: fill_constant, value: 1.0}}
    ops:
      - {type: scale, inputs: {X: [big]}, outputs: {Out: [y]}, attrs: {scale: 2.0}}
)");
  ASSERT_EQ(Nabla(dir_, "exec p.yaml --fetch y --out ok").rc, 0);
  ASSERT_GT(fs::file_size(dir_.Path("ok/y.npy")), 8u * 1024);
  const std::string cmd = "cd '" + dir_.Dir().string() + "' && sh -c 'ulimit -f 8; exec " + NABLA_BIN_PATH +
                          " exec p.yaml --fetch y --out out' >stdout.txt 2>stderr.txt";
  const int status = std::system(cmd.c_str());
  EXPECT_EQ(WIFEXITED(status) ? WEXITSTATUS(status) : -1, 1);
  const std::string err = Slurp(dir_.Path("stderr.txt"));
  EXPECT_EQ(Lines(err), 1) << err;
  EXPECT_NE(err.find("out/y.npy: write failed: File too large"), std::string::npos) << err;
  EXPECT_TRUE(fs::is_empty(dir_.Path("out")));

  dir_.Write("file.txt", "a regular file\n");
  Result r = Nabla(dir_, "exec p.yaml --fetch y --out file.txt/out");
  EXPECT_EQ(r.rc, 1) << r.err;
  EXPECT_EQ(Lines(r.err), 1) << r.err;
  EXPECT_NE(r.err.find("--out file.txt/out: cannot create the folder"), std::string::npos) << r.err;

  // A parameter of 2^62 elements used to run as float32[0] with exit 0: the
  // initializer's int shape attribute wrapped it.
  std::string big = Slurp(dir_.Path("p.yaml"));
  big.replace(big.find("[4096]"), 6, "[4611686018427387904]");
  dir_.Write("big.yaml", big);
  r = Nabla(dir_, "exec big.yaml --fetch y");
  EXPECT_EQ(r.rc, 2) << r.out << r.err;
  EXPECT_EQ(Lines(r.err), 1) << r.err;
  EXPECT_NE(r.err.find("big.yaml:6:7: parameter 'big' has a dim 4611686018427387904"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace nabla::train
