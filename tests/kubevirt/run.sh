#!/usr/bin/env bash
# Starts KubeVirt's own virt-controller and virt-api (target/lab/bin/ferry-kubevirt, tests/kubevirt/build.sh)
# against a running lab, as virt-operator would have set them up, by hand:
#   usage: tests/kubevirt/run.sh LAB_STATE_DIR [VIRT_API_PORT]      (stop: kill the pids in DIR/kubevirt/*.pid)
# In LAB_STATE_DIR/kubevirt/: pki/ (CA, virt-api serving cert for 127.0.0.1, handler client cert),
# kubeconfigs of the two ServiceAccounts (TokenRequest), logs/, *.pid.
# What it creates in the cluster: namespace kubevirt; KubeVirt's CRDs (replacing the lab's schema-less
# virtualmachines/virtualmachineinstances), schema-less stubs of CDI's cdis/cdiconfigs/storageprofiles/datasources
# (the lab's DataVolume CRD makes both components watch them); KubeVirt's RBAC for virt-api and
# virt-controller; the KubeVirt CR `kubevirt` with status.phase=Deployed (what virt-operator writes; both
# components read their configuration only from a KubeVirt CR with a phase); ConfigMap kubevirt-ca;
# virt-api's validating and mutating webhook configurations pointing at https://127.0.0.1:PORT.
set -euo pipefail
LAB=$(cd "$1" && pwd)
PORT=${2:-18443}
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BIN="$ROOT/target/lab/bin"
KV="$LAB/kubevirt"
NS=kubevirt
k() { "$BIN/kubectl" --kubeconfig "$LAB/kubeconfig" "$@"; }
say() { echo "kubevirt/run: $*" >&2; }
mkdir -p "$KV/pki" "$KV/logs"

# ---- certificates (virt-operator keeps these in Secrets kubevirt-virt-api-certs, kubevirt-virt-handler-certs) --
P="$KV/pki"
if [ ! -f "$P/ca.crt" ]; then
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 3650 -subj "/CN=kubevirt.io@ferry-lab" \
    -keyout "$P/ca.key" -out "$P/ca.crt" 2>/dev/null
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=virt-api.$NS.pod.cluster.local" \
    -keyout "$P/virt-api.key" -out "$P/virt-api.csr" 2>/dev/null
  openssl x509 -req -in "$P/virt-api.csr" -CA "$P/ca.crt" -CAkey "$P/ca.key" -CAcreateserial -days 3650 -out "$P/virt-api.crt" \
    -extfile <(printf 'subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:virt-api.%s.svc\nextendedKeyUsage=serverAuth\nkeyUsage=digitalSignature,keyEncipherment\n' "$NS") 2>/dev/null
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=kubevirt.io:system:client:virt-handler" \
    -keyout "$P/handler.key" -out "$P/handler.csr" 2>/dev/null
  openssl x509 -req -in "$P/handler.csr" -CA "$P/ca.crt" -CAkey "$P/ca.key" -CAcreateserial -days 3650 -out "$P/handler.crt" \
    -extfile <(printf 'extendedKeyUsage=clientAuth\nkeyUsage=digitalSignature\n') 2>/dev/null
fi

# ---- cluster objects ---------------------------------------------------------------------------------------
k create namespace "$NS" --dry-run=client -o yaml | k apply -f - >/dev/null
# The lab's own virtualmachines/virtualmachineinstances CRDs are schema-less; KubeVirt's replace them.
"$BIN/ferry-kubevirt" manifests --namespace "$NS" --only crds,cdi-stubs | k apply --server-side --force-conflicts -f - >/dev/null
"$ROOT/tests/lab/wait-established.sh" "$BIN/kubectl" --kubeconfig "$LAB/kubeconfig" -- \
  -l 'app.kubernetes.io/component=kubevirt' >/dev/null
"$ROOT/tests/lab/wait-established.sh" "$BIN/kubectl" --kubeconfig "$LAB/kubeconfig" -- \
  kubevirts.kubevirt.io virtualmachines.kubevirt.io virtualmachineinstances.kubevirt.io cdiconfigs.cdi.kubevirt.io >/dev/null
"$BIN/ferry-kubevirt" manifests --namespace "$NS" --only rbac | k apply --server-side --force-conflicts -f - >/dev/null
k -n "$NS" create configmap kubevirt-ca --from-file=ca-bundle="$P/ca.crt" --dry-run=client -o yaml | k apply -f - >/dev/null
cat <<YAML | k apply -f - >/dev/null
apiVersion: kubevirt.io/v1
kind: KubeVirt
metadata: {name: kubevirt, namespace: $NS}
spec:
  configuration:
    developerConfiguration: {}
YAML
# virt-operator writes status; virt-api and virt-controller ignore a KubeVirt CR without a phase, and
# take the default architecture from status.defaultArchitecture (empty: every VMI is refused with
# "unsupported architecture: ").
k -n "$NS" patch kubevirt kubevirt --subresource=status --type=merge \
  -p '{"status":{"phase":"Deployed","observedKubeVirtVersion":"v1.8.3","targetKubeVirtVersion":"v1.8.3","defaultArchitecture":"amd64"}}' >/dev/null

# ---- ServiceAccount kubeconfigs (virt-api's admitters tell virt-controller's writes by its SA) --------------
server=$(k config view --raw -o jsonpath='{.clusters[0].cluster.server}')
k config view --raw -o jsonpath='{.clusters[0].cluster.certificate-authority-data}' | base64 -d >"$KV/lab-ca.crt"
for sa in kubevirt-controller kubevirt-apiserver; do
  token=$(k -n "$NS" create token "$sa" --duration 48h)
  cfg="$KV/$sa.kubeconfig"; rm -f "$cfg"
  "$BIN/kubectl" --kubeconfig "$cfg" config set-cluster lab --server "$server" --certificate-authority "$KV/lab-ca.crt" --embed-certs >/dev/null
  "$BIN/kubectl" --kubeconfig "$cfg" config set-credentials "$sa" --token "$token" >/dev/null
  "$BIN/kubectl" --kubeconfig "$cfg" config set-context lab --cluster lab --user "$sa" --namespace "$NS" >/dev/null
  "$BIN/kubectl" --kubeconfig "$cfg" config use-context lab >/dev/null
done

# ---- processes ----------------------------------------------------------------------------------------------
start() { # name logfile args...
  local name=$1; shift
  if [ -f "$KV/$name.pid" ] && kill -0 "$(cat "$KV/$name.pid")" 2>/dev/null; then say "$name already runs"; return; fi
  setsid "$@" >"$KV/logs/$name.log" 2>&1 </dev/null &
  echo $! >"$KV/$name.pid"
  say "$name started (pid $!, log $KV/logs/$name.log)"
}
start virt-controller "$BIN/virt-controller" --kubeconfig "$KV/kubevirt-controller.kubeconfig" \
  --listen 127.0.0.1 --port $((PORT + 1)) --leader-elect-lease-duration 15s \
  --launcher-image quay.io/kubevirt/virt-launcher:v1.8.3 --exporter-image quay.io/kubevirt/virt-exportserver:v1.8.3 \
  --prom-cert-file "$P/virt-api.crt" --prom-key-file "$P/virt-api.key"
start virt-api "$BIN/virt-api" --kubeconfig "$KV/kubevirt-apiserver.kubeconfig" \
  --listen 127.0.0.1 --port "$PORT" --tls-cert-file "$P/virt-api.crt" --tls-key-file "$P/virt-api.key" \
  --handler-cert-file "$P/handler.crt" --handler-key-file "$P/handler.key"

for _ in $(seq 1 120); do
  if curl -sk --max-time 2 "https://127.0.0.1:$PORT/apis/subresources.kubevirt.io/v1/healthz" >/dev/null 2>&1 ||
     curl -sk --max-time 2 -o /dev/null -w '%{http_code}' "https://127.0.0.1:$PORT/" 2>/dev/null | grep -q '^[1-5]'; then break; fi
  kill -0 "$(cat "$KV/virt-api.pid")" || { say "virt-api exited:"; tail -20 "$KV/logs/virt-api.log" >&2; exit 1; }
  sleep 1
done
"$BIN/ferry-kubevirt" manifests --namespace "$NS" --only webhooks --webhook-url "https://127.0.0.1:$PORT" --ca-bundle "$P/ca.crt" |
  k apply --server-side --force-conflicts -f - >/dev/null
say "virt-api https://127.0.0.1:$PORT, webhooks registered; virt-controller metrics https://127.0.0.1:$((PORT + 1))"
