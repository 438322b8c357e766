#include <catch2/catch.hpp>

#include <map>

#include <unistd.h>

#include "ncclinsp/env_options.hpp"
#include "ncclinsp/sinks/from_options.hpp"

using namespace ncclinsp;

namespace {
struct env {
  std::map<std::string, std::string> vars;
  std::vector<std::string> warnings;
  env_options parse() {
    return env_options::from_env(
        [this](log_level l, std::string_view m) {
          if (l == log_level::warn) warnings.emplace_back(m);
        },
        [this](const char* k) -> const char* {
          auto it = vars.find(k);
          return it == vars.end() ? nullptr : it->second.c_str();
        });
  }
};
}  // namespace

TEST_CASE("defaults match NVIDIA Inspector's", "[options]") {
  env e;
  const auto o = e.parse();
  CHECK_FALSE(o.enable);
  CHECK(o.enable_p2p);
  CHECK(o.interval == std::chrono::microseconds(-1));
  CHECK(o.export_interval() == std::chrono::milliseconds(0));  // teardown only, but still written then
  CHECK(o.dump_dir == "nccl-inspector-unknown-jobid");
  CHECK(o.min_size_bytes == 8192);
  CHECK(o.require_kernel_timing);
  CHECK(o.sinks == std::vector<std::string>{"json"});
  CHECK(e.warnings.empty());
}

TEST_CASE("Inspector variables keep their meaning and the interval is honoured", "[options]") {
  env e;
  e.vars = {{"NCCL_INSPECTOR_ENABLE", "1"},
            {"NCCL_INSPECTOR_PROM_DUMP", "1"},
            {"NCCL_INSPECTOR_DUMP_THREAD_INTERVAL_MICROSECONDS", "2000000"},
            {"SLURM_JOBID", "99"},
            {"SLURM_JOB_ID", "99"},
            {"NCCL_INSPECTOR_DUMP_MIN_SIZE_BYTES", "0x100"},
            {"NCCL_INSPECTOR_ENABLE_P2P", "0"}};
  const auto o = e.parse();
  CHECK(o.enable);
  CHECK(o.has_sink("prom"));
  CHECK(o.export_interval() == std::chrono::milliseconds(2000));  // Inspector would force 30 s
  CHECK(o.dump_dir == "nccl-inspector-99");
  CHECK(o.slurm_job_id == "99");
  CHECK(o.min_size_bytes == 256);
  CHECK_FALSE(o.enable_p2p);
  e.vars["NCCL_INSPECTOR_DUMP_THREAD_INTERVAL_MICROSECONDS"] = "0";
  CHECK(e.parse().export_interval() == std::chrono::milliseconds(100));  // no busy loop
}

TEST_CASE("native variables: sinks, labels, Kubernetes identity, interval", "[options]") {
  env e;
  e.vars = {{"NCCLINSP_SINKS", "prom,json"}, {"NCCLINSP_LABELS", "cluster=a,team=b"},
            {"POD_NAMESPACE", "ml"},         {"NCCLINSP_K8S_POD", "trainer-0"},
            {"NCCLINSP_INTERVAL", "5s"},     {"NCCLINSP_NODE_NAME", "node7"}};
  const auto o = e.parse();
  CHECK(o.has_sink("prom"));
  CHECK(o.has_sink("json"));
  CHECK(o.labels == std::vector<std::pair<std::string, std::string>>{
                        {"cluster", "a"}, {"team", "b"}, {"k8s_namespace", "ml"}, {"k8s_pod", "trainer-0"}});
  CHECK(o.export_interval() == std::chrono::milliseconds(5000));
  CHECK(o.node_name == "node7");
  // Nothing names the job: a key of this process alone, never "unknown" shared with other jobs.
  CHECK(o.job_id == "host:node7:" + std::to_string(::getpid()));
  CHECK(o.slurm_job_id == o.job_id);
  CHECK(e.warnings.empty());  // not enabled: no advice to give
}

TEST_CASE("garbage in any variable: one warning each, the default used", "[options][hostile]") {
  const char* vars[] = {"NCCL_INSPECTOR_ENABLE",
                        "NCCL_INSPECTOR_ENABLE_P2P",
                        "NCCL_INSPECTOR_DUMP_THREAD_ENABLE",
                        "NCCL_INSPECTOR_DUMP_THREAD_INTERVAL_MICROSECONDS",
                        "NCCL_INSPECTOR_DUMP_VERBOSE",
                        "NCCL_INSPECTOR_PROM_DUMP",
                        "NCCL_INSPECTOR_PROM_DUMP_STATS",
                        "NCCL_INSPECTOR_DUMP_MIN_SIZE_BYTES",
                        "NCCL_INSPECTOR_DUMP_COLL_RING_SIZE",
                        "NCCL_INSPECTOR_DUMP_P2P_RING_SIZE",
                        "NCCL_INSPECTOR_COLL_POOL_SIZE",
                        "NCCL_INSPECTOR_P2P_POOL_SIZE",
                        "NCCL_INSPECTOR_COMM_POOL_SIZE",
                        "NCCL_INSPECTOR_POOL_GROW",
                        "NCCL_INSPECTOR_REQUIRE_KERNEL_TIMING",
                        "NCCL_INSPECTOR_OTEL_EXPORT",
                        "NCCL_INSPECTOR_OTEL_VERBOSE",
                        "NCCLINSP_ENABLE",
                        "NCCLINSP_SINKS",
                        "NCCLINSP_LABELS",
                        "NCCLINSP_INTERVAL",
                        "NCCLINSP_USER_TAG_LABEL",
                        "NCCLINSP_PROM_KEEP_FILES",
                        "NCCLINSP_JSON_MAX_BYTES",
                        "NCCLINSP_RECORD_BUFFER_MB"};
  const env_options defaults = env{}.parse();
  for (const char* v : vars) {
    for (const char* garbage : {"banana", "12abc", "-", "\xff\xfe", "1e99999", "=,=,"}) {
      env e;
      e.vars[v] = garbage;
      const auto o = e.parse();
      INFO(v << "=" << garbage);
      CHECK(e.warnings.size() == 1);
      if (!e.warnings.empty()) CHECK(e.warnings[0].find(v) != std::string::npos);
      CHECK(o.enable == defaults.enable);
      CHECK(o.interval == defaults.interval);
      CHECK(o.min_size_bytes == defaults.min_size_bytes);
      CHECK(o.sinks == defaults.sinks);
      CHECK(o.labels == defaults.labels);
      CHECK(o.coll_pool_size == defaults.coll_pool_size);
    }
  }
}

TEST_CASE("out-of-range values are rejected, not wrapped", "[options][hostile]") {
  env e;
  e.vars = {{"NCCL_INSPECTOR_COLL_POOL_SIZE", "3"},
            {"NCCL_INSPECTOR_DUMP_MIN_SIZE_BYTES", "-5"},
            {"NCCLINSP_LABELS", "node=x"}};
  const auto o = e.parse();
  CHECK(e.warnings.size() == 3);
  CHECK(o.coll_pool_size == 256);
  CHECK(o.min_size_bytes == 8192);
  CHECK(o.labels.empty());
}

TEST_CASE("precedence between variable pairs, each pair with different values", "[options][precedence]") {
  env e;
  // NCCLINSP_ENABLE overrides NCCL_INSPECTOR_ENABLE, in both directions.
  e.vars = {{"NCCL_INSPECTOR_ENABLE", "1"}, {"NCCLINSP_ENABLE", "0"}};
  CHECK_FALSE(e.parse().enable);
  e.vars = {{"NCCL_INSPECTOR_ENABLE", "0"}, {"NCCLINSP_ENABLE", "1"}};
  CHECK(e.parse().enable);
  // NCCLINSP_INTERVAL overrides the microseconds variable, shorter or longer.
  e.vars = {{"NCCL_INSPECTOR_DUMP_THREAD_INTERVAL_MICROSECONDS", "2000000"}, {"NCCLINSP_INTERVAL", "500ms"}};
  CHECK(e.parse().export_interval() == std::chrono::milliseconds(500));
  e.vars = {{"NCCL_INSPECTOR_DUMP_THREAD_INTERVAL_MICROSECONDS", "200000"}, {"NCCLINSP_INTERVAL", "3s"}};
  CHECK(e.parse().export_interval() == std::chrono::milliseconds(3000));
  // SLURM_JOBID names the default dump directory (as Inspector), SLURM_JOB_ID the label.
  e.vars = {{"SLURM_JOBID", "11"}, {"SLURM_JOB_ID", "22"}};
  const auto o = e.parse();
  CHECK(o.dump_dir == "nccl-inspector-11");
  CHECK(o.slurm_job_id == "22");
  e.vars = {{"SLURM_JOB_ID", "22"}};
  CHECK(e.parse().dump_dir == "nccl-inspector-unknown-jobid");
  e.vars = {{"SLURM_JOBID", "11"}, {"NCCLINSP_NODE_NAME", "n1"}};
  CHECK(e.parse().slurm_job_id == "host:n1:" + std::to_string(::getpid()));
  CHECK(e.warnings.empty());
}

TEST_CASE("job key: NCCLINSP_JOB_ID, then the schedulers, then the variable NCCLINSP_JOB_ID_FROM names",
          "[options][identity]") {
  env e;
  const std::vector<std::pair<const char*, const char*>> sources = {{"NCCLINSP_JOB_ID", "explicit"},
                                                                    {"SLURM_JOB_ID", "101"},
                                                                    {"PBS_JOBID", "202.pbs-server"},
                                                                    {"LSB_JOBID", "303"},
                                                                    {"FLUX_JOB_ID",
                                                                     "\xc6\x92"
                                                                     "2Xh5Wo"},
                                                                    {"JOB_NAME", "from-pod"}};
  // Each source wins over the ones after it; removing it from the front hands over to the next.
  for (std::size_t first = 0; first < sources.size(); ++first) {
    e.vars = {{"NCCLINSP_JOB_ID_FROM", "JOB_NAME"}};
    for (std::size_t i = first; i < sources.size(); ++i) e.vars[sources[i].first] = sources[i].second;
    const auto o = e.parse();
    INFO("first source " << sources[first].first);
    CHECK(o.job_id == sources[first].second);
    CHECK(o.slurm_job_id == (first <= 1 ? std::string("101") : o.job_id));  // SLURM_JOB_ID whenever set
  }
  CHECK(e.warnings.empty());
  // SLURM_JOB_ID stays the slurm_job_id label under an explicit key.
  e.vars = {{"NCCLINSP_JOB_ID", "train-7"}, {"SLURM_JOB_ID", "55"}};
  CHECK(e.parse().slurm_job_id == "55");
  CHECK(e.parse().job_id == "train-7");
}

TEST_CASE("Kubernetes: no Slurm variables, NODE_NAME and pod variables yield a job key and the node name",
          "[options][identity][kubernetes]") {
  env e;
  // What deploy/kubernetes passes through the downward API: spec.nodeName, metadata.namespace,
  // metadata.name and the JobSet name label.
  e.vars = {{"NCCL_INSPECTOR_ENABLE", "1"},         {"NCCL_INSPECTOR_PROM_DUMP", "1"},
            {"NODE_NAME", "gpu-node-17"},           {"POD_NAMESPACE", "team-a"},
            {"POD_NAME", "llama-trainer-0-3-x7k"},  {"JOBSET_NAME", "llama"},
            {"NCCLINSP_JOB_ID_FROM", "JOBSET_NAME"}};
  auto o = e.parse();
  CHECK(o.job_id == "team-a/llama");
  CHECK(o.slurm_job_id == "team-a/llama");  // NVIDIA's dashboard filters on slurm_job_id: the job key
  CHECK(o.node_name == "gpu-node-17");      // not the pod's host name
  CHECK(o.labels == std::vector<std::pair<std::string, std::string>>{{"k8s_namespace", "team-a"},
                                                                     {"k8s_pod", "llama-trainer-0-3-x7k"}});
  CHECK(e.warnings.empty());
  // The same job name in another namespace is another job.
  e.vars["POD_NAMESPACE"] = "team-b";
  CHECK(e.parse().job_id == "team-b/llama");
  // An explicit key is namespaced the same way unless it names its namespace itself.
  e.vars["NCCLINSP_JOB_ID"] = "run-1";
  CHECK(e.parse().job_id == "team-b/run-1");
  e.vars["NCCLINSP_JOB_ID"] = "shared/run-1";
  CHECK(e.parse().job_id == "shared/run-1");
  e.vars.erase("NCCLINSP_JOB_ID");
  // NCCLINSP_NODE_NAME overrides NODE_NAME; the NCCLINSP_K8S_* variables override the downward API's.
  e.vars["NCCLINSP_NODE_NAME"] = "n-explicit";
  e.vars["NCCLINSP_K8S_NAMESPACE"] = "team-c";
  e.vars["NCCLINSP_K8S_POD"] = "p0";
  o = e.parse();
  CHECK(o.node_name == "n-explicit");
  CHECK(o.job_id == "team-c/llama");
  CHECK(o.labels == std::vector<std::pair<std::string, std::string>>{{"k8s_namespace", "team-c"}, {"k8s_pod", "p0"}});
  // On Kubernetes without a job source the plugin says so, once, and the key is this process's.
  e.vars.erase("NCCLINSP_JOB_ID_FROM");
  e.warnings.clear();
  o = e.parse();
  CHECK(o.job_id == "host:n-explicit:" + std::to_string(::getpid()));
  REQUIRE(e.warnings.size() == 1);
  CHECK(e.warnings[0].find("NCCLINSP_JOB_ID_FROM") != std::string::npos);
}

TEST_CASE("malformed identity values: one clear warning each, the next source used", "[options][identity][hostile]") {
  env e;
  e.vars = {{"NCCLINSP_JOB_ID", "bad\nkey"},
            {"SLURM_JOB_ID", std::string(300, '9')},
            {"PBS_JOBID", "7.pbs"},
            {"NCCLINSP_NODE_NAME", "n\x01"},
            {"NODE_NAME", "k8s-node"}};
  auto o = e.parse();
  CHECK(o.job_id == "7.pbs");
  CHECK(o.slurm_job_id == "7.pbs");
  CHECK(o.node_name == "k8s-node");
  REQUIRE(e.warnings.size() == 3);
  CHECK(e.warnings[0].find("NCCLINSP_NODE_NAME") != std::string::npos);  // the node is read first
  CHECK(e.warnings[1].find("SLURM_JOB_ID") != std::string::npos);        // once, though it is also a label
  CHECK(e.warnings[2].find("NCCLINSP_JOB_ID") != std::string::npos);
  for (const auto& w : e.warnings) CHECK(w.find('\n') == std::string::npos);  // the value itself is not echoed
  // NCCLINSP_JOB_ID_FROM: not a variable name, or a variable that is not set.
  e = {};
  e.vars = {{"NCCLINSP_JOB_ID_FROM", "metadata.labels['x']"}, {"NCCLINSP_NODE_NAME", "n"}};
  CHECK(e.parse().job_id == "host:n:" + std::to_string(::getpid()));
  REQUIRE(e.warnings.size() == 1);
  CHECK(e.warnings[0].find("NCCLINSP_JOB_ID_FROM") != std::string::npos);
  e.warnings.clear();
  e.vars["NCCLINSP_JOB_ID_FROM"] = "JOB_NAME";
  CHECK(e.parse().job_id == "host:n:" + std::to_string(::getpid()));
  REQUIRE(e.warnings.size() == 1);
  CHECK(e.warnings[0].find("JOB_NAME, which is not set") != std::string::npos);
  // Hostile but printable values are kept: the label escaping and the file-name sanitizing handle them.
  e = {};
  e.vars = {{"NCCLINSP_JOB_ID", "a\"b\\c/../{x}"}};
  CHECK(e.parse().job_id == "a\"b\\c/../{x}");
  CHECK(e.warnings.empty());
}

TEST_CASE("collector_options_from: one mapping for the plugin and the embedded mode", "[options]") {
  env e;
  e.vars = {{"NCCL_INSPECTOR_ENABLE", "1"},
            {"NCCLINSP_SINKS", "json"},
            {"NCCL_INSPECTOR_DUMP_VERBOSE", "1"},
            {"NCCLINSP_RECORD_BUFFER_MB", "256"},
            {"NCCLINSP_PROXY", "1"},
            {"NCCLINSP_USER_TAG_LABEL", "1"},
            {"NCCLINSP_NODE_NAME", "nn"},
            {"SLURM_JOB_ID", "3"},
            {"NCCLINSP_LABELS", "cluster=c1"},
            {"NCCLINSP_RETAIN_FINALIZED_S", "7"},
            {"NCCL_INSPECTOR_DUMP_DIR", "/tmp/x"}};
  const env_options o = e.parse();
  REQUIRE(e.warnings.empty());

  // The plugin delivers NCCL's events: traces (verbose JSON) and proxy accounting have a source.
  const collector_options plugin = collector_options_from(o, true, {.hostname = "h", .abi = "v7", .pid = 5});
  CHECK(plugin.record_traces);
  CHECK(plugin.proxy_accounting);
  CHECK(plugin.record_ring_capacity == record_ring_for(o));
  CHECK(plugin.record_ring_capacity == max_traced_ring);  // verbose records carry a trace: capped
  CHECK(plugin.record_ring_max == (std::uint64_t{256} << 20) / collector<>::bytes_per_record(true));
  CHECK(plugin.user_tag_label);
  CHECK(plugin.retired_retention == std::chrono::seconds(7));
  CHECK(plugin.identity.node == "nn");
  CHECK(plugin.identity.hostname == "h");
  CHECK(plugin.identity.slurm_job_id == "3");
  CHECK(plugin.identity.job_id == "3");
  CHECK(plugin.identity.abi == "v7");
  CHECK(plugin.identity.pid == 5);
  CHECK(plugin.identity.labels == std::vector<std::pair<std::string, std::string>>{{"cluster", "c1"}});

  // The embedded mode has neither; the record buffer limit means the same there.
  const collector_options embedded = collector_options_from(o, false);
  CHECK(!embedded.record_traces);
  CHECK(!embedded.proxy_accounting);
  CHECK(embedded.record_ring_capacity == plugin.record_ring_capacity);
  CHECK(embedded.record_ring_max == (std::uint64_t{256} << 20) / collector<>::bytes_per_record(false));
  CHECK(embedded.retired_retention == plugin.retired_retention);
  CHECK(embedded.identity.node == "nn");

  e.vars.erase("NCCL_INSPECTOR_ENABLE");
  const collector_options off = collector_options_from(e.parse(), true);
  CHECK(off.record_ring_capacity == 0);
  CHECK(off.record_ring_max == 0);
  CHECK(!off.record_traces);
}
