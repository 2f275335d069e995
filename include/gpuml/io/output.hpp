// Output files written whole: the data goes to a temporary file beside the target, renamed over it once complete,
// so a reader never sees half a file and a failed write leaves what was there. Symbolic links are followed to the
// file they name (the link stays a link and its target gets the data); a target that exists and is not a regular
// file (a device such as /dev/null, a FIFO) cannot be replaced and is written directly.
#pragma once

#include <gpuml/core/error.hpp>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <random>
#include <string>
#include <system_error>
#include <utility>

namespace gpuml {

/// The file that a write to some path lands in.
struct OutputTarget {
  std::string path;       ///< the path with its symbolic links followed (itself when it is no link)
  bool in_place = false;  ///< it exists and is not a regular file (a device, a FIFO): written directly, not renamed
};

namespace detail::output {

/// Whether `link` is an entry of a /proc/<pid>/fd directory (where /dev/stdout and /dev/fd/N lead): it stands for a
/// file the process has open (a pipe, a terminal, the file a shell redirected to), reached by writing through it.
inline bool names_an_open_file(const std::filesystem::path& link) {
  std::error_code ec;
  const auto dir = std::filesystem::canonical(link.has_parent_path() ? link.parent_path() : ".", ec);
  return !ec && dir.filename() == "fd" && dir.parent_path().parent_path() == "/proc";
}

}  // namespace detail::output

/// Follows `path`'s symbolic links, a link to a link in turn and a relative one from its link's directory, to the
/// file a write should replace; a dangling link leads to the file it names, which the write creates. A file the
/// process has open (/dev/stdout, /dev/fd/N) is written in place. Throws invalid_input naming `path` when the file
/// is a directory or the links loop, gpuml::error when a link cannot be read.
inline OutputTarget resolve_output(const std::string& path) {
  namespace fs = std::filesystem;
  constexpr int kMaxLinks = 40;  // as Linux's path lookup: more means a loop
  fs::path p(path);
  for (int links = 0;; ++links) {
    std::error_code ec;
    const fs::file_status st = fs::symlink_status(p, ec);
    if (fs::is_symlink(st)) {
      if (detail::output::names_an_open_file(p)) return {p.string(), true};
      if (links == kMaxLinks)
        throw invalid_input("gpuml: cannot write '" + path + "': too many levels of symbolic links (a loop?)");
      const fs::path next = fs::read_symlink(p, ec);
      if (ec) throw error("gpuml: cannot write '" + path + "': cannot read the link " + p.string() + ": " + ec.message());
      // No lexical normalisation: "dir/.." must mean the parent of where dir leads, as the kernel reads it.
      p = next.is_absolute() ? next : p.parent_path() / next;
      continue;
    }
    if (fs::is_directory(st))
      throw invalid_input("gpuml: cannot write '" + path + "': " +
                          (p.string() == path ? std::string("it is a directory") : p.string() + " is a directory"));
    return {p.string(), fs::exists(st) && !fs::is_regular_file(st)};
  }
}

/// One output file being written: the writer writes the whole file to write_path(), then commit() puts it in place.
/// For a regular file or a new one, write_path() is a new temporary file beside the target (named after it, with the
/// extension of the path as given, so writers that choose the format by extension keep choosing it) and commit()
/// renames it over the target. For a device or a FIFO, write_path() is the path itself and commit() does nothing.
/// Destroyed without commit(), it removes its temporary file.
class OutputFile {
 public:
  /// Resolves `path` (resolve_output) and creates the temporary file; throws gpuml::error naming `path` when it
  /// cannot (a missing or read-only directory).
  explicit OutputFile(std::string path) : path_(std::move(path)), target_(resolve_output(path_)) {
    namespace fs = std::filesystem;
    if (target_.in_place) {
      write_path_ = path_;
      return;
    }
    const fs::path target(target_.path);
    const std::string extension = fs::path(path_).extension().string();
    std::random_device entropy;
    for (int attempt = 0;; ++attempt) {
      char tag[24];
      std::snprintf(tag, sizeof tag, "%08x%08x", entropy(), entropy());
      const fs::path candidate =
          target.parent_path() / ("." + target.filename().string() + ".part-" + tag + extension);
      // "x": created here or not at all, so two writers never share a temporary file.
      if (std::FILE* f = std::fopen(candidate.string().c_str(), "wbx")) {
        std::fclose(f);
        write_path_ = candidate.string();
        staged_ = true;
        return;
      }
      const int why = errno;
      if (why != EEXIST || attempt == 100) {
        const std::string dir = target.has_parent_path() ? target.parent_path().string() : std::string(".");
        throw error("gpuml: cannot write '" + path_ + "': cannot create a file in " + dir + ": " +
                    std::strerror(why));
      }
    }
  }

  OutputFile(OutputFile&& other) noexcept
      : path_(std::move(other.path_)),
        target_(std::move(other.target_)),
        write_path_(std::move(other.write_path_)),
        staged_(std::exchange(other.staged_, false)) {}
  OutputFile& operator=(OutputFile&&) = delete;
  OutputFile(const OutputFile&) = delete;
  OutputFile& operator=(const OutputFile&) = delete;
  ~OutputFile() { discard(); }

  /// The path as given.
  const std::string& path() const { return path_; }
  /// The file that receives the data (path() with its links followed).
  const std::string& target() const { return target_.path; }
  /// Whether the target is written directly (a device, a FIFO).
  bool in_place() const { return target_.in_place; }
  /// Where the writer writes.
  const std::string& write_path() const { return write_path_; }

  /// Renames the written temporary file over the target; throws gpuml::error naming path() when it cannot (and
  /// removes the temporary file).
  void commit() {
    if (!staged_) return;
    std::error_code ec;
    std::filesystem::rename(write_path_, target_.path, ec);
    if (ec) {
      discard();
      throw error("gpuml: cannot write '" + path_ + "': cannot move the finished file to " + target_.path + ": " +
                  ec.message());
    }
    staged_ = false;
  }

  /// Removes the temporary file, if any; the target keeps what it had.
  void discard() noexcept {
    if (!staged_) return;
    std::error_code ec;
    std::filesystem::remove(write_path_, ec);
    staged_ = false;
  }

 private:
  std::string path_;
  OutputTarget target_;
  std::string write_path_;
  bool staged_ = false;  // a temporary file exists and is this object's to rename or remove
};

/// Writes the file at `path` whole: write(p) writes all of it to p (see OutputFile for which p), and the result
/// replaces what `path` leads to only once write returned. Exceptions from write pass through, the target unchanged.
inline void write_output(const std::string& path, const std::function<void(const std::string&)>& write) {
  OutputFile out(path);
  write(out.write_path());
  out.commit();
}

}  // namespace gpuml
