#pragma once
/// This machine's host name, the one lookup behind the `node`/`hostname` labels and the JSON file
/// name. Cold path (one gethostname call).

#include <unistd.h>

#include <string>

namespace ncclinsp::detail {

/// gethostname(), or "unknown" when it fails or is empty.
inline std::string host_name() {
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) != 0 || !host[0]) return "unknown";
  return host;
}

}  // namespace ncclinsp::detail
