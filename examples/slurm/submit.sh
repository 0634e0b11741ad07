#!/usr/bin/env bash
# Submits a whole bertpipe task array on Slurm: the scan phase (only when the pipeline has
# `dedup` or a `max_noise_quantile` filter), the run phase once every scan is done, and the
# merge once every task has finished. Nothing runs until its phase's dependencies are met.
#
#   examples/slurm/submit.sh pipelines/imdb.yaml /shared/out/imdb 8
set -euo pipefail
PIPELINE=${1:?usage: submit.sh PIPELINE OUT TASKS}
OUT=${2:?usage: submit.sh PIPELINE OUT TASKS}
TASKS=${3:?usage: submit.sh PIPELINE OUT TASKS}
BERTPIPE=${BERTPIPE:-bertpipe}
here=$(cd "$(dirname "$0")" && pwd)
export PIPELINE OUT BERTPIPE

dependency=()
if grep -Eq 'type: *dedup|max_noise_quantile' "$PIPELINE"; then
  scan=$(PHASE=scan sbatch --parsable --array="0-$((TASKS - 1))" --job-name=bertpipe-scan "$here/bertpipe-array.sbatch")
  dependency=(--dependency="afterok:$scan")
fi
run=$(PHASE=run sbatch --parsable "${dependency[@]}" --array="0-$((TASKS - 1))" --job-name=bertpipe-run "$here/bertpipe-array.sbatch")
merge=$(sbatch --parsable --dependency="afterok:$run" --job-name=bertpipe-merge --cpus-per-task=4 \
  --wrap="$BERTPIPE shards merge '$OUT'")
echo "submitted: ${scan:+scan $scan, }run $run, merge $merge"
echo "a failed task: PHASE=run sbatch --array=I $here/bertpipe-array.sbatch (it resumes), then: $BERTPIPE shards merge $OUT"
