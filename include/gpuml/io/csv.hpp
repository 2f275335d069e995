// Comma-separated text in and out. Reading: numbers separated by commas, an optional header line (taken as such when
// the first non-blank line does not parse as numbers), blank lines ignored, CRLF and a UTF-8 BOM tolerated.
// Writing: the shortest text that reads back to the same value (std::to_chars), so files round-trip exactly.
#pragma once

#include <gpuml/core/error.hpp>
#include <gpuml/core/matrix.hpp>

#include <charconv>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>
#include <system_error>
#include <type_traits>
#include <vector>

namespace gpuml {

namespace detail::csv {

struct FileCloser {
  void operator()(std::FILE* f) const noexcept {
    if (f) std::fclose(f);
  }
};
using File = std::unique_ptr<std::FILE, FileCloser>;

template <class T>
inline constexpr bool is_csv_scalar = std::is_same_v<T, float> || std::is_same_v<T, double> ||
                                      std::is_same_v<T, std::int32_t> || std::is_same_v<T, std::int64_t>;

[[noreturn]] inline void fail(const std::string& path, const std::string& problem) {
  throw invalid_input("gpuml: cannot read CSV file '" + path + "': " + problem);
}

inline std::string slurp(const std::string& path) {
  File f(std::fopen(path.c_str(), "rb"));
  if (!f) fail(path, "file not found or not readable");
  std::string text;
  char buf[1 << 16];
  std::size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f.get())) > 0) text.append(buf, n);
  if (std::ferror(f.get())) fail(path, "I/O error while reading");
  return text;
}

inline std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  if (s.size() >= 2 && s.front() == '"' && s.back() == '"') s = s.substr(1, s.size() - 2);
  return s;
}

/// Parses one field; false when it is not a whole number of type T.
template <class T>
bool parse_field(std::string_view s, T& out) {
  s = trim(s);
  if (!s.empty() && s.front() == '+') s.remove_prefix(1);  // from_chars rejects a leading '+'
  if (s.empty()) return false;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  if (ec == std::errc::result_out_of_range && std::is_floating_point_v<T>) {
    // Overflow to +-inf or underflow to 0, as strtod does; from_chars leaves out unchanged.
    const std::string copy(s);
    if constexpr (std::is_same_v<T, float>) out = std::strtof(copy.c_str(), nullptr);
    else out = static_cast<T>(std::strtod(copy.c_str(), nullptr));
    return true;
  }
  return ec == std::errc() && end == s.data() + s.size();
}

/// Splits a line into fields and parses them; on failure returns the index of the bad field.
template <class T>
bool parse_line(std::string_view line, std::vector<T>& row, std::size_t& bad_field) {
  row.clear();
  std::size_t start = 0;
  for (;;) {
    const std::size_t comma = line.find(',', start);
    const std::string_view field = line.substr(start, comma == std::string_view::npos ? std::string_view::npos : comma - start);
    T v{};
    if (!parse_field(field, v)) {
      bad_field = row.size();
      return false;
    }
    row.push_back(v);
    if (comma == std::string_view::npos) return true;
    start = comma + 1;
  }
}

inline std::size_t count_fields(std::string_view line) {
  std::size_t n = 1;
  for (char c : line) n += c == ',';
  return n;
}

template <class T>
void append_value(std::string& out, T v) {
  char buf[64];
  const auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);  // shortest round-trip representation
  (void)ec;
  out.append(buf, end);
}

inline void write_text(const std::string& path, const std::string& text) {
  File f(std::fopen(path.c_str(), "wb"));
  if (!f) throw invalid_input("gpuml: cannot write CSV file '" + path + "': cannot open it for writing");
  bool ok = std::fwrite(text.data(), 1, text.size(), f.get()) == text.size();
  ok = (std::fclose(f.release()) == 0) && ok;
  if (!ok) throw error("gpuml: writing CSV file '" + path + "' failed (disk full or I/O error)");
}

template <class Derived>
void write_rows(const std::string& path, const Eigen::DenseBase<Derived>& m) {
  std::string out;
  out.reserve(static_cast<std::size_t>(m.size()) * 12 + static_cast<std::size_t>(m.rows()));
  for (Eigen::Index i = 0; i < m.rows(); ++i) {
    for (Eigen::Index j = 0; j < m.cols(); ++j) {
      if (j) out += ',';
      append_value(out, m(i, j));
    }
    out += '\n';
  }
  write_text(path, out);
}

}  // namespace detail::csv

/// Reads a CSV file of numbers into a row-major Matrix<T> (T is float, double, int32_t or int64_t).
/// The first non-blank line is skipped as a header when it does not parse as numbers; blank lines are ignored;
/// rows of different lengths or unparsable fields throw gpuml::invalid_input naming the line (1-based).
/// A file with no data rows gives a 0 x 0 matrix (0 x n after a header of n names).
template <class T>
Matrix<T> read_csv(const std::string& path) {
  static_assert(detail::csv::is_csv_scalar<T>, "read_csv<T>: T must be float, double, int32_t or int64_t");
  const std::string text = detail::csv::slurp(path);
  std::string_view rest(text);
  if (rest.size() >= 3 && rest.substr(0, 3) == "\xEF\xBB\xBF") rest.remove_prefix(3);

  std::vector<T> values;
  std::vector<T> row;
  Eigen::Index cols = -1, rows = 0;
  std::size_t line_no = 0, cols_line = 0;
  bool first = true, header = false;
  while (!rest.empty()) {
    const std::size_t nl = rest.find('\n');
    const std::string_view line = rest.substr(0, nl);
    rest.remove_prefix(nl == std::string_view::npos ? rest.size() : nl + 1);
    ++line_no;
    if (detail::csv::trim(line).empty()) continue;
    std::size_t bad = 0;
    const bool ok = detail::csv::parse_line(line, row, bad);
    if (first) {
      first = false;
      if (!ok) {  // header line
        cols = static_cast<Eigen::Index>(detail::csv::count_fields(line));
        cols_line = line_no;
        header = true;
        continue;
      }
    }
    if (!ok) {
      std::size_t start = 0;  // recover the offending field's text for the message
      for (std::size_t k = 0; k < bad; ++k) start = line.find(',', start) + 1;
      const std::size_t comma = line.find(',', start);
      std::string field(
          detail::csv::trim(line.substr(start, comma == std::string_view::npos ? std::string_view::npos : comma - start)));
      if (field.size() > 40) field = field.substr(0, 40) + "...";
      detail::csv::fail(path, "line " + std::to_string(line_no) + ", field " + std::to_string(bad + 1) + ": '" + field +
                                  "' is not " + (std::is_floating_point_v<T> ? "a number" : "an integer"));
    }
    const auto n = static_cast<Eigen::Index>(row.size());
    if (cols < 0) {
      cols = n;
      cols_line = line_no;
    } else if (n != cols) {
      detail::csv::fail(path, "line " + std::to_string(line_no) + " has " + std::to_string(n) + " fields, but line " +
                                  std::to_string(cols_line) + (header ? " (the header)" : "") + " has " +
                                  std::to_string(cols));
    }
    values.insert(values.end(), row.begin(), row.end());
    ++rows;
  }
  if (cols < 0) cols = 0;
  Matrix<T> m(rows, cols);
  if (rows > 0) m = Eigen::Map<const Matrix<T>>(values.data(), rows, cols);
  return m;
}

/// Reads labels (one per line, or a single row) as int32.
inline Labels read_csv_labels(const std::string& path) {
  Matrix<std::int32_t> m = read_csv<std::int32_t>(path);
  if (m.cols() != 1 && m.rows() != 1)
    detail::csv::fail(path, "expected a vector of labels, got shape " + std::to_string(m.rows()) + " x " +
                                std::to_string(m.cols()));
  return Eigen::Map<const Labels>(m.data(), m.size());
}

/// Reads neighbour indices as int64.
inline IndexMatrix read_csv_indices(const std::string& path) { return read_csv<std::int64_t>(path); }

/// Writes m, one row per line, values separated by commas, no header.
template <class T>
void write_csv(const std::string& path, const Matrix<T>& m) {
  static_assert(detail::csv::is_csv_scalar<T>, "write_csv: T must be float, double, int32_t or int64_t");
  detail::csv::write_rows(path, m);
}

/// Writes a vector one value per line.
template <class T>
void write_csv(const std::string& path, const Vector<T>& v) {
  static_assert(detail::csv::is_csv_scalar<T>, "write_csv: T must be float, double, int32_t or int64_t");
  detail::csv::write_rows(path, v);
}

/// Writes labels one per line.
inline void write_csv(const std::string& path, const Labels& labels) { detail::csv::write_rows(path, labels); }

/// Writes neighbour indices, one query per line.
inline void write_csv(const std::string& path, const IndexMatrix& indices) { detail::csv::write_rows(path, indices); }

}  // namespace gpuml
