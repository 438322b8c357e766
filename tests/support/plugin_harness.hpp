#pragma once
// Shared by the tests that drive the plugin .so or read what it wrote: scratch folders, file
// reading, .prom sample lookup, and forked children (the plugin's state is process-wide and
// configured from the environment at its first init, so each scenario runs in its own process).
#include <dirent.h>
#include <dlfcn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <initializer_list>
#include <map>
#include <sstream>
#include <string>
#include <vector>

extern "C" int __lsan_do_recoverable_leak_check() __attribute__((weak));

namespace ncclinsp_test {

/// GPU globaltimer origin used by the scenarios (ns).
inline constexpr std::uint64_t t0 = 1'800'000'000'000'000'000ull;

/// A new empty folder /tmp/ncclinsp_<tag>_XXXXXX.
inline std::string fresh_dir(const std::string& tag = "test") {
  std::string t = "/tmp/ncclinsp_" + tag + "_XXXXXX";
  return ::mkdtemp(t.data());
}

/// Full paths of the entries of `dir` whose names end in `suffix`, sorted.
inline std::vector<std::string> files_in(const std::string& dir, const std::string& suffix = "") {
  std::vector<std::string> out;
  if (DIR* d = ::opendir(dir.c_str())) {
    while (auto* e = ::readdir(d)) {
      const std::string n = e->d_name;
      if (n == "." || n == "..") continue;
      if (n.size() >= suffix.size() && n.compare(n.size() - suffix.size(), suffix.size(), suffix) == 0)
        out.push_back(dir + "/" + n);
    }
    ::closedir(d);
  }
  std::sort(out.begin(), out.end());
  return out;
}

inline std::string slurp(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

/// Value of the first sample of `family` whose label text contains every needle; NaN if none.
inline double sample(const std::string& text, const std::string& family, std::initializer_list<std::string> needles) {
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(family + "{", 0) != 0) continue;
    bool ok = true;
    for (const auto& n : needles) ok = ok && line.find(n) != std::string::npos;
    if (ok) return std::stod(line.substr(line.rfind(' ') + 1));
  }
  return std::nan("");
}

/// Output (stdout) of a shell command.
inline std::string run_cmd(const std::string& cmd) {
  std::string out;
  if (FILE* p = ::popen(cmd.c_str(), "r")) {
    char buf[512];
    while (std::fgets(buf, sizeof buf, p)) out += buf;
    ::pclose(p);
  }
  return out;
}

/// "ok" if every line of `file` parses as JSON (strict UTF-8), else python's error.
inline std::string json_lines_check(const std::string& file) {
  const std::string py =
      "import json,sys\n"
      "n=0\n"
      "with open(sys.argv[1],'rb') as f:\n"
      "  data=f.read()\n"
      "assert data.endswith(b'\\n'), 'no final newline'\n"
      "for l in data.decode('utf-8').splitlines():\n"
      "  json.loads(l); n+=1\n"
      "print('ok', n)\n";
  const std::string script =
      "/tmp/ncclinsp_json_lines_check." + std::to_string(::getpid()) + ".py";  // one per test process
  std::ofstream(script) << py;
  const std::string out = run_cmd("python3 " + script + " '" + file + "' 2>&1");
  return out.rfind("ok", 0) == 0 ? "ok" : out;
}

/// Runs `body` in a forked child with `env` set; returns its exit code (or -signal), non-zero
/// where LeakSanitizer finds a leak (the check before exit sets 97, and LeakSanitizer's own check
/// at exit then reports it again and exits with 1). The child leaves through exit(), as a
/// training process does, so the plugin's exit flush runs.
inline int in_child(const std::map<std::string, std::string>& env, const std::function<int()>& body) {
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  if (pid == 0) {
    for (const auto& [k, v] : env) ::setenv(k.c_str(), v.c_str(), 1);
    int rc = 99;
    try {
      rc = body();
    } catch (...) {
      rc = 98;
    }
    if (rc == 0 && __lsan_do_recoverable_leak_check && __lsan_do_recoverable_leak_check() != 0) rc = 97;
    std::fflush(nullptr);
    std::exit(rc);
  }
  int st = 0;
  ::waitpid(pid, &st, 0);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -WTERMSIG(st);
}

/// The deterministic UUID that set_device(ordinal) gives the simulated driver.
inline std::string uuid_of(int ordinal) {
  char b[64];
  const int o = 0x10 * (ordinal + 1);
  std::snprintf(b, sizeof b, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", o, o + 1,
                o + 2, o + 3, o + 4, o + 5, o + 6, o + 7, o + 8, o + 9, o + 10, o + 11, o + 12, o + 13, o + 14, o + 15);
  return b;
}

#ifdef NCCLINSP_SIMCUDA_LIB
/// Makes this thread "current on GPU <ordinal>" in the simulated CUDA driver the plugin opens.
inline void set_device(int ordinal) {
  static void* lib = ::dlopen(NCCLINSP_SIMCUDA_LIB, RTLD_NOW | RTLD_GLOBAL);
  using fn_t = void (*)(int, const unsigned char*);
  static auto fn = reinterpret_cast<fn_t>(::dlsym(lib, "ncclinsp_simcuda_set_device"));
  unsigned char uuid[16];
  for (int i = 0; i < 16; ++i) uuid[i] = static_cast<unsigned char>(0x10 * (ordinal + 1) + i);
  fn(ordinal, uuid);
}
#endif

}  // namespace ncclinsp_test
