#!/usr/bin/env bash
# Runs the three phases of examples/kubernetes in order, each after the previous one completed
# (Kubernetes has no dependencies between Jobs). The scan phase is needed because
# pipelines/imdb.yaml has `dedup`; a pipeline without dedup or max_noise_quantile skips it.
#
#   kubectl apply -f pvc.yaml     # once: the shared volume (copy pipelines/ and the corpus onto it)
#   examples/kubernetes/run.sh
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
for phase in scan run merge; do
  kubectl delete job "bertpipe-imdb-$phase" --ignore-not-found
  kubectl apply -f "$here/$phase-job.yaml"
  if ! kubectl wait --for=condition=complete "job/bertpipe-imdb-$phase" --timeout=24h; then
    echo "phase $phase failed: kubectl logs job/bertpipe-imdb-$phase; fix, then run this script again" >&2
    exit 1
  fi
done
echo "done: /data/out/imdb/manifest.json"
