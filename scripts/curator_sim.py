"""The oracle curator behind scripts/curator-sim (run that, not this)."""

import argparse
import glob
import json
import os
import subprocess
import sys
import time

import pyarrow.parquet as pq

RECORD_FIELDS = ("id", "persona_id", "kind", "source_path", "created_at", "text")
SENSITIVE = "sensitive_boundary_or_safety_record"
KIND_THRESHOLD = 0.80


def read_style(style):
    out = []
    for path in sorted(glob.glob("data/training/*/*.jsonl")):
        with open(path, encoding="utf-8") as f:
            for line in f:
                r = json.loads(line)
                if r.get("style") == style:
                    out.append(r)
    return out


def write_jsonl(path, rows):
    with open(path, "w", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")


def sh(cmd, log):
    started = time.time()
    with open(log, "a", encoding="utf-8") as f:
        f.write("$ " + " ".join(cmd) + "\n")
        f.flush()
        done = subprocess.run(cmd, stdout=f, stderr=f)
    if done.returncode not in (0, 4):
        sys.exit(f"curator-sim: {' '.join(cmd)} exited {done.returncode}; see {log}")
    return time.time() - started


def decide(item, gold):
    """The oracle's decision line for one queued tag, or None (not decidable)."""
    kinds = gold.get("tom_kinds") or []
    line = {"run_id": item["run_id"], "item_id": item["item_id"], "curator": "oracle",
            "decided_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    if not kinds:
        line["decision"] = "reject"
        return line
    if item["label"] in kinds:
        line["decision"] = "accept"
    else:
        line["decision"] = "relabel"
        line["label"] = kinds[0]
    if gold.get("affect") and gold["affect"] != item["affect"]:
        line["affect"] = gold["affect"]
    if gold.get("intensity") and gold["intensity"] != item["intensity"]:
        line["intensity"] = gold["intensity"]
    return line


def queue_of(staging):
    run = open(os.path.join(staging, "LATEST"), encoding="utf-8").read().strip()
    path = os.path.join(staging, "runs", run, "quarantine.parquet")
    return pq.read_table(path).to_pylist()


def evaluate(binary, unseen, heads, log):
    cmd = [binary, "eval", "--json", "--data", unseen]
    if heads:
        cmd += ["--heads-dir", heads]
    with open(log, "a", encoding="utf-8") as f:
        out = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=f, check=True).stdout
    first = json.loads(out)[0] if out.strip().startswith(b"[") else json.loads(out)
    p = first["policy"]
    return {
        "coverage": p["coverage"],
        "promoted": p["promoted_tags"],
        "kind": p["promoted_tag_precision"],
        "affect": p["promoted_affect_precision"],
        "intensity": p["promoted_intensity_precision"],
        "no_signal": p["promoted_on_no_signal_records"],
    }


def main():
    ap = argparse.ArgumentParser(prog="scripts/curator-sim")
    ap.add_argument("style")
    ap.add_argument("--bin", required=True)
    ap.add_argument("--nights", type=int, default=3)
    ap.add_argument("--budget", type=int, default=100)
    ap.add_argument("--work", default=None)
    a = ap.parse_args()
    records = read_style(a.style)
    if len(records) < 4 * (a.nights + 1):
        sys.exit(f"curator-sim: style {a.style!r} has {len(records)} labeled records; too few")
    work = a.work or os.path.join("target", "curator-sim", a.style)
    os.makedirs(work, exist_ok=True)
    log = os.path.join(work, "log.txt")
    open(log, "w").close()
    size = len(records) // (a.nights + 1)
    nights = [records[i * size:(i + 1) * size] for i in range(a.nights)]
    unseen = os.path.join(work, "unseen.jsonl")
    write_jsonl(unseen, records[a.nights * size:])
    gold = {r["id"]: r["gold"] for r in records}
    staging = os.path.join(work, "staging")
    heads = None
    curve = [("before", 0, 0.0, evaluate(a.bin, unseen, heads, log))]
    for n, night in enumerate(nights, 1):
        inp = os.path.join(work, f"night-{n}.jsonl")
        write_jsonl(inp, [{k: r[k] for k in RECORD_FIELDS if k in r} for r in night])
        cmd = [a.bin, "run", "--input", inp, "--nodes", "data/training/nodes.jsonl",
               "--staging", staging]
        if heads:
            cmd += ["--heads-dir", heads]
        sh(cmd, log)
        items = [i for i in queue_of(staging)
                 if i["item_type"] in ("tag", "annotation") and i["label"]
                 and SENSITIVE not in (i["reasons"] or []) and i["record_id"] in gold]
        # Closest to the kind threshold first: where a decision teaches most.
        items.sort(key=lambda i: (abs((i["confidence"] or 0) - KIND_THRESHOLD), i["item_id"]))
        lines = [d for d in (decide(i, gold[i["record_id"]]) for i in items[:a.budget]) if d]
        decisions = os.path.join(work, f"decisions-{n}.jsonl")
        write_jsonl(decisions, lines)
        sh([a.bin, "curate", "apply", decisions, "--staging", staging], log)
        heads = os.path.join(work, f"heads-{n}")
        took = sh([a.bin, "train", "--adapters", "models/artifacts/adapters",
                   "--curated", staging, "--out", heads], log)
        curve.append((f"night {n}", len(lines), took, evaluate(a.bin, unseen, heads, log)))
    print(f"curator-sim {a.style}: {a.nights} nights of {size} records, "
          f"budget {a.budget}, unseen {len(records) - a.nights * size} records")
    print("| after | decisions | refit s | coverage | promoted | kind P | affect P | intensity P | no-signal |")
    print("|---|---|---|---|---|---|---|---|---|")
    def f3(x):
        return "-" if x is None else f"{x:.3f}"

    for name, d, took, m in curve:
        print(f"| {name} | {d} | {took:.0f} | {f3(m['coverage'])} | {m['promoted']} | "
              f"{f3(m['kind'])} | {f3(m['affect'])} | {f3(m['intensity'])} | {m['no_signal']} |")


if __name__ == "__main__":
    main()
