// Matrix files by extension: ".npy" (NumPy) or ".csv" (comma-separated text); anything else is invalid_input.
// write_output (io/output.hpp) writes any of them whole, through symbolic links, or straight to a device or FIFO.
#pragma once

#include <gpuml/core/error.hpp>
#include <gpuml/core/matrix.hpp>
#include <gpuml/io/csv.hpp>
#include <gpuml/io/npy.hpp>
#include <gpuml/io/output.hpp>

#include <string>

namespace gpuml {

/// The kinds of file read_matrix and write_matrix understand.
enum class FileFormat { npy, csv };

/// The format named by path's extension (case-insensitive); throws invalid_input for any other extension.
inline FileFormat file_format(const std::string& path) {
  const std::size_t dot = path.find_last_of('.');
  const std::size_t slash = path.find_last_of("/\\");
  std::string ext;
  if (dot != std::string::npos && (slash == std::string::npos || dot > slash))
    for (char c : path.substr(dot + 1)) ext += (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c;
  if (ext == "npy") return FileFormat::npy;
  if (ext == "csv") return FileFormat::csv;
  throw invalid_input("gpuml: cannot tell the format of '" + path + "': expected a .npy or .csv extension");
}

/// Reads a .npy or .csv file into a row-major Matrix<T> (see read_npy and read_csv; `csv` applies to CSV files).
template <class T>
Matrix<T> read_matrix(const std::string& path, const CsvOptions& csv = {}) {
  return file_format(path) == FileFormat::npy ? read_npy<T>(path) : read_csv<T>(path, csv);
}

/// Reads labels from a .npy or .csv file.
inline Labels read_labels(const std::string& path) {
  return file_format(path) == FileFormat::npy ? read_npy_labels(path) : read_csv_labels(path);
}

/// Reads neighbour indices from a .npy or .csv file.
inline IndexMatrix read_indices(const std::string& path) {
  return file_format(path) == FileFormat::npy ? read_npy_indices(path) : read_csv_indices(path);
}

/// Writes m as .npy or .csv, chosen by path's extension.
template <class T>
void write_matrix(const std::string& path, const Matrix<T>& m) {
  if (file_format(path) == FileFormat::npy) write_npy(path, m);
  else write_csv(path, m);
}

/// Writes a vector (1-D in .npy, one value per line in .csv).
template <class T>
void write_matrix(const std::string& path, const Vector<T>& v) {
  if (file_format(path) == FileFormat::npy) write_npy(path, v);
  else write_csv(path, v);
}

inline void write_matrix(const std::string& path, const Labels& labels) {
  if (file_format(path) == FileFormat::npy) write_npy(path, labels);
  else write_csv(path, labels);
}

inline void write_matrix(const std::string& path, const IndexMatrix& indices) {
  if (file_format(path) == FileFormat::npy) write_npy(path, indices);
  else write_csv(path, indices);
}

}  // namespace gpuml
