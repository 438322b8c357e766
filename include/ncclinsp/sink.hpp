#pragma once
/// The sink contract and a type-erased holder.
///
/// A sink is any type with `export_result write(const snapshot&) noexcept` (noexcept is required:
/// any_sink rejects a throwing write() with a static_assert that says so). Optional members, each
/// with a default: `void shutdown() noexcept` (called once after the final write) and
/// `std::string_view name() const noexcept`, and `export_result write_records(const snapshot&)
/// noexcept` for sinks that consume per-op records (snapshot::records): it receives records-only
/// snapshots (snapshot::records_only) that the exporter drains between exports whenever a record
/// ring reaches its high-water mark, so no record waits for the interval (and none is lost to a
/// full ring). A sink without it sees only the records drained at its regular exports, and the
/// exporter drains early only if some sink has it. Sinks run only on the exporter thread (cold path),
/// never on NCCL's threads; they must not keep references into the snapshot after write().
/// After a sink is moved into an any_sink, any_sink::target<S>() (and exporter/inspector
/// find_sink<S>()) reach it again.
///
/// \code
/// struct my_sink {
///   ncclinsp::export_result write(const ncclinsp::snapshot& s) noexcept { ...; return ncclinsp::export_result::success; }
/// };
/// std::vector<ncclinsp::any_sink> sinks;
/// sinks.emplace_back(my_sink{});
/// \endcode

#include <concepts>
#include <memory>
#include <string_view>
#include <type_traits>
#include <utility>

#include "ncclinsp/snapshot.hpp"

namespace ncclinsp {

enum class export_result { success, failure };

namespace detail {
/// Has the write member, noexcept or not (any_sink then says what is missing).
template <class S>
concept has_sink_write = requires(S& s, const snapshot& snap) {
  { s.write(snap) } -> std::same_as<export_result>;
};
template <class S>
inline constexpr char sink_type_key = 0;  // one address per sink type: any_sink::target without RTTI
}  // namespace detail

template <class S>
concept sink = detail::has_sink_write<S> && requires(S& s, const snapshot& snap) {
  requires noexcept(s.write(snap));
};

/// Owns any sink; move-only. Thread-safety: as the wrapped sink (the exporter calls it from one thread).
class any_sink {
 public:
  template <class S>
  requires(!std::same_as<std::remove_cvref_t<S>, any_sink> && detail::has_sink_write<std::remove_cvref_t<S>>)
      any_sink(S&& s)
      : impl_(std::make_unique<model<std::remove_cvref_t<S>>>(std::forward<S>(s))) {
    static_assert(
        sink<std::remove_cvref_t<S>>,
        "ncclinsp: a sink's `export_result write(const snapshot&)` must be declared noexcept: it runs on the exporter "
        "thread, which must never unwind; catch inside write() and return export_result::failure");
  }

  /// The sink moved in, if it is an S (exactly; no conversions), else nullptr. The pointer lives as
  /// long as this any_sink. The exporter thread calls the sink's members: from another thread, call
  /// only what the sink documents as thread-safe (otlp_http_sink::stats()), or read it after
  /// exporter::flush()/stop() returned and before the next export.
  template <class S>
  S* target() noexcept {
    return impl_ && impl_->type_key() == &detail::sink_type_key<S> ? &static_cast<model<S>*>(impl_.get())->s_ : nullptr;
  }
  template <class S>
  const S* target() const noexcept {
    return const_cast<any_sink*>(this)->target<S>();
  }

  export_result write(const snapshot& snap) noexcept { return impl_->write(snap); }
  /// Records-only snapshots (see the contract above); success and nothing done without the member.
  export_result write_records(const snapshot& snap) noexcept { return impl_->write_records(snap); }
  bool takes_records() const noexcept { return impl_->takes_records(); }
  void shutdown() noexcept { impl_->shutdown(); }
  std::string_view name() const noexcept { return impl_->name(); }

 private:
  struct base {
    virtual ~base() = default;
    virtual export_result write(const snapshot&) noexcept = 0;
    virtual export_result write_records(const snapshot&) noexcept = 0;
    virtual bool takes_records() const noexcept = 0;
    virtual void shutdown() noexcept = 0;
    virtual std::string_view name() const noexcept = 0;
    virtual const void* type_key() const noexcept = 0;
  };
  template <class S>
  struct model final : base {
    explicit model(S s) : s_(std::move(s)) {}
    export_result write(const snapshot& snap) noexcept override { return s_.write(snap); }
    export_result write_records(const snapshot& snap) noexcept override {
      if constexpr (has_records)
        return s_.write_records(snap);
      else
        return export_result::success;
    }
    bool takes_records() const noexcept override { return has_records; }
    static constexpr bool has_records = requires(S & s, const snapshot& snap) {
      { s.write_records(snap) } -> std::same_as<export_result>;
    };
    static_assert(
        !has_records || requires(S & s, const snapshot& snap) { requires noexcept(s.write_records(snap)); },
        "ncclinsp: a sink's `export_result write_records(const snapshot&)` must be declared noexcept, like write()");
    const void* type_key() const noexcept override { return &detail::sink_type_key<S>; }
    void shutdown() noexcept override {
      if constexpr (requires { s_.shutdown(); }) s_.shutdown();
    }
    std::string_view name() const noexcept override {
      if constexpr (requires { s_.name(); })
        return s_.name();
      else
        return "sink";
    }
    S s_;
  };
  std::unique_ptr<base> impl_;
};

}  // namespace ncclinsp
