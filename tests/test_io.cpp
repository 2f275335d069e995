// gpuml::read_npy / write_npy / read_csv / write_csv / read_matrix: round trips on awkward shapes, headers built by
// hand from the .npy format specification, and the error messages for broken files. gpuml::write_output: whole
// files, through symbolic links, and straight to devices and FIFOs.
#include <gpuml/io/io.hpp>
#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace {

namespace fs = std::filesystem;
using gpuml::IndexMatrix;
using gpuml::Labels;
using gpuml::Matrix;

std::uint64_t seed() {
  static const std::uint64_t s = [] {
    std::uint64_t v = std::random_device{}();
    if (const char* e = std::getenv("GPUML_TEST_SEED")) v = std::strtoull(e, nullptr, 10);
    std::printf("test_io: GPUML_TEST_SEED=%llu\n", static_cast<unsigned long long>(v));
    return v;
  }();
  return s;
}

/// A fresh directory per test, removed afterwards.
class IoTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() /
           (std::string("gpuml_test_io_") + info->name() + "_" + std::to_string(std::random_device{}()));
    fs::create_directories(dir_);
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  static void write_bytes(const std::string& p, const std::string& bytes) {
    std::ofstream f(p, std::ios::binary);
    f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  }
  static std::string read_bytes(const std::string& p) {
    std::ifstream f(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
  }

  fs::path dir_;
};

/// The bytes of a .npy file as the format specification describes them: magic, version, little-endian header
/// length (2 bytes for 1.0, 4 for 2.0/3.0), the dict padded with spaces and ended by '\n' so that the total
/// prefix is a multiple of 64, then the data.
std::string npy_bytes(const std::string& dict, const std::string& data, int major = 1) {
  const std::size_t prefix = major == 1 ? 10 : 12;
  const std::size_t total = ((prefix + dict.size() + 1 + 63) / 64) * 64;
  const std::size_t header_len = total - prefix;
  std::string out = "\x93NUMPY";
  out += static_cast<char>(major);
  out += '\0';
  for (std::size_t b = 0; b < prefix - 8; ++b) out += static_cast<char>((header_len >> (8 * b)) & 0xff);
  out += dict;
  out.append(header_len - dict.size() - 1, ' ');
  out += '\n';
  EXPECT_EQ(out.size() % 64, 0u);
  return out + data;
}

template <class T>
std::string raw(const std::vector<T>& v) {  // little-endian hosts only, which is what this test runs on
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
}

/// Random values with awkward members: signed zeros, subnormals, extremes, infinities, long mantissas.
template <class T>
Matrix<T> awkward_random(Eigen::Index rows, Eigen::Index cols, std::mt19937_64& rng, bool with_inf = true) {
  std::uniform_real_distribution<double> exp(-30, 30), mant(-1, 1);
  std::uniform_int_distribution<int> pick(0, 19);
  Matrix<T> m(rows, cols);
  for (Eigen::Index i = 0; i < m.size(); ++i) {
    T v;
    switch (pick(rng)) {
      case 0: v = T(-0.0); break;
      case 1: v = std::numeric_limits<T>::denorm_min() * T(3); break;
      case 2: v = std::numeric_limits<T>::max(); break;
      case 3: v = std::numeric_limits<T>::lowest(); break;
      case 4: v = with_inf ? std::numeric_limits<T>::infinity() : T(1); break;
      case 5: v = std::numeric_limits<T>::min(); break;
      default: v = static_cast<T>(mant(rng) * std::pow(10.0, exp(rng)));
    }
    m.data()[i] = v;
  }
  return m;
}

template <class T>
bool bitwise_equal(const Matrix<T>& a, const Matrix<T>& b) {
  return a.rows() == b.rows() && a.cols() == b.cols() &&
         (a.size() == 0 || std::memcmp(a.data(), b.data(), sizeof(T) * static_cast<std::size_t>(a.size())) == 0);
}

const std::vector<std::pair<Eigen::Index, Eigen::Index>> kShapes = {
    {1, 1}, {1, 17}, {17, 1}, {2, 3}, {3, 1000}, {257, 13}, {1000, 3}, {63, 65}, {0, 4}, {5, 0}};

/// Checks that what() names the file and contains the problem.
template <class Fn>
void expect_invalid(Fn&& fn, const std::string& file, const std::string& problem) {
  try {
    fn();
    ADD_FAILURE() << "expected gpuml::invalid_input mentioning '" << problem << "'";
  } catch (const gpuml::invalid_input& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find(file), std::string::npos) << what;
    EXPECT_NE(what.find(problem), std::string::npos) << what;
  }
}

// ------------------------------------------------------------------------------------------------------------------
// .npy
// ------------------------------------------------------------------------------------------------------------------

template <class T>
void npy_round_trip(IoTest& t, const std::string& p, std::mt19937_64& rng) {
  for (const auto& [r, c] : kShapes) {
    SCOPED_TRACE(std::to_string(r) + " x " + std::to_string(c));
    const Matrix<T> m = awkward_random<T>(r, c, rng);
    gpuml::write_npy(p, m);
    EXPECT_TRUE(bitwise_equal(gpuml::read_npy<T>(p), m));
    const auto h = gpuml::read_npy_header(p);
    EXPECT_EQ(h.rows, r);
    EXPECT_EQ(h.cols, c);
    EXPECT_EQ(h.ndim, 2);
    EXPECT_FALSE(h.fortran_order);
    EXPECT_EQ(h.dtype, (std::is_same_v<T, float> ? gpuml::NpyDtype::f4 : gpuml::NpyDtype::f8));
    EXPECT_EQ(h.data_offset % 64, 0u);
    (void)t;
  }
}

TEST_F(IoTest, NpyRoundTripFloat32) {
  std::mt19937_64 rng(seed());
  npy_round_trip<float>(*this, path("a.npy"), rng);
}

TEST_F(IoTest, NpyRoundTripFloat64) {
  std::mt19937_64 rng(seed() + 1);
  npy_round_trip<double>(*this, path("a.npy"), rng);
}

TEST_F(IoTest, NpyConvertsFloat32ToFloat64AndBack) {
  std::mt19937_64 rng(seed() + 2);
  const Matrix<float> m = awkward_random<float>(37, 11, rng);
  gpuml::write_npy(path("f.npy"), m);
  const Matrix<double> d = gpuml::read_npy<double>(path("f.npy"));
  EXPECT_TRUE(bitwise_equal(Matrix<double>(m.cast<double>()), d));
  gpuml::write_npy(path("d.npy"), d);
  EXPECT_TRUE(bitwise_equal(gpuml::read_npy<float>(path("d.npy")), m));
}

TEST_F(IoTest, NpyLabelsAndIndices) {
  std::mt19937_64 rng(seed() + 3);
  std::uniform_int_distribution<std::int32_t> lab(-1, 126);
  Labels labels(1001);
  for (auto& v : labels) v = lab(rng);
  gpuml::write_npy(path("l.npy"), labels);
  const auto h = gpuml::read_npy_header(path("l.npy"));
  EXPECT_EQ(h.ndim, 1);
  EXPECT_EQ(h.dtype, gpuml::NpyDtype::i4);
  EXPECT_EQ(gpuml::read_npy_labels(path("l.npy")), labels);
  // 1-D becomes an n x 1 column, converted to double.
  const Matrix<double> col = gpuml::read_npy<double>(path("l.npy"));
  ASSERT_EQ(col.rows(), 1001);
  ASSERT_EQ(col.cols(), 1);
  EXPECT_EQ(col(5, 0), labels(5));

  std::uniform_int_distribution<std::int64_t> idx(0, std::int64_t(1) << 40);
  IndexMatrix ix(9, 10);
  for (Eigen::Index i = 0; i < ix.size(); ++i) ix.data()[i] = idx(rng);
  gpuml::write_npy(path("i.npy"), ix);
  EXPECT_EQ(gpuml::read_npy_header(path("i.npy")).dtype, gpuml::NpyDtype::i8);
  EXPECT_EQ(gpuml::read_npy_indices(path("i.npy")), ix);
  // int64 that do not fit int32 are refused, not truncated.
  expect_invalid([&] { (void)gpuml::read_npy<std::int32_t>(path("i.npy")); }, path("i.npy"), "does not fit");
}

TEST_F(IoTest, NpyWriterMatchesSpecBytes) {
  // What numpy.save writes for np.arange(6, dtype='<f8').reshape(2, 3) and np.array([7, -1, 3], dtype='<i4'):
  // version 1.0, header padded to 64 bytes.
  Matrix<double> m(2, 3);
  m << 0, 1, 2, 3, 4, 5;
  gpuml::write_npy(path("m.npy"), m);
  const std::string expected_m =
      npy_bytes("{'descr': '<f8', 'fortran_order': False, 'shape': (2, 3), }", raw<double>({0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(read_bytes(path("m.npy")), expected_m);
  EXPECT_EQ(expected_m.substr(0, 10), std::string("\x93NUMPY\x01\x00\x76\x00", 10));

  Labels l(3);
  l << 7, -1, 3;
  gpuml::write_npy(path("l.npy"), l);
  EXPECT_EQ(read_bytes(path("l.npy")),
            npy_bytes("{'descr': '<i4', 'fortran_order': False, 'shape': (3,), }", raw<std::int32_t>({7, -1, 3})));
}

TEST_F(IoTest, NpyReadsHandBuiltHeaders) {
  // C order, version 1.0, float64.
  write_bytes(path("c.npy"),
              npy_bytes("{'descr': '<f8', 'fortran_order': False, 'shape': (2, 3), }", raw<double>({1, 2, 3, 4, 5, 6})));
  Matrix<double> want(2, 3);
  want << 1, 2, 3, 4, 5, 6;
  EXPECT_EQ(gpuml::read_npy<double>(path("c.npy")), want);

  // Fortran order: the data are column-major and must come back transposed into row-major storage.
  write_bytes(path("f.npy"),
              npy_bytes("{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3), }", raw<float>({1, 4, 2, 5, 3, 6})));
  const auto fh = gpuml::read_npy_header(path("f.npy"));
  EXPECT_TRUE(fh.fortran_order);
  EXPECT_EQ(fh.dtype, gpuml::NpyDtype::f4);
  EXPECT_EQ(gpuml::read_npy<double>(path("f.npy")), want);

  // Versions 2.0 and 3.0 (4-byte header length), int64 and int32 converted to float, 1-D shapes, odd spacing
  // and double quotes, which a Python dict literal allows.
  write_bytes(path("v2.npy"),
              npy_bytes("{'descr': '<i8', 'fortran_order': False, 'shape': (6,), }", raw<std::int64_t>({1, 2, 3, 4, 5, 6}), 2));
  const auto h2 = gpuml::read_npy_header(path("v2.npy"));
  EXPECT_EQ(h2.major_version, 2);
  EXPECT_EQ(h2.ndim, 1);
  EXPECT_EQ(h2.rows, 6);
  EXPECT_EQ(h2.cols, 1);
  const Matrix<float> v2 = gpuml::read_npy<float>(path("v2.npy"));
  ASSERT_EQ(v2.rows(), 6);
  ASSERT_EQ(v2.cols(), 1);
  EXPECT_EQ(v2(5, 0), 6.0f);

  write_bytes(path("v3.npy"), npy_bytes("{\"shape\":(3 ,2), \"fortran_order\" :False,\"descr\":\"<i4\"}",
                                        raw<std::int32_t>({1, 2, 3, 4, 5, 6}), 3));
  EXPECT_EQ(gpuml::read_npy_header(path("v3.npy")).major_version, 3);
  EXPECT_EQ(gpuml::read_npy<double>(path("v3.npy")), (Matrix<double>(3, 2) << 1, 2, 3, 4, 5, 6).finished());

  // Python 2 style longs in the shape.
  write_bytes(path("py2.npy"),
              npy_bytes("{'descr': '<f8', 'fortran_order': False, 'shape': (2L, 1L), }", raw<double>({0.5, -0.5})));
  EXPECT_EQ(gpuml::read_npy<double>(path("py2.npy")), (Matrix<double>(2, 1) << 0.5, -0.5).finished());

  // Float to integer conversion is exact or refused.
  write_bytes(path("frac.npy"),
              npy_bytes("{'descr': '<f8', 'fortran_order': False, 'shape': (2,), }", raw<double>({3.0, 2.5})));
  expect_invalid([&] { (void)gpuml::read_npy<std::int32_t>(path("frac.npy")); }, path("frac.npy"), "not an integer");
}

TEST_F(IoTest, NpyErrors) {
  const std::string missing = path("missing.npy");
  expect_invalid([&] { (void)gpuml::read_npy<float>(missing); }, missing, "not found");
  expect_invalid([&] { (void)gpuml::read_npy_header(missing); }, missing, "not found");

  write_bytes(path("magic.npy"), "PK\x03\x04 this is a zip, not a .npy file, and it is long enough........");
  expect_invalid([&] { (void)gpuml::read_npy<float>(path("magic.npy")); }, path("magic.npy"), "bad magic");

  write_bytes(path("empty.npy"), "");
  expect_invalid([&] { (void)gpuml::read_npy<float>(path("empty.npy")); }, path("empty.npy"), "bad magic");

  write_bytes(path("c8.npy"), npy_bytes("{'descr': '<c8', 'fortran_order': False, 'shape': (2,), }", std::string(16, '\0')));
  expect_invalid([&] { (void)gpuml::read_npy<float>(path("c8.npy")); }, path("c8.npy"), "unsupported dtype '<c8'");

  write_bytes(path("be.npy"), npy_bytes("{'descr': '>f8', 'fortran_order': False, 'shape': (2,), }", std::string(16, '\0')));
  expect_invalid([&] { (void)gpuml::read_npy<double>(path("be.npy")); }, path("be.npy"), "big-endian");

  write_bytes(path("rec.npy"),
              npy_bytes("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (2,), }", std::string(8, '\0')));
  expect_invalid([&] { (void)gpuml::read_npy<double>(path("rec.npy")); }, path("rec.npy"), "structured");

  write_bytes(path("3d.npy"), npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 2, 2), }", std::string(32, '\0')));
  expect_invalid([&] { (void)gpuml::read_npy<float>(path("3d.npy")); }, path("3d.npy"), "3 dimensions");

  write_bytes(path("0d.npy"), npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (), }", std::string(4, '\0')));
  expect_invalid([&] { (void)gpuml::read_npy<float>(path("0d.npy")); }, path("0d.npy"), "0 dimensions");

  // Truncated data: the header promises 2 x 3 doubles, the file holds 5.
  write_bytes(path("short.npy"),
              npy_bytes("{'descr': '<f8', 'fortran_order': False, 'shape': (2, 3), }", raw<double>({1, 2, 3, 4, 5})));
  expect_invalid([&] { (void)gpuml::read_npy<double>(path("short.npy")); }, path("short.npy"), "truncated data");
  expect_invalid([&] { (void)gpuml::read_npy<float>(path("short.npy")); }, path("short.npy"), "truncated data");
  // A shape far beyond the file is refused before anything is allocated.
  write_bytes(path("huge.npy"),
              npy_bytes("{'descr': '<f8', 'fortran_order': False, 'shape': (100000000000, 1000), }", raw<double>({1})));
  expect_invalid([&] { (void)gpuml::read_npy<double>(path("huge.npy")); }, path("huge.npy"), "truncated data");

  // Truncated header.
  const std::string whole = npy_bytes("{'descr': '<f8', 'fortran_order': False, 'shape': (1,), }", raw<double>({1}));
  write_bytes(path("head.npy"), whole.substr(0, 30));
  expect_invalid([&] { (void)gpuml::read_npy<double>(path("head.npy")); }, path("head.npy"), "truncated header");

  // Missing key, unknown version.
  write_bytes(path("nokey.npy"), npy_bytes("{'descr': '<f8', 'shape': (1,), }", raw<double>({1})));
  expect_invalid([&] { (void)gpuml::read_npy<double>(path("nokey.npy")); }, path("nokey.npy"), "fortran_order");
  std::string v9 = whole;
  v9[6] = 9;
  write_bytes(path("v9.npy"), v9);
  expect_invalid([&] { (void)gpuml::read_npy<double>(path("v9.npy")); }, path("v9.npy"), "version 9");

  // Writing into a directory that does not exist.
  const std::string nowhere = path("no/such/dir/x.npy");
  expect_invalid([&] { gpuml::write_npy(nowhere, Matrix<float>(Matrix<float>::Zero(2, 2))); }, nowhere, "cannot open");
}

// ------------------------------------------------------------------------------------------------------------------
// CSV
// ------------------------------------------------------------------------------------------------------------------

template <class T>
void csv_round_trip(IoTest& t, const std::string& p, std::mt19937_64& rng) {
  for (const auto& [r, c] : kShapes) {
    if (r == 0 || c == 0) continue;  // an empty CSV has no shape to come back
    SCOPED_TRACE(std::to_string(r) + " x " + std::to_string(c));
    const Matrix<T> m = awkward_random<T>(r, c, rng);
    gpuml::write_csv(p, m);
    EXPECT_TRUE(bitwise_equal(gpuml::read_csv<T>(p), m));
    (void)t;
  }
}

TEST_F(IoTest, CsvRoundTripFloat32) {
  std::mt19937_64 rng(seed() + 4);
  csv_round_trip<float>(*this, path("a.csv"), rng);
}

TEST_F(IoTest, CsvRoundTripFloat64) {
  std::mt19937_64 rng(seed() + 5);
  csv_round_trip<double>(*this, path("a.csv"), rng);
}

TEST_F(IoTest, CsvNan) {
  Matrix<double> m(1, 3);
  m << std::numeric_limits<double>::quiet_NaN(), 1.0, -std::numeric_limits<double>::infinity();
  gpuml::write_csv(path("n.csv"), m);
  const Matrix<double> r = gpuml::read_csv<double>(path("n.csv"));
  EXPECT_TRUE(std::isnan(r(0, 0)));
  EXPECT_EQ(r(0, 1), 1.0);
  EXPECT_EQ(r(0, 2), -std::numeric_limits<double>::infinity());
}

TEST_F(IoTest, CsvLabelsAndIndices) {
  Labels l(4);
  l << 3, 0, -1, 126;
  gpuml::write_csv(path("l.csv"), l);
  EXPECT_EQ(read_bytes(path("l.csv")), "3\n0\n-1\n126\n");
  EXPECT_EQ(gpuml::read_csv_labels(path("l.csv")), l);
  IndexMatrix ix(2, 3);
  ix << 0, 1, 2, std::int64_t(1) << 40, 4, 5;
  gpuml::write_csv(path("i.csv"), ix);
  EXPECT_EQ(read_bytes(path("i.csv")), "0,1,2\n1099511627776,4,5\n");
  EXPECT_EQ(gpuml::read_csv_indices(path("i.csv")), ix);
}

TEST_F(IoTest, CsvHeaderBlankLinesAndLineEndings) {
  write_bytes(path("h.csv"), "\xEF\xBB\xBF" "x0, x1 ,\"x2\"\r\n\r\n1, 2.5,-3e2\r\n  \r\n+4,\"5\",6\r\n\n");
  Matrix<double> want(2, 3);
  want << 1, 2.5, -300, 4, 5, 6;
  EXPECT_EQ(gpuml::read_csv<double>(path("h.csv")), want);

  write_bytes(path("noheader.csv"), "1,2\n3,4");  // no final newline
  EXPECT_EQ(gpuml::read_csv<float>(path("noheader.csv")), (Matrix<float>(2, 2) << 1, 2, 3, 4).finished());

  write_bytes(path("onlyheader.csv"), "a,b,c\n");
  const Matrix<double> e = gpuml::read_csv<double>(path("onlyheader.csv"));
  EXPECT_EQ(e.rows(), 0);
  EXPECT_EQ(e.cols(), 3);
}

TEST_F(IoTest, CsvErrors) {
  const std::string missing = path("missing.csv");
  expect_invalid([&] { (void)gpuml::read_csv<double>(missing); }, missing, "not found");

  write_bytes(path("ragged.csv"), "1,2,3\n4,5,6\n\n7,8\n");
  expect_invalid([&] { (void)gpuml::read_csv<double>(path("ragged.csv")); }, path("ragged.csv"),
                 "line 4 has 2 fields, but line 1 has 3");

  write_bytes(path("raggedh.csv"), "a,b\n1,2\n3,4,5\n");
  expect_invalid([&] { (void)gpuml::read_csv<double>(path("raggedh.csv")); }, path("raggedh.csv"),
                 "line 3 has 3 fields, but line 1 (the header) has 2");

  write_bytes(path("bad.csv"), "1,2\n3,oops\n");
  expect_invalid([&] { (void)gpuml::read_csv<double>(path("bad.csv")); }, path("bad.csv"), "line 2, field 2: 'oops'");

  write_bytes(path("emptyfield.csv"), "1,2\n3,\n");
  expect_invalid([&] { (void)gpuml::read_csv<double>(path("emptyfield.csv")); }, path("emptyfield.csv"), "line 2, field 2");

  write_bytes(path("float.csv"), "1,2\n3,4.5\n");
  expect_invalid([&] { (void)gpuml::read_csv<std::int64_t>(path("float.csv")); }, path("float.csv"), "not an integer");
}

// ------------------------------------------------------------------------------------------------------------------
// read_matrix / write_matrix
// ------------------------------------------------------------------------------------------------------------------

TEST_F(IoTest, ChoosesFormatByExtension) {
  std::mt19937_64 rng(seed() + 6);
  const Matrix<float> m = awkward_random<float>(13, 5, rng);
  for (const char* name : {"m.npy", "m.NPY", "m.csv", "m.Csv"}) {
    SCOPED_TRACE(name);
    gpuml::write_matrix(path(name), m);
    EXPECT_TRUE(bitwise_equal(gpuml::read_matrix<float>(path(name)), m));
  }
  EXPECT_EQ(read_bytes(path("m.npy")).substr(0, 6), "\x93NUMPY");
  EXPECT_EQ(gpuml::file_format(path("m.csv")), gpuml::FileFormat::csv);

  Labels l(3);
  l << 1, 2, 3;
  gpuml::write_matrix(path("l.npy"), l);
  gpuml::write_matrix(path("l.csv"), l);
  EXPECT_EQ(gpuml::read_labels(path("l.npy")), l);
  EXPECT_EQ(gpuml::read_labels(path("l.csv")), l);
  IndexMatrix ix(1, 2);
  ix << 5, 6;
  gpuml::write_matrix(path("i.npy"), ix);
  gpuml::write_matrix(path("i.csv"), ix);
  EXPECT_EQ(gpuml::read_indices(path("i.npy")), ix);
  EXPECT_EQ(gpuml::read_indices(path("i.csv")), ix);

  expect_invalid([&] { (void)gpuml::read_matrix<float>(path("m.txt")); }, path("m.txt"), ".npy or .csv");
  expect_invalid([&] { gpuml::write_matrix(path("noext"), m); }, path("noext"), ".npy or .csv");
  expect_invalid([&] { (void)gpuml::read_matrix<float>(path("dir.npy/m")); }, path("dir.npy/m"), ".npy or .csv");
}

}  // namespace

// CSV as people have it: a mistyped number in the first row is an error naming it (not a silently dropped
// "header"), a numeric first row is data, other delimiters, a forced header, and a choice of columns by name or
// position (iris with its species column).
TEST_F(IoTest, CsvHeaderDelimiterAndColumns) {
  write_bytes(path("typo.csv"), "1.0,2.O,3.0,4.0\n5,6,7,8\n");
  expect_invalid([&] { (void)gpuml::read_csv<double>(path("typo.csv")); }, path("typo.csv"),
                 "line 1, field 2: '2.O' is not a number");
  write_bytes(path("numeric.csv"), "1,2\n3,4\n");
  EXPECT_EQ(gpuml::read_csv<double>(path("numeric.csv")).rows(), 2);
  gpuml::CsvOptions forced;
  forced.header = gpuml::CsvOptions::Header::yes;
  EXPECT_EQ(gpuml::read_csv<double>(path("numeric.csv"), forced), (Matrix<double>(1, 2) << 3, 4).finished());
  gpuml::CsvOptions none;
  none.header = gpuml::CsvOptions::Header::no;
  write_bytes(path("names.csv"), "a,b\n1,2\n");
  expect_invalid([&] { (void)gpuml::read_csv<double>(path("names.csv"), none); }, path("names.csv"),
                 "line 1, field 1: 'a' is not a number");

  write_bytes(path("semi.csv"), "x;y;z\n1,5;2;3\n4;5;6\n");
  gpuml::CsvOptions semi;
  semi.delimiter = ';';
  expect_invalid([&] { (void)gpuml::read_csv<double>(path("semi.csv"), semi); }, path("semi.csv"),
                 "line 2, field 1: '1,5'");
  write_bytes(path("semi.csv"), "x;y;z\n1.5;2;3\n4;5;6\n");
  EXPECT_EQ(gpuml::read_csv<double>(path("semi.csv"), semi), (Matrix<double>(2, 3) << 1.5, 2, 3, 4, 5, 6).finished());

  write_bytes(path("iris.csv"),
              "sepal_length,sepal_width,petal_length,petal_width,species\n5.1,3.5,1.4,0.2,setosa\n"
              "7.0,3.2,4.7,1.4,versicolor\n6.3,3.3,6.0,2.5,virginica\n");
  expect_invalid([&] { (void)gpuml::read_csv<double>(path("iris.csv")); }, path("iris.csv"),
                 "line 2, field 5: 'setosa' is not a number");
  gpuml::CsvOptions pick;
  pick.columns = {"sepal_length", "1", "petal_width"};
  EXPECT_EQ(gpuml::read_matrix<double>(path("iris.csv"), pick),
            (Matrix<double>(3, 3) << 5.1, 3.5, 0.2, 7.0, 3.2, 1.4, 6.3, 3.3, 2.5).finished());
  pick.columns = {"petal_colour"};
  expect_invalid([&] { (void)gpuml::read_csv<double>(path("iris.csv"), pick); }, path("iris.csv"),
                 "no column 'petal_colour'");
}

// ------------------------------------------------------------------------------------------------------------------
// write_output: whole files, through symbolic links, straight to devices and FIFOs
// ------------------------------------------------------------------------------------------------------------------

namespace {

/// The temporary files write_output leaves behind in `dir` (none, when it works).
std::vector<std::string> leftovers(const fs::path& dir) {
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir))
    if (entry.path().filename().string().find(".part-") != std::string::npos) names.push_back(entry.path().string());
  return names;
}

Labels random_labels(Eigen::Index n, std::mt19937_64& rng) {
  Labels labels(n);
  std::uniform_int_distribution<std::int32_t> label(0, 999);
  for (Eigen::Index i = 0; i < n; ++i) labels[i] = label(rng);
  return labels;
}

}  // namespace

// A regular file is replaced only by a complete one: a writer that fails leaves the old contents and no temporary
// file, a finished one replaces them; the writer writes beside the target, never into it.
TEST_F(IoTest, OutputReplacesARegularFileOnlyWhenWritten) {
  std::mt19937_64 rng(seed() + 20);
  const Matrix<double> old_data = awkward_random<double>(7, 3, rng), new_data = awkward_random<double>(9, 4, rng);
  const std::string target = path("m.npy");
  gpuml::write_npy(target, old_data);
  EXPECT_THROW(gpuml::write_output(target,
                                   [&](const std::string& p) {
                                     EXPECT_NE(p, target);
                                     EXPECT_EQ(fs::path(p).parent_path(), fs::path(target).parent_path());
                                     gpuml::write_matrix(p, new_data);
                                     throw std::runtime_error("the writer failed after writing");
                                   }),
               std::runtime_error);
  EXPECT_TRUE(bitwise_equal(gpuml::read_npy<double>(target), old_data));
  EXPECT_TRUE(leftovers(dir_).empty());
  {
    gpuml::OutputFile abandoned(target);
    gpuml::write_matrix(abandoned.write_path(), new_data);
  }
  EXPECT_TRUE(bitwise_equal(gpuml::read_npy<double>(target), old_data)) << "not committed: not in place";
  EXPECT_TRUE(leftovers(dir_).empty());
  gpuml::write_output(target, [&](const std::string& p) { gpuml::write_matrix(p, new_data); });
  EXPECT_TRUE(bitwise_equal(gpuml::read_npy<double>(target), new_data));
  EXPECT_TRUE(fs::is_regular_file(fs::symlink_status(target)));
  EXPECT_TRUE(leftovers(dir_).empty());
}

// Through a symbolic link (relative, to a link, into another directory) the link's target gets the data and the
// links stay links; the format is the one the path as given names, whatever the target is called.
TEST_F(IoTest, OutputThroughASymbolicLinkWritesItsTarget) {
  std::mt19937_64 rng(seed() + 21);
  fs::create_directories(dir_ / "out");
  fs::create_directories(dir_ / "store");
  const Matrix<float> old_data = awkward_random<float>(5, 2, rng), new_data = awkward_random<float>(31, 6, rng);
  gpuml::write_npy(path("store/data.npy"), old_data);
  fs::create_symlink("../store/data.npy", dir_ / "out/data.npy");
  fs::create_symlink("data.npy", dir_ / "out/again.npy");  // a link to the link
  gpuml::write_output(path("out/again.npy"), [&](const std::string& p) { gpuml::write_matrix(p, new_data); });
  EXPECT_TRUE(fs::is_symlink(dir_ / "out/again.npy"));
  EXPECT_TRUE(fs::is_symlink(dir_ / "out/data.npy"));
  EXPECT_EQ(fs::read_symlink(dir_ / "out/data.npy"), fs::path("../store/data.npy"));
  EXPECT_TRUE(bitwise_equal(gpuml::read_npy<float>(path("store/data.npy")), new_data));

  fs::create_symlink(dir_ / "store/centers.data", dir_ / "out/centers.csv");  // absolute; the target has no .csv
  gpuml::write_npy(path("store/centers.data"), old_data);
  EXPECT_EQ(gpuml::OutputFile(path("out/centers.csv")).target(), path("store/centers.data"));
  gpuml::write_output(path("out/centers.csv"), [&](const std::string& p) { gpuml::write_matrix(p, new_data); });
  EXPECT_TRUE(fs::is_symlink(dir_ / "out/centers.csv"));
  EXPECT_TRUE(bitwise_equal(gpuml::read_csv<float>(path("store/centers.data")), new_data));
  EXPECT_TRUE(leftovers(dir_ / "out").empty());
  EXPECT_TRUE(leftovers(dir_ / "store").empty());
}

// A dangling link creates the file it names and stays a link; one into a directory that does not exist, and links
// in a loop, are errors naming the path, with nothing written.
TEST_F(IoTest, OutputThroughADanglingLink) {
  std::mt19937_64 rng(seed() + 22);
  fs::create_directories(dir_ / "store");
  const Labels labels = random_labels(101, rng);
  fs::create_symlink("store/labels.npy", dir_ / "labels.npy");
  gpuml::write_output(path("labels.npy"), [&](const std::string& p) { gpuml::write_matrix(p, labels); });
  EXPECT_TRUE(fs::is_symlink(dir_ / "labels.npy"));
  EXPECT_EQ(gpuml::read_labels(path("store/labels.npy")), labels);

  fs::create_symlink("missing/labels.npy", dir_ / "lost.npy");
  bool written = false;
  try {
    gpuml::write_output(path("lost.npy"), [&](const std::string&) { written = true; });
    ADD_FAILURE() << "a link into a missing directory was written";
  } catch (const gpuml::error& e) {
    EXPECT_NE(std::string(e.what()).find(path("lost.npy")), std::string::npos) << e.what();
  }
  EXPECT_FALSE(written);
  EXPECT_TRUE(fs::is_symlink(dir_ / "lost.npy"));
  EXPECT_FALSE(fs::exists(dir_ / "lost.npy"));

  fs::create_symlink("loop_b.npy", dir_ / "loop_a.npy");
  fs::create_symlink("loop_a.npy", dir_ / "loop_b.npy");
  expect_invalid([&] { gpuml::write_output(path("loop_a.npy"), [&](const std::string&) { written = true; }); },
                 path("loop_a.npy"), "too many levels of symbolic links");
  EXPECT_FALSE(written);
  EXPECT_TRUE(fs::is_symlink(dir_ / "loop_a.npy"));
  EXPECT_TRUE(leftovers(dir_).empty());
  EXPECT_TRUE(leftovers(dir_ / "store").empty());
}

// A device is written directly, and its failure is the write's: /dev/full takes no data.
TEST_F(IoTest, OutputToADeviceIsWrittenDirectlyAndItsFailureReported) {
  if (!fs::exists("/dev/full")) GTEST_SKIP() << "no /dev/full here";
  {
    gpuml::OutputFile out("/dev/full");
    // Checked first: written any other way, the device would be replaced by a file.
    ASSERT_TRUE(out.in_place());
    ASSERT_EQ(out.write_path(), "/dev/full");
  }
  std::mt19937_64 rng(seed() + 23);
  const Labels labels = random_labels(1 + static_cast<Eigen::Index>(rng() % 5000), rng);
  try {
    gpuml::write_output("/dev/full", [&](const std::string& p) { gpuml::write_csv(p, labels); });
    ADD_FAILURE() << "writing to /dev/full succeeded";
  } catch (const gpuml::error& e) {
    EXPECT_NE(std::string(e.what()).find("/dev/full"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(fs::is_character_file("/dev/full"));
}

// A FIFO is written directly, not replaced: the reader at its other end receives the whole file, more than a pipe
// holds at once.
TEST_F(IoTest, OutputToAFifoReachesItsReader) {
  std::mt19937_64 rng(seed() + 24);
  const std::string fifo = path("labels.csv");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0) << std::strerror(errno);
  const Labels labels = random_labels(40000 + static_cast<Eigen::Index>(rng() % 10000), rng);
  gpuml::write_csv(path("expected.csv"), labels);
  const std::string expected = read_bytes(path("expected.csv"));
  ASSERT_GT(expected.size(), std::size_t{1} << 16) << "more than a pipe's buffer holds (64 KiB on Linux)";

  // The read end opens first, without waiting for a writer: the writer's open then never blocks, and a writer that
  // never comes (the FIFO replaced instead) ends the reading at EOF rather than hanging the test.
  const int fd = ::open(fifo.c_str(), O_RDONLY | O_NONBLOCK);
  ASSERT_GE(fd, 0) << std::strerror(errno);
  std::atomic<bool> finished{false};
  std::exception_ptr failure;
  std::thread writer([&] {
    try {
      gpuml::write_output(fifo, [&](const std::string& p) { gpuml::write_matrix(p, labels); });
    } catch (...) {
      failure = std::current_exception();
    }
    finished = true;
  });
  std::string received;
  char buf[1 << 14];
  for (;;) {
    const bool writer_done = finished.load();  // before the read: once done, all its data is in the pipe
    const ssize_t got = ::read(fd, buf, sizeof buf);
    if (got > 0) {
      received.append(buf, static_cast<std::size_t>(got));
    } else if (got == 0 || errno == EAGAIN) {
      if (writer_done) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    } else if (errno != EINTR) {
      ADD_FAILURE() << "reading the FIFO: " << std::strerror(errno);
      break;
    }
  }
  writer.join();
  ::close(fd);
  if (failure) {
    try {
      std::rethrow_exception(failure);
    } catch (const std::exception& e) {
      ADD_FAILURE() << "write_output to a FIFO: " << e.what();
    }
  }
  EXPECT_TRUE(fs::is_fifo(fs::symlink_status(fifo))) << "the FIFO was replaced";
  EXPECT_EQ(received.size(), expected.size());
  EXPECT_TRUE(received == expected) << "the reader received other bytes than write_csv writes";
  EXPECT_TRUE(leftovers(dir_).empty());
}

// A path to a file the process has open (/dev/fd/N, as /dev/stdout is) is written through that open file, here a
// pipe, not replaced by a new file.
TEST_F(IoTest, OutputToAnOpenFileDescriptorWritesThroughIt) {
  const std::string fd_dir = fs::exists("/dev/fd") ? "/dev/fd/" : "/proc/self/fd/";
  if (!fs::exists(fd_dir)) GTEST_SKIP() << "no /dev/fd or /proc/self/fd here";
  std::mt19937_64 rng(seed() + 25);
  const Labels labels = random_labels(1 + static_cast<Eigen::Index>(rng() % 1000), rng);  // fits a pipe's buffer
  gpuml::write_csv(path("expected.csv"), labels);
  int ends[2];
  ASSERT_EQ(::pipe(ends), 0) << std::strerror(errno);
  const std::string through = fd_dir + std::to_string(ends[1]);
  EXPECT_TRUE(gpuml::OutputFile(through).in_place());
  EXPECT_NO_THROW(gpuml::write_output(through, [&](const std::string& p) { gpuml::write_csv(p, labels); }));
  ::close(ends[1]);
  std::string received;
  char buf[1 << 12];
  for (ssize_t got; (got = ::read(ends[0], buf, sizeof buf)) > 0;) received.append(buf, static_cast<std::size_t>(got));
  ::close(ends[0]);
  EXPECT_TRUE(received == read_bytes(path("expected.csv"))) << received.size() << " bytes received";
}
