// NumPy .npy files in and out: format versions 1.0, 2.0 and 3.0; little-endian float32, float64, int32 and int64;
// 1-D arrays (read as an n x 1 column) and 2-D arrays in C order (Fortran order is read and transposed into place).
//
// Format: https://numpy.org/doc/stable/reference/generated/numpy.lib.format.html
//   "\x93NUMPY" major minor, header length (uint16 LE for 1.0, uint32 LE for 2.0/3.0), then a Python dict literal
//   {'descr': '<f8', 'fortran_order': False, 'shape': (3, 4), } padded with spaces and ended by '\n' so that the data
//   starts at a multiple of 64 bytes; then the raw array data.
#pragma once

#include <gpuml/core/error.hpp>
#include <gpuml/core/matrix.hpp>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

namespace gpuml {

/// Element type of a .npy file gpuml can read.
enum class NpyDtype { f4, f8, i4, i8 };

/// What the header of a .npy file says. A 1-D array of n elements has rows = n, cols = 1, ndim = 1.
struct NpyHeader {
  NpyDtype dtype = NpyDtype::f8;
  std::int64_t rows = 0;
  std::int64_t cols = 0;
  bool fortran_order = false;
  int ndim = 2;                    ///< 1 or 2
  int major_version = 1;           ///< 1, 2 or 3
  std::uint64_t data_offset = 0;   ///< byte offset of the array data in the file
};

/// The descr string NumPy uses for a dtype ("<f4", ...).
inline const char* npy_descr(NpyDtype d) noexcept {
  switch (d) {
    case NpyDtype::f4: return "<f4";
    case NpyDtype::f8: return "<f8";
    case NpyDtype::i4: return "<i4";
    case NpyDtype::i8: return "<i8";
  }
  return "?";
}

inline std::size_t npy_itemsize(NpyDtype d) noexcept {
  return (d == NpyDtype::f4 || d == NpyDtype::i4) ? 4 : 8;
}

namespace detail::npy {

struct FileCloser {
  void operator()(std::FILE* f) const noexcept {
    if (f) std::fclose(f);
  }
};
using File = std::unique_ptr<std::FILE, FileCloser>;

[[noreturn]] inline void fail(const std::string& path, const std::string& problem) {
  throw invalid_input("gpuml: cannot read .npy file '" + path + "': " + problem);
}

inline File open_read(const std::string& path) {
  File f(std::fopen(path.c_str(), "rb"));
  if (!f) fail(path, "file not found or not readable");
  return f;
}

template <class T>
constexpr NpyDtype dtype_of() {
  if constexpr (std::is_same_v<T, float>) return NpyDtype::f4;
  else if constexpr (std::is_same_v<T, double>) return NpyDtype::f8;
  else if constexpr (std::is_same_v<T, std::int32_t>) return NpyDtype::i4;
  else {
    static_assert(std::is_same_v<T, std::int64_t>, "gpuml .npy supports float, double, int32 and int64");
    return NpyDtype::i8;
  }
}

template <class T>
inline constexpr bool is_npy_scalar = std::is_same_v<T, float> || std::is_same_v<T, double> ||
                                      std::is_same_v<T, std::int32_t> || std::is_same_v<T, std::int64_t>;

/// Reverses the bytes of each item in place (only used on big-endian hosts: files are always little-endian).
inline void swap_bytes(void* data, std::size_t count, std::size_t itemsize) {
  auto* p = static_cast<unsigned char*>(data);
  for (std::size_t i = 0; i < count; ++i, p += itemsize)
    for (std::size_t a = 0, b = itemsize - 1; a < b; ++a, --b) std::swap(p[a], p[b]);
}

/// A tiny parser for the Python dict literal of a .npy header.
class HeaderParser {
 public:
  HeaderParser(std::string_view text, const std::string& path) : s_(text), path_(path) {}

  NpyHeader parse() {
    NpyHeader h;
    bool have_descr = false, have_order = false, have_shape = false;
    std::vector<std::int64_t> shape;
    skip_ws();
    expect('{');
    for (;;) {
      skip_ws();
      if (peek() == '}') {
        ++i_;
        break;
      }
      const std::string key = string_literal();
      skip_ws();
      expect(':');
      skip_ws();
      if (key == "descr") {
        if (peek() == '[') bad("unsupported dtype: structured arrays are not supported");
        h.dtype = dtype(string_literal());
        have_descr = true;
      } else if (key == "fortran_order") {
        h.fortran_order = boolean();
        have_order = true;
      } else if (key == "shape") {
        shape = tuple();
        have_shape = true;
      } else {
        bad("unexpected key '" + key + "' in header");
      }
      skip_ws();
      if (peek() == ',') {
        ++i_;
        continue;
      }
      skip_ws();
      expect('}');
      break;
    }
    if (!have_descr) bad("header has no 'descr'");
    if (!have_order) bad("header has no 'fortran_order'");
    if (!have_shape) bad("header has no 'shape'");
    if (shape.size() == 1) {
      h.ndim = 1;
      h.rows = shape[0];
      h.cols = 1;
    } else if (shape.size() == 2) {
      h.ndim = 2;
      h.rows = shape[0];
      h.cols = shape[1];
    } else {
      bad("array has " + std::to_string(shape.size()) + " dimensions; only 1-D and 2-D arrays are supported");
    }
    return h;
  }

 private:
  [[noreturn]] void bad(const std::string& what) { fail(path_, what); }
  char peek() const { return i_ < s_.size() ? s_[i_] : '\0'; }
  void skip_ws() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\n' || s_[i_] == '\r')) ++i_;
  }
  void expect(char c) {
    if (peek() != c) bad(std::string("malformed header (expected '") + c + "' at offset " + std::to_string(i_) + ")");
    ++i_;
  }
  std::string string_literal() {
    const char q = peek();
    if (q != '\'' && q != '"') bad("malformed header (expected a quoted string at offset " + std::to_string(i_) + ")");
    ++i_;
    const std::size_t start = i_;
    while (i_ < s_.size() && s_[i_] != q) ++i_;
    if (i_ >= s_.size()) bad("malformed header (unterminated string)");
    return std::string(s_.substr(start, i_++ - start));
  }
  bool boolean() {
    if (s_.substr(i_, 4) == "True") {
      i_ += 4;
      return true;
    }
    if (s_.substr(i_, 5) == "False") {
      i_ += 5;
      return false;
    }
    bad("malformed header ('fortran_order' is neither True nor False)");
  }
  std::vector<std::int64_t> tuple() {
    std::vector<std::int64_t> dims;
    expect('(');
    for (;;) {
      skip_ws();
      if (peek() == ')') {
        ++i_;
        return dims;
      }
      if (peek() < '0' || peek() > '9') bad("malformed header (bad 'shape')");
      std::int64_t v = 0;
      while (peek() >= '0' && peek() <= '9') {
        if (v > (std::numeric_limits<std::int64_t>::max() - 9) / 10) bad("shape is too large");
        v = v * 10 + (s_[i_++] - '0');
      }
      if (peek() == 'L') ++i_;  // Python 2 longs
      dims.push_back(v);
      skip_ws();
      if (peek() == ',') ++i_;
      else if (peek() != ')') bad("malformed header (bad 'shape')");
    }
  }
  NpyDtype dtype(const std::string& d) {
    if (d == "<f4") return NpyDtype::f4;
    if (d == "<f8") return NpyDtype::f8;
    if (d == "<i4") return NpyDtype::i4;
    if (d == "<i8") return NpyDtype::i8;
    if (!d.empty() && d[0] == '>')
      bad("big-endian data ('" + d + "') is not supported; save it little-endian, e.g. arr.astype('<" + d.substr(1) +
          "')");
    bad("unsupported dtype '" + d + "' (supported: '<f4', '<f8', '<i4', '<i8')");
  }

  std::string_view s_;
  const std::string& path_;
  std::size_t i_ = 0;
};

inline NpyHeader read_header(std::FILE* f, const std::string& path) {
  unsigned char pre[10];
  const std::size_t got = std::fread(pre, 1, 8, f);
  static const unsigned char magic[6] = {0x93, 'N', 'U', 'M', 'P', 'Y'};
  if (got < 6 || std::memcmp(pre, magic, 6) != 0) fail(path, "bad magic (not a NumPy .npy file)");
  if (got < 8) fail(path, "truncated header");
  const int major = pre[6];
  if (major < 1 || major > 3)
    fail(path, "unsupported .npy format version " + std::to_string(major) + "." + std::to_string(pre[7]));
  std::uint64_t header_len = 0;
  std::uint64_t prefix = 0;
  if (major == 1) {
    if (std::fread(pre + 8, 1, 2, f) != 2) fail(path, "truncated header");
    header_len = pre[8] | (std::uint64_t(pre[9]) << 8);
    prefix = 10;
  } else {
    unsigned char b[4];
    if (std::fread(b, 1, 4, f) != 4) fail(path, "truncated header");
    header_len = b[0] | (std::uint64_t(b[1]) << 8) | (std::uint64_t(b[2]) << 16) | (std::uint64_t(b[3]) << 24);
    prefix = 12;
  }
  if (header_len > (std::uint64_t(1) << 26)) fail(path, "header length " + std::to_string(header_len) + " is implausible");
  std::string text(header_len, '\0');
  if (header_len && std::fread(text.data(), 1, header_len, f) != header_len) fail(path, "truncated header");
  NpyHeader h = HeaderParser(text, path).parse();
  h.major_version = major;
  h.data_offset = prefix + header_len;
  return h;
}

/// Element count and byte count of the data, with overflow checks.
inline std::uint64_t data_bytes(const NpyHeader& h, const std::string& path) {
  const auto r = static_cast<std::uint64_t>(h.rows), c = static_cast<std::uint64_t>(h.cols);
  if (c != 0 && r > std::numeric_limits<std::uint64_t>::max() / 8 / c) fail(path, "shape is too large");
  return r * c * npy_itemsize(h.dtype);
}

/// Fails early, before allocating, when the file is shorter than the header's shape needs.
inline void check_size(std::FILE* f, const NpyHeader& h, const std::string& path) {
  const std::uint64_t need = data_bytes(h, path);
  const long here = std::ftell(f);
  if (here < 0 || std::fseek(f, 0, SEEK_END) != 0) return;  // not seekable: the reads will notice
  const long end = std::ftell(f);
  if (std::fseek(f, here, SEEK_SET) != 0) fail(path, "cannot seek back to the array data");
  if (end >= here && static_cast<std::uint64_t>(end - here) < need)
    fail(path, "truncated data (shape (" + std::to_string(h.rows) + (h.ndim == 2 ? ", " + std::to_string(h.cols) : ",") +
                   ") of " + npy_descr(h.dtype) + " needs " + std::to_string(need) + " bytes, the file has " +
                   std::to_string(end - here) + ")");
}

template <class Dst, class Src>
void convert(const Src* src, Dst* dst, std::size_t n, const std::string& path) {
  if constexpr (std::is_integral_v<Dst> && std::is_floating_point_v<Src>) {
    for (std::size_t i = 0; i < n; ++i) {
      const Src v = src[i];
      // Ranges: only exactly integral values that fit are accepted.
      if (!(v == v) || v < static_cast<Src>(std::numeric_limits<Dst>::min()) ||
          v >= -static_cast<Src>(std::numeric_limits<Dst>::min()) || static_cast<Src>(static_cast<Dst>(v)) != v)
        fail(path, "value " + std::to_string(v) + " at element " + std::to_string(i) +
                       " is not an integer representable as int" + std::to_string(8 * sizeof(Dst)));
      dst[i] = static_cast<Dst>(v);
    }
  } else if constexpr (std::is_integral_v<Dst> && std::is_integral_v<Src> && sizeof(Dst) < sizeof(Src)) {
    for (std::size_t i = 0; i < n; ++i) {
      const Src v = src[i];
      if (v < std::numeric_limits<Dst>::min() || v > std::numeric_limits<Dst>::max())
        fail(path, "value " + std::to_string(v) + " at element " + std::to_string(i) + " does not fit in int" +
                       std::to_string(8 * sizeof(Dst)));
      dst[i] = static_cast<Dst>(v);
    }
  } else {
    for (std::size_t i = 0; i < n; ++i) dst[i] = static_cast<Dst>(src[i]);
  }
}

/// Reads `count` items of type Src from f in chunks and converts them into dst.
template <class Dst, class Src>
void read_convert(std::FILE* f, Dst* dst, std::size_t count, const std::string& path) {
  constexpr std::size_t chunk = std::size_t(1) << 16;
  std::vector<Src> buf(std::min(count, chunk));
  for (std::size_t done = 0; done < count;) {
    const std::size_t n = std::min(chunk, count - done);
    if (std::fread(buf.data(), sizeof(Src), n, f) != n)
      fail(path, "truncated data (expected " + std::to_string(count * sizeof(Src)) + " bytes of array data)");
    if constexpr (std::endian::native == std::endian::big) swap_bytes(buf.data(), n, sizeof(Src));
    convert<Dst, Src>(buf.data(), dst + done, n, path);
    done += n;
  }
}

template <class T>
void read_data(std::FILE* f, const NpyHeader& h, T* dst, std::size_t count, const std::string& path) {
  if (dtype_of<T>() == h.dtype) {
    if (count && std::fread(dst, sizeof(T), count, f) != count)
      fail(path, "truncated data (expected " + std::to_string(count * sizeof(T)) + " bytes of array data)");
    if constexpr (std::endian::native == std::endian::big) swap_bytes(dst, count, sizeof(T));
    return;
  }
  switch (h.dtype) {
    case NpyDtype::f4: return read_convert<T, float>(f, dst, count, path);
    case NpyDtype::f8: return read_convert<T, double>(f, dst, count, path);
    case NpyDtype::i4: return read_convert<T, std::int32_t>(f, dst, count, path);
    case NpyDtype::i8: return read_convert<T, std::int64_t>(f, dst, count, path);
  }
}

/// Writes a header for `shape` (1 or 2 dims) and then the raw little-endian data.
inline void write_file(const std::string& path, NpyDtype dtype, const std::int64_t* shape, int ndim, const void* data,
                       std::size_t count) {
  std::string dict = std::string("{'descr': '") + npy_descr(dtype) + "', 'fortran_order': False, 'shape': (";
  dict += std::to_string(shape[0]);
  dict += ndim == 1 ? "," : ", " + std::to_string(shape[1]);
  dict += "), }";
  // Version 1.0 when the padded header fits a uint16 length, else 2.0. The data starts on a 64-byte boundary.
  std::size_t prefix = 10;
  std::size_t total = ((prefix + dict.size() + 1 + 63) / 64) * 64;
  int major = 1;
  if (total - prefix > 65535) {
    prefix = 12;
    total = ((prefix + dict.size() + 1 + 63) / 64) * 64;
    major = 2;
  }
  const std::size_t header_len = total - prefix;
  std::string out;
  out.reserve(total);
  out += "\x93NUMPY";
  out += static_cast<char>(major);
  out += '\0';
  for (std::size_t b = 0; b < (major == 1 ? 2u : 4u); ++b) out += static_cast<char>((header_len >> (8 * b)) & 0xff);
  out += dict;
  out.append(header_len - dict.size() - 1, ' ');
  out += '\n';

  File f(std::fopen(path.c_str(), "wb"));
  if (!f) throw invalid_input("gpuml: cannot write .npy file '" + path + "': cannot open it for writing");
  bool ok = std::fwrite(out.data(), 1, out.size(), f.get()) == out.size();
  const std::size_t itemsize = npy_itemsize(dtype);
  if constexpr (std::endian::native == std::endian::big) {
    std::vector<unsigned char> buf(static_cast<const unsigned char*>(data),
                                   static_cast<const unsigned char*>(data) + count * itemsize);
    swap_bytes(buf.data(), count, itemsize);
    ok = ok && (count == 0 || std::fwrite(buf.data(), itemsize, count, f.get()) == count);
  } else {
    ok = ok && (count == 0 || std::fwrite(data, itemsize, count, f.get()) == count);
  }
  ok = (std::fclose(f.release()) == 0) && ok;
  if (!ok) throw error("gpuml: writing .npy file '" + path + "' failed (disk full or I/O error)");
}

}  // namespace detail::npy

/// Reads only the header of a .npy file. Throws gpuml::invalid_input naming the file and the problem.
inline NpyHeader read_npy_header(const std::string& path) {
  auto f = detail::npy::open_read(path);
  return detail::npy::read_header(f.get(), path);
}

/// Reads a 1-D or 2-D .npy array of '<f4', '<f8', '<i4' or '<i8' into a row-major Matrix<T>, converting the values
/// to T (T is float, double, int32_t or int64_t; converting floats to integers requires integral values).
/// A 1-D array of n elements becomes an n x 1 column; a Fortran-order array is transposed into row-major order.
template <class T>
Matrix<T> read_npy(const std::string& path) {
  static_assert(detail::npy::is_npy_scalar<T>, "read_npy<T>: T must be float, double, int32_t or int64_t");
  auto f = detail::npy::open_read(path);
  const NpyHeader h = detail::npy::read_header(f.get(), path);
  detail::npy::check_size(f.get(), h, path);
  const auto count = static_cast<std::size_t>(h.rows * h.cols);
  if (!h.fortran_order || h.ndim == 1 || h.rows <= 1 || h.cols <= 1) {
    // C order, or a shape where Fortran and C order coincide.
    Matrix<T> m(h.rows, h.cols);
    detail::npy::read_data<T>(f.get(), h, m.data(), count, path);
    return m;
  }
  Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::ColMajor> cm(h.rows, h.cols);
  detail::npy::read_data<T>(f.get(), h, cm.data(), count, path);
  return Matrix<T>(cm);
}

/// Reads a .npy vector of labels (1-D, or 2-D with one column or one row) as int32.
inline Labels read_npy_labels(const std::string& path) {
  Matrix<std::int32_t> m = read_npy<std::int32_t>(path);
  if (m.cols() != 1 && m.rows() != 1)
    detail::npy::fail(path, "expected a vector of labels, got shape " + std::to_string(m.rows()) + " x " +
                                std::to_string(m.cols()));
  return Eigen::Map<const Labels>(m.data(), m.size());
}

/// Reads a 2-D .npy array of neighbour indices as int64.
inline IndexMatrix read_npy_indices(const std::string& path) { return read_npy<std::int64_t>(path); }

/// Writes m as a 2-D C-order .npy array ('<f4' for float, '<f8' for double).
template <class T>
void write_npy(const std::string& path, const Matrix<T>& m) {
  static_assert(detail::npy::is_npy_scalar<T>, "write_npy: T must be float, double, int32_t or int64_t");
  const std::int64_t shape[2] = {m.rows(), m.cols()};
  detail::npy::write_file(path, detail::npy::dtype_of<T>(), shape, 2, m.data(), static_cast<std::size_t>(m.size()));
}

/// Writes v as a 1-D .npy array.
template <class T>
void write_npy(const std::string& path, const Vector<T>& v) {
  static_assert(detail::npy::is_npy_scalar<T>, "write_npy: T must be float, double, int32_t or int64_t");
  const std::int64_t shape[1] = {v.size()};
  detail::npy::write_file(path, detail::npy::dtype_of<T>(), shape, 1, v.data(), static_cast<std::size_t>(v.size()));
}

/// Writes labels as a 1-D '<i4' array (scikit-learn's labels_).
inline void write_npy(const std::string& path, const Labels& labels) { write_npy<std::int32_t>(path, labels); }

/// Writes neighbour indices as a 2-D '<i8' array (scikit-learn's kneighbors indices).
inline void write_npy(const std::string& path, const IndexMatrix& indices) {
  write_npy<std::int64_t>(path, indices);
}

}  // namespace gpuml
