#!/usr/bin/env python3
"""Merge flexpoint-train result folders into one comparison table.

Each folder written by ``flexpoint-train --out DIR`` holds ``run.json`` (what it was made from)
and ``epochs.csv``. Runs are grouped by model, data (source and size), recipe (everything but
the seed) and run label; each group reports the number of seeds, the mean and standard
deviation of the final test accuracy, the gap of the mean to fp32's in the same setting, and
the mean seconds per epoch with its ratio to fp32's. A sweep that runs one format or seed per
job (see examples/slurm/) is merged with

    python3 tools/merge_results.py results/sweep/*/ [--csv merged.csv]

Exit status 2 with a message naming the folder when a folder is not a result folder.
"""
import argparse
import csv
import json
import math
import os
import sys


def load(folder):
    """(run.json as a dict, {label: final epoch row}) of one result folder."""
    rj, ep = os.path.join(folder, "run.json"), os.path.join(folder, "epochs.csv")
    for p in (rj, ep):
        if not os.path.isfile(p):
            raise ValueError(f"{folder}: no {os.path.basename(p)} (not a flexpoint-train "
                             "result folder, or written by a version without run.json)")
    with open(rj, encoding="utf-8") as f:
        try:
            run = json.load(f)
        except json.JSONDecodeError as e:
            raise ValueError(f"{rj}: not valid JSON ({e})") from None
    for key in ("model", "data", "recipe", "runs"):
        if key not in run:
            raise ValueError(f"{rj}: no '{key}'")
    last = {}
    with open(ep, newline="", encoding="utf-8") as f:
        for row in csv.DictReader(f):
            try:
                if int(row["epoch"]) >= int(last.get(row["run"], {"epoch": -1})["epoch"]):
                    last[row["run"]] = row
            except (KeyError, ValueError):
                raise ValueError(f"{ep}: a row without a valid run or epoch: {row}") from None
    return run, last


def setting(run, with_policy=True):
    """Everything that must agree between seeds of one experiment (and, with_policy=False,
    between a policy's runs and the fp32 run it is compared with)."""
    recipe = {k: v for k, v in run["recipe"].items() if k not in ("seed", "master_weights")}
    if with_policy:
        recipe["master_weights"] = run["recipe"].get("master_weights")
    data = run["data"]
    # the rank count of a --distributed job splits each batch, which changes the float
    # formats' bits: runs at different rank counts are different settings
    ranks = run.get("machine", {}).get("ranks", 1)
    return json.dumps([run["model"], data.get("name"), data.get("train_images"),
                       data.get("test_images"), data.get("pad"), recipe,
                       run.get("policy", "") if with_policy else "", ranks], sort_keys=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("folders", nargs="+", help="result folders (flexpoint-train --out)")
    ap.add_argument("--csv", help="also write the table as CSV to this file")
    args = ap.parse_args()
    groups = {}  # (setting, label) -> list of (seed, accuracy, seconds per epoch)
    for folder in args.folders:
        try:
            run, last = load(folder)
        except (OSError, ValueError) as e:
            print(f"merge_results: {e}", file=sys.stderr)
            return 2
        for r in run["runs"]:
            row = last.get(r["label"])
            if row is None:
                print(f"merge_results: {folder}: run {r['label']} has no epoch (it failed); "
                      "left out", file=sys.stderr)
                continue
            epochs = int(row["epoch"])  # 1-based in epochs.csv
            key = (setting(run), r["label"])
            groups.setdefault(key, []).append(
                (run["recipe"]["seed"], float(row["test_accuracy"]),
                 float(row["seconds"]), epochs, run["model"], run.get("policy", ""),
                 setting(run, with_policy=False)))
    if not groups:
        print("merge_results: no finished runs in the folders given", file=sys.stderr)
        return 2
    rows = []
    order = ["fp32", "fp16", "bf16", "flex16_5", "dfp16"]
    for (sett, label), xs in sorted(groups.items(), key=lambda kv: (
            kv[1][0][6], kv[1][0][5], order.index(kv[0][1].split(":")[0])
            if kv[0][1].split(":")[0] in order else 9, kv[0][1])):
        accs = [x[1] for x in xs]
        mean = sum(accs) / len(accs)
        sd = math.sqrt(sum((a - mean) ** 2 for a in accs) / (len(accs) - 1)) if len(accs) > 1 \
            else float("nan")
        spe = sum(x[2] for x in xs) / len(xs)
        rows.append({"setting": sett, "base": xs[0][6], "model": xs[0][4], "policy": xs[0][5],
                     "run": label, "seeds": len(xs), "epochs": xs[0][3], "acc_mean": mean,
                     "acc_sd": sd, "s_per_epoch": spe})
    for r in rows:
        # the fp32 run of the same setting, else the policy-free fp32 run of the same recipe
        ref = [q for q in rows if q["setting"] == r["setting"] and q["run"] == "fp32"] or \
              [q for q in rows if q["base"] == r["base"] and q["run"] == "fp32" and
               not q["policy"]]
        r["gap"] = 100 * (r["acc_mean"] - ref[0]["acc_mean"]) if ref else float("nan")
        r["time_ratio"] = r["s_per_epoch"] / ref[0]["s_per_epoch"] if ref else float("nan")
    print("| model | policy | run | seeds | epochs | test accuracy | sd | gap to fp32 | s/epoch "
          "| time ratio |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        sd = "—" if math.isnan(r["acc_sd"]) else f"{r['acc_sd']:.4f}"
        gap = "—" if math.isnan(r["gap"]) else f"{r['gap']:+.2f}"
        ratio = "—" if math.isnan(r["time_ratio"]) else f"{r['time_ratio']:.2f}×"
        print(f"| {r['model']} | {r['policy'] or '—'} | {r['run']} | {r['seeds']} | "
              f"{r['epochs']} | "
              f"{r['acc_mean']:.4f} | {sd} | {gap} | {r['s_per_epoch']:.1f} | {ratio} |")
    if args.csv:
        with open(args.csv, "w", newline="", encoding="utf-8") as f:
            w = csv.writer(f)
            w.writerow(["model", "policy", "run", "seeds", "epochs", "test_accuracy_mean",
                        "test_accuracy_sd", "gap_to_fp32_points", "seconds_per_epoch",
                        "time_ratio"])
            for r in rows:
                w.writerow([r["model"], r["policy"], r["run"], r["seeds"], r["epochs"],
                            f"{r['acc_mean']:.6f}", f"{r['acc_sd']:.6f}", f"{r['gap']:.4f}",
                            f"{r['s_per_epoch']:.3f}", f"{r['time_ratio']:.4f}"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
