#!/usr/bin/env bash
# Validates examples/kubernetes/*.yaml against the Kubernetes API's JSON schemas, strictly
# (an unknown or misspelt field is an error), for the oldest release the manifests need
# (1.29: `backoffLimitPerIndex`, beta and on by default) and a current one — offline, with the
# schemas the PyPI package `kubernetes-validate` bundles (installed into a venv of its own from
# the registries, once). No cluster is run here: that the Jobs schedule, retry per index and
# resume is NOT checked (see docs/scale.md).
set -uo pipefail
cd "$(dirname "$0")/.."
VENV=${BERTPIPE_K8S_VENV:-$HOME/.cache/bertpipe-k8s-venv}
PKG=kubernetes-validate==1.37.0
if ! "$VENV/bin/kubernetes-validate" --version >/dev/null 2>&1; then
  { python3 -m venv "$VENV" && "$VENV/bin/pip" install -q "$PKG"; } || {
    echo "== Kubernetes manifests NOT CHECKED: could not install $PKG into $VENV"
    [ "${CI:-}" = true ] && exit 1
    exit 0
  }
fi
status=0
for version in 1.29.0 1.37.0; do
  "$VENV/bin/kubernetes-validate" --strict -k "$version" examples/kubernetes/*.yaml || status=1
done
exit $status
