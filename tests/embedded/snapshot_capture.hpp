#pragma once
// Shared by the embedded-mode tests: a callback sink that keeps the Prometheus text of the last
// snapshot (GPU by GPU) and counts the writes.
#include <atomic>
#include <memory>
#include <string>

#include "ncclinsp/format/prometheus_text.hpp"
#include "ncclinsp/sinks/callback_sink.hpp"

namespace ncclinsp_test {

/// Captures the text of the last snapshot for GPU "GPU-0".
struct capture {
  std::shared_ptr<std::string> text = std::make_shared<std::string>();
  std::shared_ptr<std::atomic<int>> writes = std::make_shared<std::atomic<int>>(0);
  ncclinsp::callback_sink sink() {
    return ncclinsp::callback_sink([t = text, w = writes](const ncclinsp::snapshot& s) {
      std::string out;
      for (const auto& u : ncclinsp::format::gpu_uuids(s)) ncclinsp::format::write_prometheus(out, s, u);
      *t = out;
      ++*w;
    });
  }
};

}  // namespace ncclinsp_test
