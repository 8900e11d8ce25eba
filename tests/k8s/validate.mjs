// validate.mjs: the Kubernetes objects on stdin (a JSON array of {file, doc}; tests/it_deploy.sh
// converts deploy/k8s/*.yaml with python3-yaml) validated against the Kubernetes API's schemas,
// which ship in the npm packages kubernetes-models (the core API) and
// @kubernetes-models/prometheus-operator (ServiceMonitor): no download at test time. Prints one
// "ok"/"FAIL" line per object; exits 1 when any failed or an apiVersion/kind has no schema here.
const mods = {
  "v1": "kubernetes-models/v1",
  "apps/v1": "kubernetes-models/apps/v1",
  "autoscaling/v2": "kubernetes-models/autoscaling/v2",
  "batch/v1": "kubernetes-models/batch/v1",
  "policy/v1": "kubernetes-models/policy/v1",
  "monitoring.coreos.com/v1": "@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1",
};
let input = "";
for await (const chunk of process.stdin) input += chunk;
let failed = 0;
for (const { file, doc } of JSON.parse(input)) {
  const what = `${file}: ${doc.kind} ${doc.metadata && doc.metadata.name}`;
  const path = mods[doc.apiVersion];
  let Kind;
  try {
    Kind = path && (await import(path))[doc.kind];
  } catch (e) {
    Kind = undefined;
  }
  if (!Kind) {
    console.log(`FAIL k8s schema: ${what}: no schema for ${doc.apiVersion} ${doc.kind}`);
    failed++;
    continue;
  }
  try {
    new Kind(doc).validate();
    console.log(`ok   k8s schema: ${what} (${doc.apiVersion})`);
  } catch (e) {
    console.log(`FAIL k8s schema: ${what}: ${e.message}`);
    failed++;
  }
}
console.log(`k8s schema: ${failed} failed`);
process.exit(failed ? 1 : 0);
