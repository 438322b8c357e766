#pragma once
/// state_dumper: evidence on demand. One file per GPU of this process,
/// `<dir>/<node>-pid<pid>-<uuid>.state.json` (format/state_dump.hpp), lists each communicator the
/// process has on that GPU with its last completed ops (op_history.hpp) and its ops in flight
/// with their channels' progress. `ncclinsp-report hang DIR` merges the files of every rank
/// (docs/report.md). The file is replaced atomically (detail/atomic_file.hpp), bounded by
/// NCCLINSP_STATE_MAX_KB, and written by the dumper's own thread, which polls once a second:
///  * when a communicator's oldest op in flight passes NCCLINSP_STATE_WARN_S (default 60 s, the
///    warning threshold of the hang alerts), once per such op;
///  * at the first poll after a GPU's first communicator, then every NCCLINSP_STATE_EVERY_S
///    (default 30 s; 0: never), a heartbeat: a rank that stopped issuing ops keeps writing (its
///    peers' dumps show them waiting for it) and a process that died stops (its file ages), which
///    is what tells the two apart; a process that dies early has left where it ran;
///  * on request: `touch <dir>/ncclinsp.state.trigger` (each process dumps once per new mtime),
///    or the opt-in signal NCCLINSP_STATE_SIGNAL (dump_signal.hpp).
/// NCCLINSP_STATE=0 turns it off; NCCLINSP_STATE_DIR overrides the directory (default: the dump
/// directory, next to the .prom files).
/// Lifetime: when the last communicator is finalized, the thread removes the files this process
/// wrote (finalize waits for it at most 100 ms), unless NCCLINSP_PROM_KEEP_FILES=1, as the .prom
/// files. A killed or hung process leaves its files: they are the evidence; ncclinsp-cleaner
/// removes those of gone writers after its --state-max-age.
/// Never blocks NCCL: the callbacks only store into their op's slot and history (no lock); add
/// and remove (init and finalize) take the dumper's mutex, which its thread holds while it copies
/// the state out (no I/O under it).
/// Thread-safety: add/remove/stop cold (any thread); dump_now any thread.

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cerrno>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <set>
#include <cstring>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "ncclinsp/detail/atomic_file.hpp"
#include "ncclinsp/detail/clock.hpp"
#include "ncclinsp/detail/env.hpp"
#include "ncclinsp/detail/failure_log.hpp"
#include "ncclinsp/format/state_dump.hpp"
#include "ncclinsp/log.hpp"
#include "ncclinsp/plugin/comm_state.hpp"
#include "ncclinsp/plugin/dump_signal.hpp"
#include "ncclinsp/plugin/op_lifecycle.hpp"
#include "ncclinsp/snapshot.hpp"

namespace ncclinsp::plugin {

/// The dumper's settings (NCCLINSP_STATE_*).
struct state_dump_options {
  bool enable = true;                    ///< NCCLINSP_STATE
  std::string dir;                       ///< NCCLINSP_STATE_DIR (default: the dump directory)
  std::uint32_t warn_after_s = 60;       ///< NCCLINSP_STATE_WARN_S: dump when an op is in flight this long
  std::uint32_t every_s = 30;            ///< NCCLINSP_STATE_EVERY_S: heartbeat rewrite (0: none)
  int signal = 0;                        ///< NCCLINSP_STATE_SIGNAL (0: none)
  std::uint32_t max_kb = 1024;           ///< NCCLINSP_STATE_MAX_KB: bound of one file
  std::chrono::milliseconds poll{1000};  ///< the thread's period (not from the environment)
  std::uint32_t inflight_listed = 16;    ///< ops in flight listed per communicator (the oldest)
  bool remove_at_end = true;             ///< NCCLINSP_PROM_KEEP_FILES=1: false (files stay after the last finalize)

  static state_dump_options from_env(const log_fn& log, const getenv_fn& get, std::string default_dir) {
    state_dump_options o;
    o.dir = std::move(default_dir);
    detail::env_reader e(log, get);
    e.boolean("NCCLINSP_STATE", o.enable);
    e.string("NCCLINSP_STATE_DIR", o.dir);
    e.integer("NCCLINSP_STATE_WARN_S", o.warn_after_s, 1, 7 * 86400);
    e.integer("NCCLINSP_STATE_EVERY_S", o.every_s, 0, 7 * 86400);
    e.integer("NCCLINSP_STATE_MAX_KB", o.max_kb, 16, 1 << 20);
    bool keep = false;  // env_options reports a malformed value: read quietly here
    detail::env_reader([](log_level, std::string_view) {}, get).boolean("NCCLINSP_PROM_KEEP_FILES", keep);
    o.remove_at_end = !keep;
    if (const char* v = e.raw("NCCLINSP_STATE_SIGNAL"); v && !dump_signal::parse(v, o.signal))
      e.warn("NCCLINSP_STATE_SIGNAL", v, "off, USR1, USR2 or RTMIN+n (signals with another use are refused)");
    return o;
  }
  /// One line for the startup banner.
  std::string describe() const {
    if (!enable) return "state dumps off";
    return "state dumps in " + dir + ": ops in flight over " + std::to_string(warn_after_s) + "s, " +
           (every_s ? "every " + std::to_string(every_s) + "s" : std::string("no heartbeat")) +
           ", on touching ncclinsp.state.trigger" + (signal ? ", on signal " + std::to_string(signal) : std::string()) +
           "; at most " + std::to_string(max_kb) + " KiB per file";
  }
};

class state_dumper {
 public:
  static constexpr const char* trigger_name = "ncclinsp.state.trigger";

  /// `id`: node, hostname, job keys and pid, written into every file.
  state_dumper(state_dump_options o, process_identity id, log_fn log)
      : o_(std::move(o)), id_(std::move(id)), log_(std::move(log)) {}
  state_dumper(const state_dumper&) = delete;
  state_dumper& operator=(const state_dumper&) = delete;
  ~state_dumper() { stop(); }

  const state_dump_options& options() const noexcept { return o_; }

  /// A communicator to follow (cold: init, under the plugin's lock). The first one starts the
  /// thread and installs the signal. Never throws.
  void add(comm_state* cs, const comm_desc& d) noexcept {
    if (!o_.enable || !cs) return;
    try {
      std::lock_guard lk(mu_);
      comms_.push_back({.cs = cs, .desc = d});
      if (comms_.size() == 1 && o_.signal && !dump_signal::install(o_.signal))
        emit(log_, log_level::warn, "state dumps: cannot install the handler of signal " + std::to_string(o_.signal));
      if (!thread_.joinable()) {
        served_requests_ = dump_signal::requests();
        trigger_mtime_ = trigger_mtime();
        thread_ = std::thread([this] { run(); });
      }
    } catch (...) {
      emit(log_, log_level::warn, "state dumps: cannot follow a communicator (out of memory or threads)");
    }
  }

  /// The communicator is being finalized (cold, before its state is retired): no longer read.
  /// The last one puts the previous signal action back and has the thread remove this process's
  /// files (remove_at_end), waiting for that at most `wait` (no file I/O on the caller's thread).
  void remove(const comm_state* cs, std::chrono::milliseconds wait = std::chrono::milliseconds(100)) noexcept {
    std::unique_lock lk(mu_);
    std::erase_if(comms_, [cs](const entry& e) { return e.cs == cs; });
    if (!comms_.empty()) return;
    if (o_.signal) dump_signal::restore();
    if (!o_.remove_at_end || !thread_.joinable() || stopping_) return;
    const std::uint64_t gen = ++end_asked_;
    cv_.notify_all();
    cv_.wait_for(lk, wait, [&] { return end_done_ >= gen || stopping_; });
  }

  /// Stops the thread (cold; tests and private states: the process-wide one lives as long as the
  /// process).
  void stop() noexcept {
    {
      std::lock_guard lk(mu_);
      stopping_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable() && thread_.get_id() != std::this_thread::get_id()) thread_.join();
  }

  /// Writes every GPU's file now (any thread). False when one could not be written (logged).
  bool dump_now(std::string_view reason) noexcept {
    try {
      std::vector<format::state_dump> due;
      {
        std::lock_guard lk(mu_);
        std::map<std::string, bool> all;
        for (const auto& e : comms_) all[gpu_key(e.desc)] = true;
        for (const auto& [k, v] : all) due.push_back(gather(k, reason));
      }
      return write(due);
    } catch (...) {
      return false;
    }
  }

  /// The file of a GPU (its uuid, or the device ordinal when there is none).
  std::string path_of(const comm_desc& d) const { return o_.dir + "/" + file_name(d); }
  /// Files written so far, and dumps that failed.
  std::uint64_t written() const noexcept { return written_.load(std::memory_order_relaxed); }
  std::uint64_t failed() const noexcept { return failed_.load(std::memory_order_relaxed); }

 private:
  struct entry {
    comm_state* cs = nullptr;
    comm_desc desc;
    std::uint64_t dumped_oldest = 0;  // the oldest op's start when its hang was dumped
    std::uint64_t proxy_steps = 0, proxy_changed = 0;
  };

  static std::string gpu_key(const comm_desc& d) {
    return !d.uuid.empty() ? d.uuid : d.device >= 0 ? "device" + std::to_string(d.device) : std::string("unknown");
  }
  static std::string name_part(std::string_view v) {
    std::string s;
    for (char c : v.substr(0, 96))
      s += (std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.') ? c : '_';
    return s.empty() || s[0] == '.' ? "_" + s : s;
  }
  std::string file_name(const comm_desc& d) const {
    return name_part(id_.node.empty() ? id_.hostname : id_.node) + "-pid" + std::to_string(id_.pid) + "-" +
           name_part(gpu_key(d)) + ".state.json";
  }
  std::int64_t trigger_mtime() const {
    struct stat st {};
    const std::string p = o_.dir + "/" + trigger_name;
    if (::stat(p.c_str(), &st) != 0) return 0;
    return static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec;
  }

  void run() noexcept {
    std::unique_lock lk(mu_);
    while (!stopping_) {
      cv_.wait_for(lk, o_.poll, [this] { return stopping_ || end_asked_ != end_done_; });
      if (stopping_) break;
      if (end_asked_ != end_done_) {
        const std::uint64_t gen = end_asked_;
        if (comms_.empty()) last_written_.clear();  // a later communicator starts with a heartbeat
        const bool remove = comms_.empty();
        lk.unlock();
        if (remove) remove_files();
        lk.lock();
        end_done_ = gen;
        cv_.notify_all();
        continue;
      }
      lk.unlock();
      try {
        tick();
      } catch (...) {}
      lk.lock();
    }
  }

  /// Unlinks the files this process wrote (the dumper's thread, after the last finalize).
  void remove_files() noexcept {
    std::lock_guard lk(write_mu_);
    for (const auto& n : files_) {
      if (::unlink((o_.dir + "/" + n).c_str()) != 0 && errno != ENOENT)
        emit(log_, log_level::warn, "state dumps: cannot remove " + o_.dir + "/" + n + ": " + std::strerror(errno));
    }
    files_.clear();
  }

  /// One poll: which GPUs are due, their state copied under the lock, written after it.
  void tick() {
    const std::uint64_t now = detail::coarse_ns();
    const std::uint64_t req = dump_signal::requests();
    const std::int64_t mt = trigger_mtime();
    std::string asked;
    if (req != served_requests_) asked = "signal";
    if (mt != trigger_mtime_ && mt != 0) asked = "trigger";
    served_requests_ = req;
    trigger_mtime_ = mt;
    std::vector<format::state_dump> due;
    {
      std::lock_guard lk(mu_);
      std::map<std::string, std::string> why;  // GPU -> reason
      for (auto& e : comms_) {
        const std::string k = gpu_key(e.desc);
        const std::uint64_t oldest = e.cs->ops.oldest();
        if (oldest && now > oldest && now - oldest >= std::uint64_t{o_.warn_after_s} * 1'000'000'000 &&
            oldest != e.dumped_oldest) {
          e.dumped_oldest = oldest;
          why[k] = "hang";
        }
        if (e.cs->proxy) {
          std::uint64_t steps = 0;
          e.cs->proxy->for_each([&](const proxy_table::peer_totals& t) { steps += t.steps; });
          if (steps != e.proxy_steps || !e.proxy_changed) {
            e.proxy_steps = steps;
            e.proxy_changed = now;
          }
        }
        if (!asked.empty()) why[k] = asked;
        // Heartbeats: the first at the first poll (a process that dies early has left where it ran),
        // then every every_s (half a poll early rather than a poll late).
        const auto last = last_written_.find(k);
        const std::uint64_t poll_ns = static_cast<std::uint64_t>(o_.poll.count()) * 1'000'000;
        if (o_.every_s && !why.count(k) &&
            (last == last_written_.end() ||
             now - last->second + poll_ns / 2 >= std::uint64_t{o_.every_s} * 1'000'000'000))
          why[k] = "heartbeat";
      }
      for (const auto& [k, r] : why) {
        due.push_back(gather(k, r));
        last_written_[k] = now;
      }
    }
    (void)write(due);
  }

  /// The state of GPU `key`'s communicators (under mu_), most urgent first.
  format::state_dump gather(const std::string& key, std::string_view reason) {
    format::state_dump d;
    d.reason = std::string(reason);
    const std::uint64_t now = detail::coarse_ns(), unix_now = detail::unix_ns();
    const auto to_unix = [&](std::uint64_t t) { return t && t <= now ? unix_now - (now - t) : unix_now; };
    d.time_ns = unix_now;
    d.node = id_.node;
    d.hostname = id_.hostname;
    d.job_id = id_.job_id;
    d.slurm_job_id = id_.slurm_job_id;
    d.pid = id_.pid;
    d.warn_after_s = o_.warn_after_s;
    d.every_s = o_.every_s;
    std::vector<completed_op> hist;
    for (const auto& e : comms_) {
      if (gpu_key(e.desc) != key) continue;
      d.gpu = e.desc.device;
      d.uuid = e.desc.uuid;
      format::dumped_comm& c = d.comms.emplace_back();
      c.desc = e.desc;
      op_history::last_seqs last{};
      e.cs->history.read(hist, 2 * op_history::depth, last);
      for (std::size_t f = 0; f < func_count; ++f) c.last_seq[f] = static_cast<std::int64_t>(last[f]) - 1;
      for (const completed_op& h : hist)
        c.completed.push_back({.seq = h.seq,
                               .fn = h.fn,
                               .bytes = h.bytes,
                               .bytes_valid = h.bytes_valid,
                               .peer = h.peer,
                               .start_ns = to_unix(h.start_ns),
                               .end_ns = to_unix(h.end_ns),
                               .gpu_ns = h.gpu_ns});
      read_inflight(*e.cs, now, c);
      for (auto& o : c.inflight) o.start_ns = to_unix(o.start_ns);
      if (e.cs->proxy) {
        c.proxy = true;
        c.proxy_steps = e.proxy_steps;
        c.proxy_idle_ns = e.proxy_changed && now > e.proxy_changed ? now - e.proxy_changed : 0;
      }
    }
    std::stable_sort(d.comms.begin(), d.comms.end(), [](const format::dumped_comm& a, const format::dumped_comm& b) {
      return a.oldest_age_ns > b.oldest_age_ns;
    });
    return d;
  }

  /// The ops in flight of `cs`, oldest first, the first inflight_listed of them. Each slot is read
  /// between two reads of its generation and start (a slot freed or reused meanwhile is skipped),
  /// and its identity must carry that generation (op_ident: one left by the slot's previous op, or
  /// stored by the next, does not).
  void read_inflight(const comm_state& cs, std::uint64_t now, format::dumped_comm& c) const {
    for (std::uint32_t i = 0; i < cs.ops.size(); ++i) {
      const op_slot& s = cs.ops[i];
      const std::uint32_t g = s.gen.load(std::memory_order_acquire);
      const std::uint64_t t = s.started_at.load(std::memory_order_acquire);
      if (!t) continue;
      const std::uint64_t id = s.ident.load(std::memory_order_relaxed),
                          xf = s.ident_xfer.load(std::memory_order_relaxed);
      const std::uint64_t begun = s.ch_begun.load(std::memory_order_relaxed);
      const std::uint64_t ended = s.ch_ended.load(std::memory_order_relaxed);
      if (s.gen.load(std::memory_order_acquire) != g || s.started_at.load(std::memory_order_acquire) != t) continue;
      ++c.inflight_total;
      c.oldest_age_ns = std::max(c.oldest_age_ns, now > t ? now - t : 0);
      if (!op_ident::is_set(id) || !op_ident::of_gen(id, g)) continue;  // its start is still filling it in
      format::dumped_op o;
      o.seq = op_ident::seq(id);
      o.fn = op_ident::fn(id);
      o.channels = op_ident::channels(id);
      o.bytes = op_ident::bytes(xf);
      o.bytes_valid = op_ident::bytes_valid(xf);
      o.peer = op_ident::peer(xf);
      o.start_ns = t;
      o.age_ns = now > t ? now - t : 0;
      o.ch_started = begun;
      o.ch_ended = ended;
      c.inflight.push_back(o);
    }
    std::sort(c.inflight.begin(), c.inflight.end(),
              [](const format::dumped_op& a, const format::dumped_op& b) { return a.start_ns < b.start_ns; });
    if (c.inflight.size() > o_.inflight_listed) c.inflight.resize(o_.inflight_listed);
  }

  bool write(const std::vector<format::state_dump>& due) {
    std::lock_guard lk(write_mu_);
    bool ok = true;
    std::string out;
    for (const auto& d : due) {
      format::write_state_dump(out, d, std::size_t{o_.max_kb} * 1024);
      comm_desc g;
      g.uuid = d.uuid;
      g.device = d.gpu;
      const std::string name = file_name(g);
      if (const int err = detail::write_file_atomic(o_.dir, name, out)) {
        ok = false;
        failed_.fetch_add(1, std::memory_order_relaxed);
        if (fail_log_.failed(err))
          emit(log_, log_level::warn,
               "state dumps: cannot write " + o_.dir + "/" + name + ": " + detail::describe_error(err) +
                   " (set NCCLINSP_STATE_DIR to a writable directory, or NCCLINSP_STATE=0)");
        continue;
      }
      if (fail_log_.succeeded()) emit(log_, log_level::info, "state dumps: writing " + o_.dir + " again");
      written_.fetch_add(1, std::memory_order_relaxed);
      try {
        files_.insert(name);
      } catch (...) {}
      if (d.reason != "heartbeat")
        emit(log_, log_level::info, "state dump (" + d.reason + ") written to " + o_.dir + "/" + name);
    }
    return ok;
  }

  const state_dump_options o_;
  const process_identity id_;
  const log_fn log_;
  std::mutex mu_;  // comms_, last_written_, stopping_
  std::condition_variable cv_;
  std::vector<entry> comms_;
  std::map<std::string, std::uint64_t> last_written_;
  bool stopping_ = false;
  std::thread thread_;
  std::uint64_t served_requests_ = 0;           // dumper thread
  std::int64_t trigger_mtime_ = 0;              // dumper thread
  std::mutex write_mu_;                         // write(): the thread and dump_now
  detail::failure_log fail_log_;                // under write_mu_
  std::set<std::string> files_;                 // names written, under write_mu_
  std::uint64_t end_asked_ = 0, end_done_ = 0;  // under mu_: last-finalize removals asked and done
  std::atomic<std::uint64_t> written_{0}, failed_{0};
};

}  // namespace ncclinsp::plugin
