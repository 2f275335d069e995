// Comma-separated text in and out. Reading: numbers separated by commas (or another delimiter), an optional header
// line (detected when none of the first non-blank line's fields is a number, or forced), a choice of columns, blank
// lines ignored, CRLF and a UTF-8 BOM tolerated.
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

/// Splits a line at `delimiter` into its fields (trimmed, quotes removed).
inline void split_fields(std::string_view line, char delimiter, std::vector<std::string_view>& fields) {
  fields.clear();
  std::size_t start = 0;
  for (;;) {
    const std::size_t at = line.find(delimiter, start);
    fields.push_back(trim(line.substr(start, at == std::string_view::npos ? std::string_view::npos : at - start)));
    if (at == std::string_view::npos) return;
    start = at + 1;
  }
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

/// How read_csv reads a file: the field delimiter, whether the first non-blank line is a header, and which
/// columns to keep (0-based positions, or names from the header; empty: all).
struct CsvOptions {
  enum class Header { detect, yes, no };
  char delimiter = ',';
  Header header = Header::detect;  ///< detect: a header when none of the first line's fields is a number
  std::vector<std::string> columns;
};

/// Reads a CSV file of numbers into a row-major Matrix<T> (T is float, double, int32_t or int64_t).
/// The first non-blank line is a header when options say so, or (detected) when none of its fields is a number: a
/// first row with one mistyped number is an error, not a header. Blank lines are ignored; rows of different
/// lengths or unparsable fields throw gpuml::invalid_input naming the line (1-based) and the field.
/// A file with no data rows gives a 0 x 0 matrix (0 x n after a header of n names).
template <class T>
Matrix<T> read_csv(const std::string& path, const CsvOptions& options = {}) {
  static_assert(detail::csv::is_csv_scalar<T>, "read_csv<T>: T must be float, double, int32_t or int64_t");
  const std::string text = detail::csv::slurp(path);
  std::string_view rest(text);
  if (rest.size() >= 3 && rest.substr(0, 3) == "\xEF\xBB\xBF") rest.remove_prefix(3);
  std::vector<T> values;
  std::vector<std::string_view> fields;
  std::vector<std::size_t> keep;  // the chosen columns' positions
  std::size_t width = 0, width_line = 0, line_no = 0;
  Eigen::Index rows = 0;
  bool first = true, header = false;
  const auto what = [](std::size_t line, std::size_t field) {
    return "line " + std::to_string(line) + ", field " + std::to_string(field + 1);
  };
  while (!rest.empty()) {
    const std::size_t nl = rest.find('\n');
    const std::string_view line = rest.substr(0, nl);
    rest.remove_prefix(nl == std::string_view::npos ? rest.size() : nl + 1);
    ++line_no;
    if (detail::csv::trim(line).empty()) continue;
    detail::csv::split_fields(line, options.delimiter, fields);
    if (first) {
      first = false;
      width = fields.size();
      width_line = line_no;
      header = options.header == CsvOptions::Header::yes;
      if (options.header == CsvOptions::Header::detect) {
        header = true;
        T v{};
        for (auto f : fields) header = header && !detail::csv::parse_field(f, v);
      }
      for (const std::string& c : options.columns) {
        std::size_t at = fields.size();
        if (header)
          for (std::size_t j = 0; j < fields.size(); ++j)
            if (fields[j] == c) at = j;
        if (at == fields.size() && !c.empty() && c.find_first_not_of("0123456789") == std::string::npos) at = std::stoul(c);
        if (at >= fields.size())
          detail::csv::fail(path, "--columns: no column '" + c + "' (the first line has " + std::to_string(fields.size()) +
                                      " fields" + (header ? ": " + std::string(line) : std::string()) + ")");
        keep.push_back(at);
      }
      if (keep.empty())
        for (std::size_t j = 0; j < fields.size(); ++j) keep.push_back(j);
      if (header) continue;
    } else if (fields.size() != width) {
      detail::csv::fail(path, "line " + std::to_string(line_no) + " has " + std::to_string(fields.size()) +
                                  " fields, but line " + std::to_string(width_line) + (header ? " (the header)" : "") +
                                  " has " + std::to_string(width));
    }
    for (std::size_t j : keep) {
      T v{};
      if (!detail::csv::parse_field(fields[j], v)) {
        std::string field(fields[j]);
        if (field.size() > 40) field = field.substr(0, 40) + "...";
        detail::csv::fail(path, what(line_no, j) + ": '" + field + "' is not " +
                                    (std::is_floating_point_v<T> ? "a number" : "an integer") +
                                    (rows == 0 && !header ? " (a header row has no numbers at all)" : ""));
      }
      values.push_back(v);
    }
    ++rows;
  }
  const auto cols = static_cast<Eigen::Index>(keep.size());
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
