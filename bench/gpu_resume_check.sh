#!/usr/bin/env bash
# Checkpoint and resume on 2 GPUs over NCCL, with the run's default settings (the Triton AdamW and, on GPUs,
# precision.master_weights optimizer): a tiny model trained 6 steps straight (saving at step 3), against the same
# run killed after step 3 and resumed. Prints both loss lists and their largest difference. Then the straight run
# again with its collectives in NCCL symmetric memory and flat shards (the two experiments), with flat shards alone,
# and with fp32 parameters instead of masters (precision.master_weights params): the same losses.
#   bash bench/gpu_resume_check.sh            (logs under $OUT, or /tmp/fsdp-resume-check)
set -u
OUT=${OUT:-/tmp/fsdp-resume-check}
work=$(mktemp -d)
export PYTHONPATH="$PWD/packages/trainer/src${PYTHONPATH:+:$PYTHONPATH}"
args=(--model.preset tiny --data.seq_len 256 --train.steps 6 --train.micro_batch_size 2 --checkpoint.every_steps 3
      --precision.reduce_dtype bf16)
mkdir -p "$OUT"
torchrun --standalone --nproc-per-node=2 -m fsdp_trainer "${args[@]}" --train.output_dir "$work/straight" > "$OUT/resume-straight.log" 2>&1
echo "straight rc=$?"
FSDP_TRAINER_FAULT_AFTER_STEP=3 torchrun --standalone --nproc-per-node=2 -m fsdp_trainer "${args[@]}" --train.output_dir "$work/killed" \
  > "$OUT/resume-killed.log" 2>&1
echo "killed rc=$? (expected non-zero)"
torchrun --standalone --nproc-per-node=2 -m fsdp_trainer "${args[@]}" --train.output_dir "$work/killed" > "$OUT/resume-resumed.log" 2>&1
echo "resumed rc=$?"
torchrun --standalone --nproc-per-node=2 -m fsdp_trainer "${args[@]}" --experimental.symmetric_memory true --experimental.flat_shards true \
  --train.output_dir "$work/symmetric" \
  > "$OUT/resume-symmetric.log" 2>&1
echo "symmetric rc=$?"
torchrun --standalone --nproc-per-node=2 -m fsdp_trainer "${args[@]}" --experimental.flat_shards true --train.output_dir "$work/flat" \
  > "$OUT/resume-flat.log" 2>&1
echo "flat rc=$?"
torchrun --standalone --nproc-per-node=2 -m fsdp_trainer "${args[@]}" --precision.master_weights params --train.output_dir "$work/params" \
  > "$OUT/resume-params.log" 2>&1
echo "params rc=$?"
python3 - "$work" <<'PY'
import json, sys
work = sys.argv[1]
straight = [json.loads(line) for line in open(f"{work}/straight/metrics.jsonl")]
resumed = [json.loads(line) for line in open(f"{work}/killed/metrics.jsonl")]
summary = json.load(open(f"{work}/straight/summary.json"))
print("adamw", summary["adamw"], "master_weights", summary.get("master_weights"))
print("straight", [round(r["loss"], 6) for r in straight])
print("resumed ", [round(r["loss"], 6) for r in resumed])
print("largest loss difference", max(abs(a["loss"] - b["loss"]) for a, b in zip(straight, resumed, strict=True)))
print("flat_shard_units", summary.get("flat_shard_units"), "all_gathers_sent_as_is", summary.get("all_gathers_sent_as_is"))
for other in ("symmetric", "flat", "params"):
    try:
        runs = [json.loads(line) for line in open(f"{work}/{other}/metrics.jsonl")]
        extra = json.load(open(f"{work}/{other}/summary.json"))
    except OSError as e:
        print(other, "missing:", e)
        continue
    print(other, [round(r["loss"], 6) for r in runs], "flat_shard_units", extra.get("flat_shard_units"),
          "largest difference from straight", max(abs(a["loss"] - b["loss"]) for a, b in zip(straight, runs, strict=True)))
PY
rm -rf "$work"
