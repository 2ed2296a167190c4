// The HDF5 layer: round trips through our reader, and the same files read by h5py (the
// independent reference for what researchers will see), float16 rounding against known
// bit patterns, numpy and the F16C instructions, and clean errors on bad files.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <bit>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>
#include <string>
#include <vector>

#if defined(__F16C__)
#include <immintrin.h>
#endif

#include <fmt/format.h>

#include "core/error.h"
#include "io/h5.h"
#include "io/h5_float16.h"
#include "io/quant.h"

namespace fs = std::filesystem;
using namespace ckv;

namespace {

class H5Test : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("ckv_test_h5_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

bool have_h5py() {
  return fs::exists("/usr/bin/python3") &&
         std::system("/usr/bin/python3 -c 'import h5py, numpy' >/dev/null 2>&1") == 0;
}

// Runs a Python snippet with Debian's python3 (h5py, numpy) and returns its stdout.
std::string run_python(const std::string& script, const fs::path& dir) {
  const fs::path file = dir / "check.py";
  std::ofstream(file) << script;
  std::string out;
  FILE* pipe = ::popen(("/usr/bin/python3 " + file.string() + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return "popen failed";
  char buffer[4096];
  while (size_t n = std::fread(buffer, 1, sizeof buffer, pipe)) out.append(buffer, n);
  ::pclose(pipe);
  return out;
}

// [n_head, seq, d_head] test pattern with exactly representable f16 values.
std::vector<float> pattern(int64_t n_head, int64_t seq, int64_t d_head) {
  std::vector<float> v(static_cast<size_t>(n_head * seq * d_head));
  for (size_t i = 0; i < v.size(); ++i)
    v[i] = static_cast<float>(static_cast<int>(i % 997) - 498) / 8.0f;
  return v;
}

uint16_t bits_of(float f) {
  return f32_to_f16(f);
}

}  // namespace

TEST(Float16, KnownBitPatterns) {
  EXPECT_EQ(bits_of(0.0f), 0x0000);
  EXPECT_EQ(bits_of(-0.0f), 0x8000);
  EXPECT_EQ(bits_of(1.0f), 0x3C00);
  EXPECT_EQ(bits_of(-2.0f), 0xC000);
  EXPECT_EQ(bits_of(0.1f), 0x2E66);
  EXPECT_EQ(bits_of(65504.0f), 0x7BFF);
  EXPECT_EQ(bits_of(65519.0f), 0x7BFF);  // below the halfway point to 65536
  EXPECT_EQ(bits_of(65520.0f), 0x7C00);  // the tie rounds to even: overflow
  EXPECT_EQ(bits_of(-1e6f), 0xFC00);
  EXPECT_EQ(bits_of(std::numeric_limits<float>::infinity()), 0x7C00);
  EXPECT_EQ(bits_of(-std::numeric_limits<float>::infinity()), 0xFC00);
  const uint16_t nan = bits_of(std::numeric_limits<float>::quiet_NaN());
  EXPECT_EQ(nan & 0x7C00, 0x7C00);
  EXPECT_NE(nan & 0x03FF, 0);
  // A signalling NaN whose payload sits only in the dropped low bits must stay NaN.
  EXPECT_NE(bits_of(std::bit_cast<float>(0x7F800001u)) & 0x03FF, 0);
  // Ties to even at 1: 1 + 2^-11 goes down, 1 + 3 * 2^-11 goes up.
  EXPECT_EQ(bits_of(1.0f + std::ldexp(1.0f, -11)), 0x3C00);
  EXPECT_EQ(bits_of(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3C02);
  EXPECT_EQ(bits_of(1.0f + std::ldexp(1.0f, -11) + std::ldexp(1.0f, -20)), 0x3C01);
  // Subnormals: the smallest is 2^-24; 2^-25 ties to zero, 3 * 2^-25 ties up to 2.
  EXPECT_EQ(bits_of(std::ldexp(1.0f, -24)), 0x0001);
  EXPECT_EQ(bits_of(std::ldexp(1.0f, -25)), 0x0000);
  EXPECT_EQ(bits_of(std::ldexp(1.5f, -25)), 0x0001);
  EXPECT_EQ(bits_of(std::ldexp(3.0f, -25)), 0x0002);
  EXPECT_EQ(bits_of(std::ldexp(5.0f, -25)), 0x0002);
  EXPECT_EQ(bits_of(-std::ldexp(1.0f, -24)), 0x8001);
  EXPECT_EQ(bits_of(1023 * std::ldexp(1.0f, -24)), 0x03FF);  // largest subnormal
  EXPECT_EQ(bits_of(std::ldexp(1.0f, -14)), 0x0400);         // smallest normal
  EXPECT_EQ(bits_of(std::ldexp(2047.0f, -25)), 0x0400);      // tie between them: even
  EXPECT_EQ(bits_of(1e-10f), 0x0000);
  // The inverse (io/quant.h) brings the representable ones back exactly.
  EXPECT_EQ(f16_to_f32(0x2E66), 0.0999755859375f);
  EXPECT_EQ(f16_to_f32(0x0001), std::ldexp(1.0f, -24));
}

#if defined(__F16C__)
// The F16C instruction is an independent reference for the scalar code on every float.
TEST(Float16, ScalarAgreesWithF16cOnRandomBits) {
  std::mt19937 rng(7);
  for (int i = 0; i < 2'000'000; ++i) {
    const float f = std::bit_cast<float>(static_cast<uint32_t>(rng()));
    const auto hw = static_cast<uint16_t>(_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT));
    ASSERT_EQ(f32_to_f16(f), hw) << std::hexfloat << f;
  }
}
#endif

TEST(Float16, VectorPathMatchesScalar) {
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 300.0f);
  std::vector<float> src(1003);
  for (float& f : src) f = normal(rng);
  src[5] = 65520.0f;
  src[6] = std::ldexp(3.0f, -25);
  std::vector<uint16_t> dst(src.size());
  f32_to_f16(src, dst);
  for (size_t i = 0; i < src.size(); ++i) ASSERT_EQ(dst[i], f32_to_f16(src[i])) << i;
}

TEST_F(H5Test, ChunkedDatasetsRoundTrip) {
  const int64_t n_head = 3, seq = 17, d_head = 8;
  const std::vector<int64_t> shape = {n_head, seq, d_head};
  const std::vector<float> q = pattern(n_head, seq, d_head);  // [n_head, seq, d_head]
  const fs::path path = dir_ / "a.h5";
  {
    h5::File file = h5::File::create(path);
    h5::Group layer = file.create_group("records/r0/layers/0");
    h5::Dataset q32 = layer.create_dataset("q32", h5::DType::F32, shape,
                                           {.chunk = h5::chunk_by_first_dim(shape, 4)});
    for (int64_t h = 0; h < n_head; ++h)
      q32.write_index(h, q.data() + h * seq * d_head, static_cast<size_t>(seq * d_head));
    h5::Dataset q16 = layer.create_dataset(
        "q16", h5::DType::F16, shape,
        {.chunk = h5::chunk_by_first_dim(shape, 2), .gzip_level = 4, .shuffle = true});
    q16.write(q);
    q16.set_dims({"head", "pos", "d_head"});
    h5::Dataset tokens =
        file.open_group("records/r0").create_dataset("tokens", h5::DType::I32, {4});
    tokens.write(std::vector<int32_t>{1, -2, 30000, 4});
    file.create_dataset("empty", h5::DType::F16, {3, 0, 8}, {.chunk = {1, 0, 8}, .gzip_level = 1});
    file.close();
  }
  h5::File file = h5::File::open_read(path);
  EXPECT_TRUE(file.is_group("records/r0/layers"));
  EXPECT_TRUE(file.exists("records/r0/layers/0/q16"));
  EXPECT_FALSE(file.exists("records/r1/layers"));
  EXPECT_EQ(file.open_group("records/r0").children(),
            (std::vector<std::string>{"layers", "tokens"}));
  h5::Dataset q16 = file.open_dataset("records/r0/layers/0/q16");
  EXPECT_EQ(q16.dtype(), h5::DType::F16);
  EXPECT_EQ(q16.shape(), shape);
  EXPECT_EQ(q16.chunk_shape(), (std::vector<int64_t>{1, seq, d_head}));  // H5Pget_chunk
  EXPECT_EQ(q16.dims(), (std::vector<std::string>{"head", "pos", "d_head"}));
  EXPECT_EQ(q16.read<float>(), q);  // the pattern is exact in float16
  EXPECT_EQ(file.open_dataset("records/r0/layers/0/q32").read<float>(), q);
  const std::vector<float> head2 = q16.read_index<float>(2);
  EXPECT_EQ(head2, std::vector<float>(q.begin() + 2 * seq * d_head, q.end()));
  EXPECT_EQ(q16.read_slab<float>({1, 3, 2}, {1, 1, 2}),
            (std::vector<float>{q[(1 * seq + 3) * d_head + 2], q[(1 * seq + 3) * d_head + 3]}));
  EXPECT_EQ(file.open_dataset("records/r0/tokens").read<int64_t>(),
            (std::vector<int64_t>{1, -2, 30000, 4}));
  EXPECT_EQ(file.open_dataset("empty").shape(), (std::vector<int64_t>{3, 0, 8}));
  EXPECT_THROW(q16.read_slab<float>({0, 16, 0}, {1, 2, 8}), Error);  // past the end
  EXPECT_THROW(file.open_dataset("records/r0/nope"), FormatError);
}

TEST_F(H5Test, AttributesRoundTripAndReplace) {
  const fs::path path = dir_ / "attrs.h5";
  {
    h5::File file = h5::File::create(path);
    file.set_attr_string("text", "héllo \"world\"");
    file.set_attr_int("n", -(int64_t{1} << 40));
    file.set_attr_double("x", 0.25);
    file.set_attr_bool("complete", false);
    file.set_attr_bool("complete", true);  // replaced, as a record's flag is
    file.set_attr_ints("rows", {3, 1, 4});
    file.set_attr_ints("none", {});
    file.set_attr_doubles("scales", {0.5, -1.5});
    file.set_attr_strings("names", {"a", "", "ccc"});
    file.set_attr_json("spans", nlohmann::json{{"needle", {3, 7}}});
    file.close();
  }
  const h5::File file = h5::File::open_read(path);
  EXPECT_EQ(file.attr_string("text"), "héllo \"world\"");
  EXPECT_EQ(file.attr_int("n"), -(int64_t{1} << 40));
  EXPECT_EQ(file.attr_double("x"), 0.25);
  EXPECT_TRUE(file.attr_bool("complete"));
  EXPECT_EQ(file.attr_ints("rows"), (std::vector<int64_t>{3, 1, 4}));
  EXPECT_TRUE(file.attr_ints("none").empty());
  EXPECT_EQ(file.attr_doubles("scales"), (std::vector<double>{0.5, -1.5}));
  EXPECT_EQ(file.attr_strings("names"), (std::vector<std::string>{"a", "", "ccc"}));
  EXPECT_EQ(file.attr_json("spans")["needle"][1], 7);
  EXPECT_EQ(file.attr_names().size(), 9u);
  EXPECT_THROW(file.attr_int("text"), FormatError);
  try {
    (void)file.attr_string("missing");
    FAIL() << "no error";
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("attrs.h5:/ attribute missing"), std::string::npos)
        << e.what();
  }
}

TEST_F(H5Test, H5pyReadsWhatWeWrite) {
  if (!have_h5py()) GTEST_SKIP() << "/usr/bin/python3 has no h5py";
  // Values around every rounding edge, plus random ones; numpy's astype(float16) on the
  // float32 copy is the reference for the float16 copy.
  std::vector<float> values = {0.1f,
                               65504.0f,
                               65519.0f,
                               65520.0f,
                               std::ldexp(1.0f, -24),
                               std::ldexp(1.0f, -25),
                               std::ldexp(3.0f, -25),
                               -0.0f,
                               1e-10f,
                               std::numeric_limits<float>::infinity(),
                               -1e9f,
                               1.0f + std::ldexp(1.0f, -11),
                               1.0f + 3 * std::ldexp(1.0f, -11)};
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> exponent(-30.0f, 17.0f);
  while (values.size() < 2 * 500) values.push_back((rng() & 1 ? 1 : -1) * std::exp2(exponent(rng)));
  const std::vector<int64_t> shape = {2, 500};
  const fs::path path = dir_ / "py.h5";
  {
    h5::File file = h5::File::create(path);
    file.create_dataset("x32", h5::DType::F32, shape).write(values);
    h5::Dataset x16 = file.create_dataset("x16", h5::DType::F16, shape,
                                          {.chunk = {1, 500}, .gzip_level = 6, .shuffle = true});
    x16.write(values);
    x16.set_dims({"head", "pos"});
    file.set_attr_string("s", "abc");
    file.set_attr_int("i", 42);
    file.set_attr_double("d", 1.5);
    file.set_attr_bool("b", true);
    file.set_attr_ints("ai", {1, 2});
    file.set_attr_strings("as", {"x", "yz"});
    file.close();
  }
  const std::string out = run_python(R"(
import h5py, numpy as np
f = h5py.File(")" + path.string() + R"(", "r")
x32, x16 = f["x32"][...], f["x16"][...]
ref = x32.astype(np.float16)
d = f["x16"]
print("dtype", d.dtype, d.chunks, d.compression, d.compression_opts, d.shuffle, d.attrs["dims"])
print("mismatch", int(np.sum(ref.view(np.uint16) != x16.view(np.uint16))))
a = f.attrs
print("attrs", repr(a["s"]), int(a["i"]), float(a["d"]), type(a["b"]).__name__, bool(a["b"]),
      list(a["ai"]), [str(s) for s in a["as"]])
)",
                                     dir_);
  EXPECT_NE(out.find("dtype float16 (1, 500) gzip 6 True head pos"), std::string::npos) << out;
  EXPECT_NE(out.find("mismatch 0"), std::string::npos) << out;
  EXPECT_NE(out.find("attrs 'abc' 42 1.5 bool_ True [1, 2] ['x', 'yz']"), std::string::npos) << out;
}

TEST_F(H5Test, WeReadWhatH5pyWrites) {
  if (!have_h5py()) GTEST_SKIP() << "/usr/bin/python3 has no h5py";
  const fs::path path = dir_ / "from_py.h5";
  const std::string out = run_python(R"(
import h5py, numpy as np
with h5py.File(")" + path.string() + R"(", "w") as f:
    f.create_dataset("h", data=np.array([[0.1, -65504.0], [6e-8, 2.5]], dtype=np.float16))
    f.create_dataset("i", data=np.arange(6, dtype=np.int64).reshape(2, 3))
    f.attrs["flag"] = True
    f.attrs["name"] = "llama"
    f.attrs["ints"] = np.array([5, 6], dtype=np.int32)
    f.attrs["fixed"] = np.bytes_(b"fixed")
print("ok")
)",
                                     dir_);
  ASSERT_NE(out.find("ok"), std::string::npos) << out;
  const h5::File file = h5::File::open_read(path);
  const h5::Dataset h = file.open_dataset("h");
  EXPECT_EQ(h.dtype(), h5::DType::F16);
  // numpy's float16 values, written out exactly.
  EXPECT_EQ(h.read<float>(),
            (std::vector<float>{0.0999755859375f, -65504.0f, 5.9604644775390625e-08f, 2.5f}));
  EXPECT_EQ(file.open_dataset("i").read<int32_t>(), (std::vector<int32_t>{0, 1, 2, 3, 4, 5}));
  EXPECT_TRUE(file.attr_bool("flag"));
  EXPECT_EQ(file.attr_string("name"), "llama");
  EXPECT_EQ(file.attr_ints("ints"), (std::vector<int64_t>{5, 6}));
  EXPECT_EQ(file.attr_string("fixed"), "fixed");
}

TEST_F(H5Test, BadFilesGiveOneCleanLine) {
  const fs::path text = dir_ / "notes.txt";
  std::ofstream(text) << "this is not HDF5\n";
  try {
    (void)h5::File::open_read(text);
    FAIL() << "no error";
  } catch (const FormatError& e) {
    EXPECT_EQ(std::string(e.what()), text.string() + ": not an HDF5 file");
  }
  // A truncated HDF5 file: the signature is there, the rest is not.
  const fs::path good = dir_ / "good.h5";
  {
    h5::File file = h5::File::create(good);
    file.create_dataset("x", h5::DType::F32, {1000}).write(std::vector<float>(1000, 1.0f));
    file.close();
  }
  const fs::path cut = dir_ / "cut.h5";
  fs::copy_file(good, cut);
  fs::resize_file(cut, 700);
  try {
    h5::File file = h5::File::open_read(cut);
    (void)file.open_dataset("x").read<float>();
    FAIL() << "no error";
  } catch (const FormatError& e) {
    const std::string message = e.what();
    EXPECT_EQ(message.rfind(cut.string() + ":", 0), 0u) << message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  }
  EXPECT_THROW(h5::File::open_read(dir_ / "missing.h5"), IoError);
  EXPECT_THROW(h5::File::create(dir_ / "no_dir" / "x.h5"), IoError);
}

namespace {

// Writes records r0..r{n-1} the way a dump does (skip complete ones, drop a half-written
// one, flush after each), so that a SIGKILL can land anywhere.
void write_records(h5::File& file, int n) {
  h5::Group records = file.require_group("records");
  std::vector<float> data(3 * 512 * 64);  // [n_head, seq, d_head]
  for (int r = 0; r < n; ++r) {
    const std::string id = "r" + std::to_string(r);
    if (records.exists(id)) {
      const h5::Group old = records.open_group(id);
      if (old.has_attr("complete") && old.attr_bool("complete")) continue;
      records.remove(id);
    }
    h5::Group record = records.create_group(id);
    for (int layer = 0; layer < 8; ++layer) {
      for (size_t i = 0; i < data.size(); ++i)
        data[i] = static_cast<float>((i + 7 * r + layer) % 1000);
      record
          .create_dataset("layers/" + std::to_string(layer) + "/k", h5::DType::F16, {3, 512, 64},
                          {.chunk = {1, 512, 64}, .gzip_level = 1})
          .write(data);
    }
    record.set_attr_bool("complete", true);
    file.flush();
  }
  file.close();
}

// Exit status 0: resumed the file; 2: the file could not be continued (a kill before its
// first flush, or inside a flush) and was started over; 1: anything else.
int resume_or_restart(const fs::path& path, int n) {
  try {
    h5::File file = h5::File::open_rw(path);
    write_records(file, n);
    return 0;
  } catch (const Error&) {
  }
  try {
    h5::File file = h5::File::create(path);
    write_records(file, n);
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "child: %s\n", e.what());
    return 1;
  }
}

}  // namespace

// What --resume relies on. A run killed at any moment leaves a file that either continues
// (its complete records intact) or fails to open or continue with a typed ckv::Error, never
// a crash; a resumed run then finishes with every record complete and correct. Flushing
// between records keeps the restarts rare; HDF5 updates metadata in place, so a kill inside
// a flush can still cost the file.
TEST_F(H5Test, SurvivesSigkillBetweenFlushes) {
  constexpr int kRecords = 60;
  const fs::path path = dir_ / "killed.h5";
  const auto start = std::chrono::steady_clock::now();
  {
    h5::File file = h5::File::create(path);
    write_records(file, kRecords);
  }
  const auto full_us = std::chrono::duration_cast<std::chrono::microseconds>(
                           std::chrono::steady_clock::now() - start)
                           .count();
  int interrupted = 0;
  int restarted = 0;
  for (int trial = 0; trial < 8; ++trial) {
    fs::remove(path);
    for (int run = 0; run < 3; ++run) {  // killed, killed while resuming, completed
      std::fflush(nullptr);
      const pid_t pid = ::fork();
      ASSERT_GE(pid, 0);
      if (pid == 0) ::_exit(resume_or_restart(path, kRecords));
      if (run < 2) {  // somewhere in the first 90% of a full run
        ::usleep(static_cast<useconds_t>(full_us * ((trial * 7 + run * 3) % 9 + 0.5) / 10));
        ::kill(pid, SIGKILL);
      }
      int status = 0;
      ::waitpid(pid, &status, 0);
      if (run == 0 && WIFSIGNALED(status)) ++interrupted;
      ASSERT_FALSE(WIFEXITED(status) && WEXITSTATUS(status) == 1) << "trial " << trial;
      ASSERT_FALSE(WIFSIGNALED(status) && WTERMSIG(status) != SIGKILL) << "trial " << trial;
      if (run == 2) {
        ASSERT_TRUE(WIFEXITED(status)) << "trial " << trial;
        restarted += WEXITSTATUS(status) == 2;
      }
    }
    const h5::File file = h5::File::open_read(path);
    for (int r = 0; r < kRecords; ++r) {
      const h5::Group record = file.open_group("records/r" + std::to_string(r));
      ASSERT_TRUE(record.attr_bool("complete"));
      const std::vector<float> k = record.open_dataset("layers/7/k").read_index<float>(2);
      ASSERT_EQ(k[5], static_cast<float>((2 * 512 * 64 + 5 + 7 * r + 7) % 1000)) << r;
    }
  }
  EXPECT_GE(interrupted, 4) << "the kills came too late to test anything (a full run took "
                            << full_us << " us)";
  RecordProperty("restarted", restarted);
}

namespace {

// Runs in a fresh process (the death test re-runs the test binary), so that HDF5 starts
// the way it does in ckv: a file-size limit makes writes fail with EFBIG as on a full disk
// (SIGXFSZ ignored, so the write returns an error instead of killing the process).
void fill_until_a_write_fails(const fs::path& path, std::string& where, int& layer) {
  std::signal(SIGXFSZ, SIG_IGN);
  const rlimit limit{256 << 10, 256 << 10};
  ::setrlimit(RLIMIT_FSIZE, &limit);
  const std::vector<float> head(512 * 64, 0.5f);  // [seq, d_head]
  h5::File file = h5::File::create(path);
  try {
    for (layer = 0;; ++layer) {
      h5::Dataset k = file.create_dataset("layers/" + std::to_string(layer) + "/k", h5::DType::F16,
                                          {3, 512, 64}, {.chunk = {1, 512, 64}});
      for (int64_t h = 0; h < 3; ++h) {
        where = k.path();
        k.write_index(h, head);
      }
    }
  } catch (const IoError& e) {
    where = e.what();
    file.abandon();
  }
}

}  // namespace

// A failed write is reported by the write that failed (not later, by a destructor that
// cannot report it), and unwinding after it closes every handle and exits normally:
// HDF5 1.10 keeps the identifier of an object whose close failed and, at its own clean-up
// at exit, closed it again and crashed (exit 139).
TEST_F(H5Test, FailedWriteIsReportedByTheWriteAndExitIsClean) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const fs::path path = dir_ / "full.h5";
  EXPECT_EXIT(
      {
        std::string where;
        int layer = 0;
        fill_until_a_write_fails(path, where, layer);
        // One line naming the dataset, from the write that crossed the limit (each layer
        // is 192 KiB; the limit 256 KiB): "<file>:/layers/1/k: cannot write (File too large)".
        const bool ok = where == fmt::format("{}:/layers/{}/k: cannot write (File too large)",
                                             path.string(), layer) &&
                        layer <= 2;
        if (!ok) std::fprintf(stderr, "unexpected, layer %d: %s\n", layer, where.c_str());
        std::exit(ok ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "");
}

// /dev/full fails every write with ENOSPC: creating the file reports it, in one line.
TEST_F(H5Test, DevFullIsACleanError) {
  if (!fs::exists("/dev/full")) GTEST_SKIP() << "no /dev/full";
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        std::string message;
        try {
          (void)h5::File::create("/dev/full");
        } catch (const IoError& e) {
          message = e.what();
        }
        const bool ok = message == "/dev/full: cannot create HDF5 file: No space left on device";
        if (!ok) std::fprintf(stderr, "unexpected: %s\n", message.c_str());
        std::exit(ok ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "");
}
