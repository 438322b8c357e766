#pragma once
/// The sink contract and a type-erased holder.
///
/// A sink is any type with `export_result write(const snapshot&) noexcept`. Optional members, each
/// with a default: `void shutdown() noexcept` (called once after the final write) and
/// `std::string_view name() const noexcept`. Sinks run only on the exporter thread (cold path),
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
  void shutdown() noexcept { impl_->shutdown(); }
  std::string_view name() const noexcept { return impl_->name(); }

 private:
  struct base {
    virtual ~base() = default;
    virtual export_result write(const snapshot&) noexcept = 0;
    virtual void shutdown() noexcept = 0;
    virtual std::string_view name() const noexcept = 0;
  };
  template <class S>
  struct model final : base {
    explicit model(S s) : s_(std::move(s)) {}
    export_result write(const snapshot& snap) noexcept override { return s_.write(snap); }
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
