#!/usr/bin/env bash
# Submits a whole bertpipe task array on Slurm: the scan phase (only when the pipeline has
# `dedup`, `near_dedup` or a `max_noise_quantile` filter, as `bertpipe pipeline validate --json`
# says), the run phase once every scan is done, and the merge once every task has finished.
# Nothing runs until its phase's dependencies are met.
# Options after the task count go to every sbatch (they override the script's #SBATCH lines).
#
#   examples/slurm/submit.sh pipelines/imdb.yaml /shared/out/imdb 8
#   examples/slurm/submit.sh pipelines/imdb.yaml /shared/out/imdb 8 --partition=cpu --cpus-per-task=4 --mem=8G
set -euo pipefail
usage="usage: submit.sh PIPELINE OUT TASKS [SBATCH OPTIONS...]"
PIPELINE=${1:?$usage}
OUT=${2:?$usage}
TASKS=${3:?$usage}
shift 3
BERTPIPE=${BERTPIPE:-bertpipe}
here=$(cd "$(dirname "$0")" && pwd)
# FIRST and STEP: the array below starts at 0 and steps by 1 (a resubmitted task needs them).
FIRST=0 STEP=1
export PIPELINE OUT BERTPIPE TASKS FIRST STEP

# Whether the tasks need the scan phase is bertpipe's to say, from the steps it reads (a `dedup`
# in a comment is no step): `pipeline validate --json` prints one key a line. A pipeline that
# does not validate stops here, before anything is submitted.
facts=$("$BERTPIPE" pipeline validate --json "$PIPELINE" --set "sink.path=$OUT")
if ! grep -Eq '"task_array_error": *null' <<<"$facts"; then
  echo "submit.sh: $PIPELINE cannot run as a task array:" \
    "$(sed -n 's/^ *"task_array_error": *"\(.*\)",\{0,1\}$/\1/p' <<<"$facts")" >&2
  exit 1
fi

dependency=()
scan=
if grep -Eq '"needs_scan": *true' <<<"$facts"; then
  scan=$(PHASE=scan sbatch --parsable --array="0-$((TASKS - 1))" --job-name=bertpipe-scan "$@" "$here/bertpipe-array.sbatch")
  dependency=(--dependency="afterok:${scan%%;*}")
fi
run=$(PHASE=run sbatch --parsable "${dependency[@]}" --array="0-$((TASKS - 1))" --job-name=bertpipe-run "$@" "$here/bertpipe-array.sbatch")
merge=$(sbatch --parsable --dependency="afterok:${run%%;*}" --job-name=bertpipe-merge --cpus-per-task=4 \
  --output="bertpipe-%x-%j.log" "$@" --wrap="$(printf '%q shards merge %q' "$BERTPIPE" "$OUT")")
echo "submitted: ${scan:+scan $scan, }run $run, merge $merge"
echo "a failed task I: PHASE=run TASKS=$TASKS PIPELINE=$PIPELINE OUT=$OUT sbatch --array=I $* $here/bertpipe-array.sbatch (it resumes), then: $BERTPIPE shards merge $OUT"
