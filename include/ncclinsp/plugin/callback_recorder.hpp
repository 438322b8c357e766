#pragma once
/// The callback recorder (NCCLINSP_CAPTURE=DIR): every profiler callback NCCL makes into the
/// plugin (init, startEvent with its descriptor, stopEvent, recordEventState with its argument,
/// finalize), with its thread, host time and GPU timer values, written as text
/// (abi/callback_text.hpp) to DIR/ncclinsp-<host>-<pid>.trace, for a bug report or a test
/// (ncclinsp-replay feeds it back through the plugin, docs/traces.md).
///
/// Design. NCCL's thread formats its line into a slot of a bounded ring (Vyukov's MPMC queue used
/// with one consumer: one CAS to claim a slot, one release store to publish it) and returns; a
/// writer thread appends the published lines to the file. Nothing blocks NCCL's threads: a full
/// ring drops the line, a file past NCCLINSP_CAPTURE_MAX_MB or a failing write drops the lines
/// after it, each counted by reason and noted in the file (`# dropped ...`) and in NCCL's log.
/// Thread-safety: start/stop/record/init/finalize from any thread (no lock, no allocation; cold
/// enough to cost more than the metrics path: a line is formatted per callback); flush and close
/// from init/finalize/exit (cold), one at a time.

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "ncclinsp/abi/callback_text.hpp"
#include "ncclinsp/detail/clock.hpp"
#include "ncclinsp/detail/platform.hpp"

namespace ncclinsp::plugin {

class callback_recorder {
 public:
  /// Lines buffered between NCCL's threads and the writer (about 10 MiB of slots).
  static constexpr std::uint32_t ring_lines = 16384;

  /// Opens DIR/ncclinsp-<host>-<pid>.trace (DIR created; a name taken in a shared directory gets a
  /// `.N` suffix, never an overwrite), writes the header and starts the writer thread. nullptr and
  /// `error` set when the file cannot be created.
  static std::unique_ptr<callback_recorder> open(const std::string& dir, const std::string& host,
                                                 std::uint64_t max_bytes, int abi_version, int nccl_version,
                                                 std::string& error) {
    ::mkdir(dir.c_str(), 0755);  // an existing directory is fine; any other failure shows at open
    std::string safe_host;
    for (char c : host) safe_host += (std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-') ? c : '_';
    const std::string base =
        dir + "/ncclinsp-" + (safe_host.empty() ? "host" : safe_host) + "-" + std::to_string(::getpid()) + ".trace";
    int fd = -1;
    std::string path;
    for (int n = 0; n < 100 && fd < 0; ++n) {
      path = n ? base + "." + std::to_string(n) : base;
      fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
      if (fd < 0 && errno != EEXIST) break;
    }
    if (fd < 0) {
      error = "cannot create " + path + ": " + std::strerror(errno);
      return nullptr;
    }
    std::unique_ptr<callback_recorder> r(new callback_recorder(fd, path, max_bytes));
    char line[abi::callback_text::max_line];
    r->write_out(line, abi::callback_text::header_line(line, abi_version, nccl_version, "ncclinsp"));
    r->writer_ = std::thread([p = r.get()] { p->run(); });
    return r;
  }

  ~callback_recorder() { close(); }
  callback_recorder(const callback_recorder&) = delete;
  callback_recorder& operator=(const callback_recorder&) = delete;

  const std::string& path() const noexcept { return path_; }

  // ---- NCCL's threads (no lock, no allocation) ----------------------------------------------------
  void init(void* ctx, std::uint64_t comm_id, const char* name, int nnodes, int nranks, int rank, int mask) noexcept {
    put([&](char* out, std::uint64_t t, long tid) {
      return abi::callback_text::init_line(out, t, tid, id(ctx), comm_id, name, nnodes, nranks, rank, mask);
    });
  }
  /// A line's place in the file, taken before the plugin runs the callback: a startEvent's line is
  /// claimed before the plugin returns the handle another thread may then use, so the event's line
  /// comes before its children's. Filled by start().
  struct claim {
    std::uint64_t pos = no_claim, t = 0;
  };
  claim reserve() noexcept {
    std::uint64_t pos = head_.load(std::memory_order_relaxed);
    for (;;) {
      const auto diff = static_cast<std::int64_t>(ring_[pos % ring_lines].seq.load(std::memory_order_acquire) - pos);
      if (diff == 0) {
        if (head_.compare_exchange_weak(pos, pos + 1, std::memory_order_relaxed)) return {pos, detail::unix_ns()};
      } else if (diff < 0) {
        ring_full_.fetch_add(1, std::memory_order_relaxed);
        return {};
      } else {
        pos = head_.load(std::memory_order_relaxed);
      }
    }
  }
  template <class Descr>
  void start(claim c, void* ctx, void* handle, const Descr* d) noexcept {
    publish(c, [&](char* out, std::uint64_t t, long tid) {
      if (d) return abi::callback_text::start_line(out, t, tid, id(ctx), id(handle), *d);
      abi::callback_text::line l(out);  // the claimed slot is always published: the writer waits for it
      return l.lit("# startEvent without a descriptor").done();
    });
  }
  void stop(void* handle) noexcept {
    put([&](char* out, std::uint64_t t, long tid) { return abi::callback_text::stop_line(out, t, tid, id(handle)); });
  }
  void record(void* handle, int state, const abi::state_args* args) noexcept {
    put([&](char* out, std::uint64_t t, long tid) {
      return abi::callback_text::record_line(out, t, tid, id(handle), state, args);
    });
  }
  void finalize(void* ctx) noexcept {
    put([&](char* out, std::uint64_t t, long tid) { return abi::callback_text::finalize_line(out, t, tid, id(ctx)); });
  }

  // ---- cold -------------------------------------------------------------------------------------
  /// Waits (bounded) until every line published before the call is in the file.
  bool flush(std::chrono::milliseconds bound) noexcept {
    const std::uint64_t target = head_.load(std::memory_order_acquire);
    const auto deadline = std::chrono::steady_clock::now() + bound;
    while (tail_.load(std::memory_order_acquire) < target) {
      if (std::chrono::steady_clock::now() >= deadline) return false;
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    return true;
  }
  /// Drains (bounded), writes the closing counts and stops the writer. Idempotent.
  void close(std::chrono::milliseconds bound = std::chrono::milliseconds(200)) noexcept {
    if (!writer_.joinable()) return;
    flush(bound);
    stopping_.store(true, std::memory_order_release);
    writer_.join();
    note_drops(/*closing=*/true);
    ::close(fd_);
  }

  struct counts {
    std::uint64_t lines = 0, ring_full = 0, file_full = 0, write_failed = 0;
  };
  counts dropped_and_written() const noexcept {
    return {written_.load(std::memory_order_relaxed), ring_full_.load(std::memory_order_relaxed),
            file_full_.load(std::memory_order_relaxed), write_failed_.load(std::memory_order_relaxed)};
  }

 private:
  struct alignas(detail::cache_line) slot {
    std::atomic<std::uint64_t> seq{0};
    std::uint32_t len = 0;
    char text[abi::callback_text::max_line];
  };

  callback_recorder(int fd, std::string path, std::uint64_t max_bytes)
      : fd_(fd), path_(std::move(path)), max_bytes_(max_bytes), ring_(new slot[ring_lines]) {
    for (std::uint32_t i = 0; i < ring_lines; ++i) ring_[i].seq.store(i, std::memory_order_relaxed);
  }

  static std::uint64_t id(const void* p) noexcept { return abi::callback_text::id_of(p); }
  static long this_tid() noexcept {
    static thread_local long tid = 0;
    if (!tid) tid = static_cast<long>(::syscall(SYS_gettid));
    return tid;
  }

  /// Claims a slot, formats the line into it and publishes it; a full ring drops the line (counted).
  template <class Format>
  void put(Format&& format) noexcept {
    publish(reserve(), format);
  }
  template <class Format>
  void publish(claim c, Format&& format) noexcept {
    if (c.pos == no_claim) return;
    slot& s = ring_[c.pos % ring_lines];
    s.len = static_cast<std::uint32_t>(format(s.text, c.t, this_tid()));
    s.seq.store(c.pos + 1, std::memory_order_release);
  }

  /// The writer thread: moves published lines into a buffer and appends it to the file.
  void run() noexcept {
    std::vector<char> buf;
    buf.reserve(1 << 20);
    for (;;) {
      const bool last = stopping_.load(std::memory_order_acquire);
      std::uint64_t lines = 0;
      std::uint64_t pos = tail_.load(std::memory_order_relaxed);
      for (; buf.size() < (1u << 20) - abi::callback_text::max_line; ++pos, ++lines) {
        slot& s = ring_[pos % ring_lines];
        if (s.seq.load(std::memory_order_acquire) != pos + 1) break;
        buf.insert(buf.end(), s.text, s.text + s.len);
        s.seq.store(pos + ring_lines, std::memory_order_release);
      }
      if (!buf.empty()) {
        if (write_out(buf.data(), buf.size()))
          written_.fetch_add(lines, std::memory_order_relaxed);
        else
          (failed_ ? write_failed_ : file_full_).fetch_add(lines, std::memory_order_relaxed);
        buf.clear();
      }
      tail_.store(pos, std::memory_order_release);
      note_drops(false);
      if (last) return;
      if (!lines) std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  }

  /// Appends to the file within max_bytes (a closing note may use the reserve); false: not written.
  bool write_out(const char* p, std::size_t n, bool reserve = false) noexcept {
    if (failed_ || bytes_ + n > max_bytes_ + (reserve ? note_reserve : 0)) return false;
    for (std::size_t done = 0; done < n;) {
      const ssize_t w = ::write(fd_, p + done, n - done);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) {
        failed_ = true;
        return false;
      }
      done += static_cast<std::size_t>(w);
    }
    bytes_ += n;
    return true;
  }

  /// `# dropped lines=N ring_full=A file_full=B write_failed=C` when the counts moved, at most once a
  /// second and within half the notes' reserve (writer thread); `# end ...` at close, in the rest.
  void note_drops(bool closing) noexcept {
    const counts c = dropped_and_written();
    const std::uint64_t sum = c.ring_full + c.file_full + c.write_failed, now = detail::steady_ns();
    if (!closing && (sum == noted_ || now < next_note_ns_ || bytes_ > max_bytes_ + note_reserve / 2)) return;
    noted_ = sum;
    next_note_ns_ = now + 1'000'000'000;
    char line[abi::callback_text::max_line];
    abi::callback_text::line l(line);
    l.lit(closing ? "# end" : "# dropped").ku("lines", c.lines).ku("ring_full", c.ring_full);
    l.ku("file_full", c.file_full).ku("write_failed", c.write_failed);
    write_out(line, l.done(), /*reserve=*/true);
  }

  static constexpr std::uint64_t note_reserve = 64 * 1024;  // room for notes past max_bytes
  static constexpr std::uint64_t no_claim = ~std::uint64_t(0);

  int fd_;
  std::string path_;
  std::uint64_t max_bytes_;
  std::unique_ptr<slot[]> ring_;
  alignas(detail::cache_line) std::atomic<std::uint64_t> head_{0};  // next slot to claim (NCCL's threads)
  alignas(detail::cache_line) std::atomic<std::uint64_t> tail_{0};  // next slot to write (writer)
  std::atomic<std::uint64_t> written_{0}, ring_full_{0}, file_full_{0}, write_failed_{0};
  std::atomic<bool> stopping_{false};
  std::uint64_t bytes_ = 0, noted_ = 0, next_note_ns_ = 0;  // writer thread (and close, after the join)
  bool failed_ = false;
  std::thread writer_;
};

}  // namespace ncclinsp::plugin
