#!/usr/bin/env bash
# bertpipe's task arrays under a real Slurm, on this machine: installs Slurm, munge and MariaDB
# when they are missing and apt-get is there (as root), starts a one-node cluster with
# accounting (scripts/slurm-cluster.sh: munged, mariadbd, slurmdbd, slurmctld, slurmd, in a temp
# folder, stopped on exit), then runs tests/slurm.rs against it: examples/slurm/submit.sh and
# bertpipe-array.sbatch as a user submits them, arrays from 1 / stepped / throttled, a task
# cancelled with scancel and resubmitted, a chain stage as an array with a dependent plain run,
# eval as an array, and (BERTPIPE_SLURM_FEATURES=mpi) a 2-task data-parallel training. Prints the
# jobs' sacct lines.
#
# Without apt-get (or root), the script says plainly that Slurm was NOT CHECKED and why; with
# CI=true that is a failure.
set -uo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/bertpipe-target}"

not_checked() {
  echo "== Slurm NOT CHECKED: $1"
  if [ "${CI:-}" = true ]; then exit 1; fi
  exit 0
}

daemons=(sbatch slurmctld slurmd slurmdbd munged mariadbd mariadb-install-db)
missing=()
for d in "${daemons[@]}"; do command -v "$d" >/dev/null 2>&1 || missing+=("$d"); done
if [ ${#missing[@]} -gt 0 ]; then
  if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
    echo "== installing Slurm, munge and MariaDB (missing: ${missing[*]})"
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        slurm-wlm slurmdbd munge mariadb-server >/dev/null; } ||
      not_checked "apt-get could not install slurm-wlm slurmdbd munge mariadb-server"
  else
    not_checked "${missing[*]} not installed, and no apt-get run as root to install them"
  fi
fi
[ "$(id -u)" = 0 ] || not_checked "the cluster's daemons run as root (SlurmUser=root); run this as root"

work=$(mktemp -d /tmp/bertpipe-slurm.XXXXXX)
. scripts/slurm-cluster.sh
finish() { slurm_down; rm -rf "$work"; }
trap finish EXIT
if ! slurm_up "$work/cluster"; then
  for f in "$work"/cluster/log/*; do echo "--- $f"; tail -n 20 "$f"; done
  echo "== Slurm: the one-node cluster did not start" >&2
  exit 1
fi
sinfo

echo "== tests/slurm.rs under Slurm"
# BERTPIPE_SLURM_FEATURES=mpi adds the data-parallel training job (srun --mpi=pmix, OpenMPI).
features=()
[ -n "${BERTPIPE_SLURM_FEATURES:-}" ] && features=(--features "$BERTPIPE_SLURM_FEATURES")
cargo test --release --locked "${features[@]}" --test slurm -- --ignored --test-threads=1 --nocapture 2>&1 | tee "$work/tests.log"
status=${PIPESTATUS[0]}

echo "== sacct: every job this check ran"
sacct -X -a --format=JobID%14,JobName%18,State%12,ExitCode,Elapsed
if [ "$status" -ne 0 ]; then
  for f in "$work"/cluster/log/slurmctld.log "$work"/cluster/log/slurmd.log; do echo "--- $f"; tail -n 30 "$f"; done
  echo "== Slurm check FAILED" >&2
fi
exit "$status"
