// Validates ncclinsp's Kubernetes manifests (ctest k8s_manifests):
//  - every object against the Kubernetes OpenAPI schema of its kind (kubernetes-models; the
//    PrometheusRule with @kubernetes-models/prometheus-operator). A JobSet has no schema there: its
//    Job templates are validated as batch/v1 Jobs, the rest only for the fields read below;
//  - each PrometheusRule's spec.groups with `promtool check rules` (--promtool);
//  - each dashboard ConfigMap's JSON;
//  - what ncclinsp needs of them: the identity variables from the downward API in every container
//    that loads the plugin, $(VAR) references defined before their use, the dump directory on the
//    textfile hostPath, one textfile host path everywhere, every such pod in the directory's group
//    (the cleaner DaemonSet's NCCLINSP_TEXTFILE_GID), and node-exporter's Helm values (--values)
//    reading that same path.
// The schemas check types, required fields, enums and formats; like the API server without strict
// field validation they do not reject an unknown field.
//
// usage: node validate.mjs [--promtool PATH] [--values node-exporter-values.yaml] FILE.yaml...
import { spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { basename, join } from "node:path";

import { PrometheusRule } from "@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1";
import { DaemonSet } from "kubernetes-models/apps/v1";
import { Job } from "kubernetes-models/batch/v1";
import { ConfigMap, Namespace, Service, ServiceAccount } from "kubernetes-models/v1";
import { parseAllDocuments, parse, stringify } from "yaml";

const models = {
  "v1/ConfigMap": ConfigMap,
  "v1/Namespace": Namespace,
  "v1/Service": Service,
  "v1/ServiceAccount": ServiceAccount,
  "apps/v1/DaemonSet": DaemonSet,
  "batch/v1/Job": Job,
  "monitoring.coreos.com/v1/PrometheusRule": PrometheusRule,
};
const DNS1123 = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/;
const TEXTFILE_VOLUME = "ncclinsp-textfile";

const args = process.argv.slice(2);
let promtool = null;
let valuesFile = null;
const files = [];
for (let i = 0; i < args.length; ++i) {
  if (args[i] === "--promtool") promtool = args[++i];
  else if (args[i] === "--values") valuesFile = args[++i];
  else files.push(args[i]);
}
if (files.length === 0) {
  console.error("usage: node validate.mjs [--promtool PATH] [--values FILE] FILE.yaml...");
  process.exit(2);
}

const errors = [];
const notes = [];
const textfilePaths = new Map(); // host path -> where it was seen
const textfileGids = new Set(); // the directory's group, from the cleaner DaemonSet
const pluginPods = []; // [where, pod spec] of every pod that loads the plugin
let validated = 0;

function schemaCheck(Model, obj, where) {
  try {
    new Model(obj).validate();
    ++validated;
  } catch (e) {
    errors.push(`${where}: ${e.message}`);
  }
}

// The pod-level checks, for any pod spec (a Job's, a DaemonSet's, a JobSet's templates).
function checkPod(spec, where) {
  const volumes = new Map((spec.volumes ?? []).map((v) => [v.name, v]));
  for (const v of volumes.values()) {
    if (v.name === TEXTFILE_VOLUME) {
      if (!v.hostPath) errors.push(`${where}: volume ${TEXTFILE_VOLUME} is not a hostPath (node-exporter cannot read it)`);
      else textfilePaths.set(v.hostPath.path, [...(textfilePaths.get(v.hostPath.path) ?? []), where]);
    }
  }
  for (const c of [...(spec.initContainers ?? []), ...(spec.containers ?? [])]) {
    const cw = `${where} container ${c.name}`;
    const env = c.env ?? [];
    const defined = new Set();
    for (const e of env) {
      for (const m of (e.value ?? "").matchAll(/\$\(([A-Za-z_][A-Za-z0-9_]*)\)/g)) {
        if (!defined.has(m[1])) errors.push(`${cw}: ${e.name} uses $(${m[1]}) before it is defined (Kubernetes leaves it unexpanded)`);
      }
      defined.add(e.name);
    }
    const byName = new Map(env.map((e) => [e.name, e]));
    if (byName.get("NCCLINSP_TEXTFILE_GID")?.value) textfileGids.add(Number(byName.get("NCCLINSP_TEXTFILE_GID").value));
    if (!byName.has("NCCL_PROFILER_PLUGIN")) continue;
    pluginPods.push([cw, spec]);
    const field = (name) => byName.get(name)?.valueFrom?.fieldRef?.fieldPath;
    for (const [name, path] of [
      ["NODE_NAME", "spec.nodeName"],
      ["POD_NAMESPACE", "metadata.namespace"],
      ["POD_NAME", "metadata.name"],
    ]) {
      if (field(name) !== path) errors.push(`${cw}: loads the plugin but ${name} is not the downward API's ${path}`);
    }
    if (!byName.has("NCCLINSP_JOB_ID") && !byName.has("NCCLINSP_JOB_ID_FROM")) {
      errors.push(`${cw}: loads the plugin with no job key (NCCLINSP_JOB_ID or NCCLINSP_JOB_ID_FROM)`);
    }
    const from = byName.get("NCCLINSP_JOB_ID_FROM")?.value;
    if (from && !byName.has(from)) errors.push(`${cw}: NCCLINSP_JOB_ID_FROM names ${from}, which the container does not set`);
    const plugin = byName.get("NCCL_PROFILER_PLUGIN").value ?? "";
    const dir = byName.get("NCCL_INSPECTOR_DUMP_DIR")?.value;
    const mounts = c.volumeMounts ?? [];
    if (plugin.startsWith("/") && !mounts.some((m) => plugin.startsWith(m.mountPath + "/"))) {
      errors.push(`${cw}: NCCL_PROFILER_PLUGIN=${plugin} is on no volume of the container`);
    }
    const dumpMount = mounts.find((m) => m.mountPath === dir);
    if (!dumpMount || dumpMount.name !== TEXTFILE_VOLUME) {
      errors.push(`${cw}: NCCL_INSPECTOR_DUMP_DIR=${dir} is not the mount of the ${TEXTFILE_VOLUME} volume`);
    }
  }
}

function checkRules(obj, where) {
  if (!promtool) {
    errors.push(`${where}: no --promtool given to check its groups`);
    return;
  }
  const dir = mkdtempSync(join(tmpdir(), "ncclinsp-rules-"));
  try {
    const file = join(dir, `${obj.metadata.name}.rules.yml`);
    writeFileSync(file, stringify({ groups: obj.spec.groups }, { lineWidth: 0 }));
    const r = spawnSync(promtool, ["check", "rules", file], { encoding: "utf8" });
    if (r.status !== 0) errors.push(`${where}: promtool check rules failed:\n${r.stdout}${r.stderr}`);
    else notes.push(`${where}: promtool: ${r.stdout.trim().split("\n").pop()}`);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

function checkDashboards(obj, where) {
  for (const [key, text] of Object.entries(obj.data ?? {})) {
    try {
      const d = JSON.parse(text);
      if (!d.uid || !d.title) errors.push(`${where}: ${key} has no uid or title`);
    } catch (e) {
      errors.push(`${where}: ${key} is not JSON: ${e.message}`);
    }
  }
}

for (const file of files) {
  let docs;
  try {
    docs = parseAllDocuments(readFileSync(file, "utf8"));
  } catch (e) {
    errors.push(`${file}: ${e.message}`);
    continue;
  }
  docs.forEach((doc, i) => {
    if (doc.errors.length) {
      errors.push(`${file} document ${i + 1}: ${doc.errors.map((e) => e.message).join("; ")}`);
      return;
    }
    const obj = doc.toJS();
    if (obj === null) return;
    const where = `${basename(file)}: ${obj.kind ?? "?"}/${obj.metadata?.name ?? "?"}`;
    if (!DNS1123.test(obj.metadata?.name ?? "")) errors.push(`${where}: metadata.name is not a DNS-1123 name`);
    const key = `${obj.apiVersion}/${obj.kind}`;
    if (key === "jobset.x-k8s.io/v1alpha2/JobSet") {
      const jobs = obj.spec?.replicatedJobs;
      if (!Array.isArray(jobs) || jobs.length === 0) errors.push(`${where}: spec.replicatedJobs is empty`);
      for (const rj of jobs ?? []) {
        if (!DNS1123.test(rj.name ?? "")) errors.push(`${where}: replicatedJob name ${rj.name} is not a DNS-1123 name`);
        schemaCheck(Job, { metadata: { name: `${obj.metadata.name}-${rj.name}` }, spec: rj.template?.spec }, `${where} replicatedJob ${rj.name}`);
        if (rj.template?.spec?.template?.spec) checkPod(rj.template.spec.template.spec, `${where} replicatedJob ${rj.name}`);
      }
      notes.push(`${where}: no JobSet schema in kubernetes-models; its Job templates validated as batch/v1 Jobs`);
      return;
    }
    const Model = models[key];
    if (!Model) {
      errors.push(`${where}: no schema known for ${key}`);
      return;
    }
    schemaCheck(Model, obj, where);
    const pod = obj.spec?.template?.spec;
    if (pod) checkPod(pod, where);
    if (obj.kind === "PrometheusRule") checkRules(obj, where);
    if (obj.kind === "ConfigMap" && obj.metadata?.labels?.grafana_dashboard === "1") checkDashboards(obj, where);
  });
}

if (textfilePaths.size > 1) {
  errors.push(`the ${TEXTFILE_VOLUME} hostPath differs between manifests: ${JSON.stringify(Object.fromEntries(textfilePaths))}`);
}
for (const gid of textfileGids) {
  for (const [where, spec] of pluginPods) {
    const sc = spec.securityContext ?? {};
    const groups = [...(sc.supplementalGroups ?? []), sc.fsGroup, sc.runAsGroup].filter((g) => g !== undefined);
    if (!groups.includes(gid) && sc.runAsUser !== 0) {
      errors.push(`${where}: the pod is not in the textfile directory's group ${gid} (supplementalGroups), so it cannot write there`);
    }
  }
}
if (valuesFile) {
  const values = parse(readFileSync(valuesFile, "utf8"));
  const ne = values?.["prometheus-node-exporter"] ?? {};
  const mount = (ne.extraHostVolumeMounts ?? []).find((m) => m.name === TEXTFILE_VOLUME);
  const arg = (ne.extraArgs ?? []).find((a) => a.startsWith("--collector.textfile.directory="));
  const where = basename(valuesFile);
  if (!mount) errors.push(`${where}: no prometheus-node-exporter.extraHostVolumeMounts entry ${TEXTFILE_VOLUME}`);
  else {
    if (!textfilePaths.has(mount.hostPath)) {
      errors.push(`${where}: node-exporter mounts ${mount.hostPath}, the jobs write to ${[...textfilePaths.keys()].join(", ")}`);
    }
    if (mount.readOnly !== true) errors.push(`${where}: node-exporter's mount of the textfile directory is not read-only`);
    if (arg !== `--collector.textfile.directory=${mount.mountPath}`) {
      errors.push(`${where}: node-exporter reads ${arg ?? "no textfile directory"}, the mount is at ${mount.mountPath}`);
    }
  }
  if (values?.grafana?.sidecar?.dashboards?.label !== "grafana_dashboard") {
    errors.push(`${where}: Grafana's dashboard sidecar does not select the grafana_dashboard label`);
  }
}

for (const n of notes) console.log(`note: ${n}`);
if (errors.length) {
  for (const e of errors) console.error(`error: ${e}`);
  console.error(`${errors.length} error(s) in ${files.length} file(s)`);
  process.exit(1);
}
console.log(`ok: ${validated} objects valid against their schemas in ${files.length} file(s)`);
