#!/usr/bin/env bash
# A sweep of formats x seeds as a Slurm job array: one flexpoint-train run per task, each in
# its own result folder (run.json + CSVs), then one table from all of them. From the
# repository root, after building (bash tools/test.sh, or the cmake commands of the README):
#
#   job=$(sbatch --parsable examples/slurm/sweep.sh)
#   sbatch --dependency=afterany:$job --wrap \
#     "python3 tools/merge_results.py results/sweep/*/ --csv results/sweep/merged.csv"
#
# The merge reads every folder's run.json and epochs.csv; a task that failed is reported and
# left out. Without Slurm the same tasks run one after another:
#
#   for i in $(seq 0 9); do SLURM_ARRAY_TASK_ID=$i bash examples/slurm/sweep.sh; done
#   python3 tools/merge_results.py results/sweep/*/
#
# MODEL, EPOCHS and EXTRA (more flexpoint-train options, e.g. "--data synthetic") may be set in
# the environment.
#SBATCH --job-name=flexpoint-sweep
#SBATCH --array=0-9
#SBATCH --cpus-per-task=2
#SBATCH --time=01:00:00
set -euo pipefail
FORMATS=(fp32 fp16 bf16 flex16_5 dfp16)
SEEDS=(0 1)
task="${SLURM_ARRAY_TASK_ID:?run as a Slurm array task, or set SLURM_ARRAY_TASK_ID}"
if [ "$task" -ge $(( ${#FORMATS[@]} * ${#SEEDS[@]} )) ]; then
  echo "sweep.sh: task $task is outside the array 0..$(( ${#FORMATS[@]} * ${#SEEDS[@]} - 1 ))" >&2
  exit 2
fi
fmt="${FORMATS[$((task % ${#FORMATS[@]}))]}"
seed="${SEEDS[$((task / ${#FORMATS[@]}))]}"
# shellcheck disable=SC2086 # EXTRA is a list of options
./build/release/tools/flexpoint-train --model "${MODEL:-cnn}" --epochs "${EPOCHS:-5}" \
  --formats "$fmt" --seed "$seed" --threads "${SLURM_CPUS_PER_TASK:-2}" ${EXTRA:-} \
  --out "results/sweep/$fmt-seed$seed" --quiet
