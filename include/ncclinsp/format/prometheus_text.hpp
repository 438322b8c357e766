#pragma once
/// Snapshot -> Prometheus text exposition (format 0.0.4), one GPU at a time. Pure: no I/O, no
/// globals. Writes the families of the catalogue (format/catalogue.hpp, docs/metrics.md):
/// Inspector's four gauge families (same names and label order, plus `uuid` and user labels) and
/// the native counters, histograms and health gauges.
/// Every family has # HELP and # TYPE; label values are UTF-8-repaired and escaped; numbers are
/// locale-independent and never NaN/Inf. Series are sorted, so output is deterministic.
/// Thread-safety: pure function (cold path).

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "ncclinsp/bucketing.hpp"
#include "ncclinsp/format/catalogue.hpp"
#include "ncclinsp/format/series.hpp"
#include "ncclinsp/format/text.hpp"
#include "ncclinsp/histogram.hpp"
#include "ncclinsp/snapshot.hpp"
#include "ncclinsp/version.hpp"

namespace ncclinsp::format {

/// GPU uuids present in a snapshot, sorted: one .prom file each.
inline std::vector<std::string> gpu_uuids(const snapshot& snap) {
  std::set<std::string> s;
  for (const auto& c : snap.comms) s.insert(c.desc.uuid);
  return {s.begin(), s.end()};
}

namespace detail {

/// `{k="v",...}` with UTF-8 repair and escaping; `close` false leaves the brace open (for `le`).
inline std::string render(const label_list& l, bool close = true) {
  std::string s;
  for (const auto& [k, v] : l) {
    s += s.empty() ? "{" : ",";
    s += k;
    s += "=\"";
    append_label_value(s, sanitize_utf8(v));
    s += '"';
  }
  if (close && !s.empty()) s += '}';
  return s;
}

inline void family(std::string& out, std::string_view name, std::string_view type, std::string_view help) {
  out += "# HELP ";
  out += name;
  out += ' ';
  out += help;
  out += "\n# TYPE ";
  out += name;
  out += ' ';
  out += type;
  out += '\n';
}

inline void sample(std::string& out, std::string_view name, const std::string& labels, double v) {
  out += name;
  out += labels;
  out += ' ';
  append_double(out, v);
  out += '\n';
}

}  // namespace detail

/// Line budget of one file under cardinality::max_series: which op sets, communicators and
/// Inspector-compatible sets are written. Priority: the native op sets (the rules' input; the
/// ones past the cap fold into one overflow set), then communicator health rows (the hang
/// signal), then the compatible gauges.
struct series_budget {
  std::size_t native = SIZE_MAX, comms = SIZE_MAX, compat = SIZE_MAX;  ///< how many are written
  std::size_t folded_sets = 0, left_comms = 0, left_compat = 0;        ///< how many are not
};

/// Appends the exposition text for GPU `uuid` to `out`: every family of the catalogue
/// (format/catalogue.hpp), in its order. `compat_gauges` adds Inspector's four gauge families;
/// their names end in `_microseconds` and `_gbs`, the only findings promtool's linter reports on
/// our output (the names are NVIDIA's; dashboards depend on them). `card` bounds the series count
/// (labels, size buckets, histogram, per-file cap).
template <class NativeBucketer = pow2_bucketer>
void write_prometheus(std::string& out, const snapshot& snap, std::string_view uuid, bool compat_gauges = true,
                      const cardinality& card = {}) {
  using namespace detail;
  const comm_desc* gpu_desc = nullptr;
  std::vector<const comm_snapshot*> comms;
  for (const auto& c : snap.comms)
    if (c.desc.uuid == uuid) {
      if (!gpu_desc) gpu_desc = &c.desc;
      comms.push_back(&c);
    }
  if (!gpu_desc) return;
  series_table table = collect_series<NativeBucketer>(snap, uuid, compat_gauges, card);
  auto rows_of = [&](series_source s) -> std::vector<series_row>& { return table.rows[static_cast<std::size_t>(s)]; };

  const std::vector<std::size_t> hist_buckets = histogram_buckets(card.histogram);
  const std::size_t per_set = 4 + (card.histogram == histogram_mode::off ? 0 : hist_buckets.size() + 2);

  // Per-file cap: decide what fits before writing anything.
  if (card.max_series) {
    series_budget budget;
    const std::size_t fixed =
        drop_reason_names.size() + filter_reason_names.size() + 2 + 3;  // GPU families + overflow gauges
    std::size_t left = card.max_series > fixed ? card.max_series - fixed : 0;
    std::vector<series_row>& native = rows_of(series_source::op);
    const std::size_t n_native = native.size();
    if (n_native * per_set <= left) {
      budget.native = n_native;
    } else {
      budget.native = left >= per_set ? left / per_set - 1 : 0;  // one set's room for the overflow set
      budget.folded_sets = n_native - budget.native;
    }
    left -= std::min(left, (budget.native + (budget.folded_sets ? 1 : 0)) * per_set);
    budget.comms = 0;
    for (const auto* c : comms) {
      std::size_t rows = 5;
      for (std::size_t f = 1; f < func_count; ++f) rows += c->last_seq_plus1[f] ? 1u : 0u;
      for (const auto& b : snap.busbw) rows += &snap.comms[b.comm] == c ? 5u : 0u;
      for (const auto& p : snap.proxy) rows += &snap.comms[p.comm] == c ? (p.send ? 6u : 5u) : 0u;
      if (rows > left) break;
      left -= rows;
      ++budget.comms;
    }
    budget.left_comms = comms.size() - budget.comms;
    std::vector<series_row>& coll = rows_of(series_source::compat_coll);
    std::vector<series_row>& p2p = rows_of(series_source::compat_p2p);
    const std::size_t n_compat = coll.size() + p2p.size();
    budget.compat = std::min(n_compat, left / 2);
    budget.left_compat = n_compat - budget.compat;

    if (budget.left_comms) {  // the communicator sources again, of the communicators that fit
      series_table kept = collect_series<NativeBucketer>(snap, uuid, false, card, budget.comms);
      for (auto s : {series_source::comm, series_source::comm_func, series_source::proxy_state, series_source::proxy,
                     series_source::busbw})
        rows_of(s) = std::move(kept.rows[static_cast<std::size_t>(s)]);
    }
    if (budget.folded_sets) {
      cell_stats overflow{};
      for (std::size_t i = budget.native; i < native.size(); ++i)
        for_each_stat(overflow, native[i].stats, [](auto& sum, const auto& v) { sum += v; });
      native.resize(budget.native);
      label_list l = comm_labels(snap, *gpu_desc, card);
      for (auto& [k, v] : l)
        if (k == "comm_name" || k == "comm_hash" || k == "rank")
          v = "_overflow";
        else if (k == "nranks" || k == "n_nodes")
          v = "0";
      l.insert(l.end(), {{"collective", "_overflow"}, {"message_size", "_overflow"}});
      if (card.algo_proto) l.emplace_back("algo_proto", "_overflow");
      add_user_labels(l, snap);
      series_row& r = native.emplace_back();
      r.labels = std::move(l);
      r.stats = overflow;
    }
    coll.resize(std::min(coll.size(), budget.compat));
    p2p.resize(std::min(p2p.size(), budget.compat - coll.size()));
    for (const auto& [kind, n] : {std::pair<const char*, std::size_t>{"op_sets", budget.folded_sets},
                                  {"comms", budget.left_comms},
                                  {"compat", budget.left_compat}}) {
      label_list l = identity_labels(snap, comm_desc{.device = gpu_desc->device, .uuid = gpu_desc->uuid});
      l.emplace_back("kind", kind);
      add_user_labels(l, snap);
      series_row& r = rows_of(series_source::gpu_overflow).emplace_back();
      r.labels = std::move(l);
      r.value = static_cast<double>(n);
    }
  }

  // Each source's label sets rendered once; communicator rows in rendered order (as always).
  std::array<std::vector<std::pair<std::string, const series_row*>>, series_source_count> rendered;
  for (std::size_t s = 0; s < series_source_count; ++s) {
    for (const series_row& r : table.rows[s]) rendered[s].emplace_back(render(r.labels), &r);
    const auto src = static_cast<series_source>(s);
    if (src == series_source::comm || src == series_source::comm_func || src == series_source::proxy ||
        src == series_source::busbw)
      std::stable_sort(rendered[s].begin(), rendered[s].end(),
                       [](const auto& a, const auto& b) { return a.first < b.first; });
    if (src == series_source::proxy_state)  // by peer and direction, states in their own order
      std::stable_sort(rendered[s].begin(), rendered[s].end(), [](const auto& a, const auto& b) {
        return std::string_view(a.first).substr(0, a.first.rfind(",state=")) <
               std::string_view(b.first).substr(0, b.first.rfind(",state="));
      });
  }
  for (const metric_family& fam : catalogue) {
    if (fam.compat && !compat_gauges) continue;
    if (fam.optional && rendered[static_cast<std::size_t>(fam.source)].empty()) continue;
    if (fam.type == metric_type::histogram && card.histogram == histogram_mode::off) continue;
    family(out, fam.name, to_string(fam.type), fam.help);
    const auto& rows = rendered[static_cast<std::size_t>(fam.source)];
    if (fam.type != metric_type::histogram) {
      for (const auto& [l, r] : rows) sample(out, fam.name, l, fam.value(*r));
      continue;
    }
    const std::string sum_name = std::string(fam.name) + "_sum", count_name = std::string(fam.name) + "_count";
    for (const auto& [l, r] : rows) {
      const std::string_view open(l.data(), l.size() - 1);
      std::uint64_t cum = 0;
      std::size_t next = 0;
      for (std::size_t b = 0; b < duration_buckets; ++b) {
        cum += r->stats.hist[b];
        if (next >= hist_buckets.size() || hist_buckets[next] != b) continue;
        ++next;
        out += fam.name;
        out += "_bucket";
        out += open;
        out += ",le=\"";
        if (b < duration_bounds_ns.size())
          append_double(out, static_cast<double>(duration_bounds_ns[b]) * 1e-9);
        else
          out += "+Inf";
        out += "\"} ";
        append_int(out, cum);
        out += '\n';
      }
      sample(out, sum_name, l, static_cast<double>(r->stats.busy_ns) * 1e-9);
      sample(out, count_name, l, static_cast<double>(cum));
    }
  }
}

}  // namespace ncclinsp::format
