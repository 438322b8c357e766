#pragma once
/// The sink contract and a type-erased holder.
///
/// A sink is any type with `export_result write(const snapshot&) noexcept`. Optional members, each
/// with a default: `void shutdown() noexcept` (called once after the final write) and
/// `std::string_view name() const noexcept`, and `export_result write_records(const snapshot&)
/// noexcept` for sinks that consume per-op records (snapshot::records): it receives records-only
/// snapshots (snapshot::records_only) that the exporter drains between exports whenever a record
/// ring reaches its high-water mark, so no record waits for the interval (and none is lost to a
/// full ring). A sink without it sees only the records drained at its regular exports, and the
/// exporter drains early only if some sink has it. Sinks run only on the exporter thread (cold path),
/// never on NCCL's threads; they must not keep references into the snapshot after write().
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

template <class S>
concept sink = requires(S& s, const snapshot& snap) {
  { s.write(snap) } -> std::same_as<export_result>;
  requires noexcept(s.write(snap));
};

/// Owns any sink; move-only. Thread-safety: as the wrapped sink (the exporter calls it from one thread).
class any_sink {
 public:
  template <sink S>
    requires(!std::same_as<std::remove_cvref_t<S>, any_sink>)
  any_sink(S&& s) : impl_(std::make_unique<model<std::remove_cvref_t<S>>>(std::forward<S>(s))) {}

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
    static constexpr bool has_records = requires(S& s, const snapshot& snap) {
      { s.write_records(snap) } -> std::same_as<export_result>;
    };
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
