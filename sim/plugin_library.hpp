#pragma once
/// `plugin_library`: dlopens a profiler plugin `.so` and finds its newest exported table
/// (`ncclProfiler_v<abi::newest>` down to `v<abi::oldest>`, NCCL's probing order), or exactly one version.
/// Thread-safety: not thread-safe to open/close; the loaded table may be used from any thread.

#include <ncclinsp/abi/versions.hpp>

#include <atomic>
#include <string>
#include <utility>

#include <dlfcn.h>

namespace ncclinsp::sim {

using abi::version;  // per-version descriptor and table types (ncclinsp/abi/versions.hpp)

// ---- plugin_library ----------------------------------------------------------------------------------

/// A dlopen'ed profiler plugin. Move-only; dlcloses on destruction (as NCCL does when its refcount reaches 0).
class plugin_library {
 public:
  plugin_library() = default;
  /// force_abi: 0 = newest exported (abi::newest → abi::oldest), one of abi::versions = exactly that symbol.
  explicit plugin_library(const std::string& path, int force_abi = 0) { open(path, force_abi); }
  plugin_library(const plugin_library&) = delete;
  plugin_library& operator=(const plugin_library&) = delete;
  plugin_library(plugin_library&& o) noexcept { *this = std::move(o); }
  plugin_library& operator=(plugin_library&& o) noexcept {
    if (this != &o) {
      close();
      handle_ = std::exchange(o.handle_, nullptr);
      table_ = std::exchange(o.table_, nullptr);
      abi_ = std::exchange(o.abi_, 0);
      error_ = std::move(o.error_);
      path_ = std::move(o.path_);
    }
    return *this;
  }
  ~plugin_library() { close(); }

  bool open(const std::string& path, int force_abi = 0) {
    close();
    path_ = path;
    error_.clear();
    if (force_abi != 0 && !abi::is_version(force_abi)) {
      error_ = "unsupported profiler ABI version " + std::to_string(force_abi) + " (want 0 or " +
               std::to_string(abi::oldest) + ".." + std::to_string(abi::newest) + ")";
      return false;
    }
    handle_ = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!handle_) {
      const char* e = ::dlerror();
      error_ = "dlopen(" + path + ") failed: " + (e ? e : "unknown error");
      return false;
    }
    for (auto it = abi::versions.rbegin(); it != abi::versions.rend(); ++it) {  // newest first, as NCCL
      const int v = *it;
      if (force_abi != 0 && v != force_abi) continue;
      const std::string sym = "ncclProfiler_v" + std::to_string(v);
      ::dlerror();
      if (void* p = ::dlsym(handle_, sym.c_str())) {
        table_ = p;
        abi_ = v;
        return true;
      }
    }
    if (force_abi) {
      error_ = path + " does not export ncclProfiler_v" + std::to_string(force_abi);
    } else {
      error_ = path + " exports none of ncclProfiler";  // "ncclProfiler_v<newest>, ..., _v<oldest>"
      for (auto it = abi::versions.rbegin(); it != abi::versions.rend(); ++it)
        error_ += (it == abi::versions.rbegin() ? "_v" : ", _v") + std::to_string(*it);
    }
    ::dlclose(handle_);
    handle_ = nullptr;
    return false;
  }

  void close() noexcept {
    if (handle_) ::dlclose(handle_);
    handle_ = nullptr;
    table_ = nullptr;
    abi_ = 0;
  }

  bool ok() const noexcept { return table_ != nullptr; }
  /// NCCL 2.30.3+ unloads the library when an init fails (comm_driver marks it): no call reaches it after.
  void mark_unloaded() const noexcept { unloaded_.store(true, std::memory_order_relaxed); }
  bool unloaded() const noexcept { return unloaded_.load(std::memory_order_relaxed); }
  explicit operator bool() const noexcept { return ok(); }
  const std::string& error() const noexcept { return error_; }
  const std::string& path() const noexcept { return path_; }
  int abi() const noexcept { return abi_; }
  /// The table's `name` field ("" when not loaded or NULL).
  const char* name() const noexcept {
    if (!table_) return "";
    const char* n = *static_cast<const char* const*>(table_);  // `name` is the first member of every version
    return n ? n : "";
  }
  void* dl_handle() const noexcept { return handle_; }
  const void* raw_table() const noexcept { return table_; }
  template <int V>
  const typename version<V>::table* table() const noexcept {
    return abi_ == V ? static_cast<const typename version<V>::table*>(table_) : nullptr;
  }

 private:
  void* handle_ = nullptr;
  const void* table_ = nullptr;
  int abi_ = 0;
  std::string error_;
  std::string path_;
  mutable std::atomic<bool> unloaded_{false};
};
}  // namespace ncclinsp::sim
