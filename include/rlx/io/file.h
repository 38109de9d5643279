// Reading a whole file with errors that name it: missing, a directory, unreadable.
#pragma once

#include <string>

namespace rlx {

/// The bytes of the regular file at `path` (an empty file gives ""). Throws rlx::Error
/// "cannot open 'P': <reason>" when it does not exist or cannot be opened, "'P' is a
/// directory, expected a file" for a directory, "'P' is not a regular file" for a socket,
/// device, ..., and "cannot read 'P': <reason>" when reading fails.
std::string read_file(const std::string& path);

}  // namespace rlx
