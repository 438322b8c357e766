"""A Kubernetes-style environment through the real sink (job_writer): no Slurm variables, the
downward API's NODE_NAME, POD_NAMESPACE, POD_NAME and a JobSet name passed on by
NCCLINSP_JOB_ID_FROM. The file carries job_id "<namespace>/<name>", slurm_job_id the same (NVIDIA's
dashboard), node the Kubernetes node name (not the pod's host name), k8s_namespace and k8s_pod; two
namespaces running a job of the same name on one node write two files with two job keys."""
import os
import re

from deploy_common import check, file_job, finish, prom_files, scratch, start_writer

d = scratch("k8s")
for ns in ("team-a", "team-b"):
    env = {"NCCL_INSPECTOR_DUMP_DIR": d, "NODE_NAME": "gpu-node-17", "POD_NAMESPACE": ns,
           "POD_NAME": f"llama-workers-0-{ns[-1]}", "JOBSET_NAME": "llama", "NCCLINSP_JOB_ID_FROM": "JOBSET_NAME",
           "NCCLINSP_PROM_KEEP_FILES": "1"}
    rc, err = finish(start_writer("GPU-0000aaaa-1111-2222-3333-444455556666", "exit", env))
    check(rc == 0 and "WARN" not in err, f"{ns}: the job publishes without a warning ({err.strip()})")
files = prom_files(d)
check(len(files) == 2, f"two namespaces, same job name, same GPU: two files {files}")
for ns in ("team-a", "team-b"):
    name = next(n for n in files if f".job-{ns}_llama." in n)
    text = open(os.path.join(d, name)).read()
    check(file_job(os.path.join(d, name)) == f"{ns}/llama", f"{ns}: owner line names job {ns}/llama")
    series = [l for l in text.splitlines() if l.startswith("ncclinsp_ops_total{")]
    check(series, f"{ns}: op series written")
    labels = dict(re.findall(r'(\w+)="([^"]*)"', series[0]))
    want = {"job_id": f"{ns}/llama", "slurm_job_id": f"{ns}/llama", "node": "gpu-node-17", "k8s_namespace": ns,
            "k8s_pod": f"llama-workers-0-{ns[-1]}"}
    check({k: labels.get(k) for k in want} == want, f"{ns}: {want}")
    check("namespace" not in labels and "pod" not in labels, f"{ns}: no namespace/pod labels to be renamed exported_*")
print("PASS")
