#pragma once
/// Who this process is on the cluster: the job key (`job_id` label), the `slurm_job_id` label, the
/// `node` label and the Kubernetes namespace and pod, read from the scheduler's or the pod's
/// environment in one documented order (docs/metrics.md "Identity labels"). A malformed value is
/// reported once and the next source is used; nothing here fails. Cold path; reentrant.

#include <string>
#include <string_view>

#include "ncclinsp/detail/env.hpp"
#include "ncclinsp/detail/host.hpp"

namespace ncclinsp::detail {

struct job_identity {
  std::string job_id;              ///< the job key the rules group by; never empty
  std::string slurm_job_id;        ///< SLURM_JOB_ID, else the job key (NVIDIA's dashboard filters on it)
  std::string node;                ///< NCCLINSP_NODE_NAME, NODE_NAME (downward API spec.nodeName), host name
  std::string k8s_namespace;       ///< NCCLINSP_K8S_NAMESPACE, POD_NAMESPACE; empty off Kubernetes
  std::string k8s_pod;             ///< NCCLINSP_K8S_POD, POD_NAME
  bool job_from_fallback = false;  ///< nothing named the job: job_id is "host:<node>:<pid>"
};

/// Whether `s` is a POSIX environment variable name ([A-Za-z_][A-Za-z0-9_]*).
inline bool is_env_name(std::string_view s) {
  if (s.empty() || (s[0] >= '0' && s[0] <= '9')) return false;
  for (char c : s)
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_')) return false;
  return true;
}

/// The job key's sources, first set and valid wins: NCCLINSP_JOB_ID, SLURM_JOB_ID, PBS_JOBID,
/// LSB_JOBID, FLUX_JOB_ID, then the variable NCCLINSP_JOB_ID_FROM names (on Kubernetes: one the
/// pod gets from the downward API, such as a JobSet or PyTorchJob name label). On Kubernetes
/// (a namespace is known) a key from NCCLINSP_JOB_ID or NCCLINSP_JOB_ID_FROM without a '/' becomes
/// `<namespace>/<key>`, so equal job names in two namespaces stay two jobs; scheduler ids are
/// cluster-unique as they are. Without any source the key is `host:<node>:<pid>`: this process
/// alone, never merged with another job.
inline job_identity resolve_job_identity(const env_reader& e, long pid) {
  job_identity id;
  if (!e.text("NCCLINSP_K8S_NAMESPACE", id.k8s_namespace)) e.text("POD_NAMESPACE", id.k8s_namespace);
  if (!e.text("NCCLINSP_K8S_POD", id.k8s_pod)) e.text("POD_NAME", id.k8s_pod);
  if (!e.text("NCCLINSP_NODE_NAME", id.node) && !e.text("NODE_NAME", id.node)) id.node = host_name();

  auto namespaced = [&](std::string key) {
    if (!id.k8s_namespace.empty() && key.find('/') == std::string::npos) key = id.k8s_namespace + "/" + key;
    return key;
  };
  std::string key, slurm;
  const bool on_slurm = e.text("SLURM_JOB_ID", slurm);
  if (e.text("NCCLINSP_JOB_ID", key)) {
    id.job_id = namespaced(key);
  } else if (on_slurm) {
    id.job_id = slurm;
  } else if (e.text("PBS_JOBID", key) || e.text("LSB_JOBID", key) || e.text("FLUX_JOB_ID", key)) {
    id.job_id = key;
  } else if (const char* from = e.raw("NCCLINSP_JOB_ID_FROM")) {
    if (!is_env_name(from))
      e.warn("NCCLINSP_JOB_ID_FROM", from, "the name of an environment variable, such as JOB_NAME");
    else if (e.text(from, key))
      id.job_id = namespaced(key);
    else if (!e.raw(from))
      emitf(e.log(), log_level::warn, "NCCLINSP_JOB_ID_FROM names {}, which is not set: no job key from it", from);
  }
  if (id.job_id.empty()) {
    id.job_id = "host:" + id.node + ":" + std::to_string(pid);
    id.job_from_fallback = true;
  }
  id.slurm_job_id = on_slurm ? slurm : id.job_id;
  return id;
}

}  // namespace ncclinsp::detail
