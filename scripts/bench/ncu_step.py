#!/usr/bin/env python3
"""Summarises one forward step of an `ncu --csv --page raw` log (scripts/gpu-device.sh ncustep):
kernel by kernel, the calls, GPU time, DRAM bytes read and the rate, with the step's total.

Steps are cut at the embedding kernels (each forward pass starts with one); the bandwidth
probe's kernels (`read_kernel`, `fill_kernel`) are left out. ncu runs kernels one at a time,
so programmatic-launch overlap is not in these times: their sum is above a real step's.

usage: ncu_step.py CSV [STEP]   (STEP: index among the steps, default -1, the last)
"""
import collections
import csv
import sys


def main():
    path = sys.argv[1]
    which = int(sys.argv[2]) if len(sys.argv) > 2 else -1
    with open(path, newline="") as f:
        lines = [l for l in f if l.startswith('"')]
    rows = csv.reader(lines)
    head = next(rows)
    next(rows)  # units
    ki = head.index("Kernel Name")
    ti = head.index("gpu__time_duration.sum")
    bi = head.index("dram__bytes_read.sum")
    kernels = []
    for r in rows:
        name = r[ki]
        if name.startswith(("read_kernel", "fill_kernel")):
            continue
        num = lambda s: float(s.replace(",", "")) if s else 0.0
        kernels.append((name.split("(")[0][:64], num(r[ti]), num(r[bi])))
    starts = [i for i, k in enumerate(kernels) if "embed_kernel" in k[0]]
    if not starts:
        sys.exit("no embedding kernel: not a forward pass log")
    bounds = starts + [len(kernels)]
    s = which % len(starts)
    step = kernels[bounds[s]:bounds[s + 1]]
    agg = collections.OrderedDict()
    for name, t, b in step:
        a = agg.setdefault(name, [0, 0.0, 0.0])
        a[0] += 1
        a[1] += t
        a[2] += b
    total = sum(t for _, t, _ in step)
    print(f"step {s} of {len(starts)}: {len(step)} kernels, {total / 1e3:.1f} us")
    print(f"{'kernel':64s} {'calls':>5s} {'us':>9s} {'us/call':>8s} {'share':>6s} {'MB':>8s} {'GB/s':>6s}")
    for name, (c, t, b) in sorted(agg.items(), key=lambda kv: -kv[1][1]):
        rate = b / t if t else 0.0
        print(f"{name:64s} {c:5d} {t / 1e3:9.1f} {t / c / 1e3:8.2f} {100 * t / total:5.1f}% "
              f"{b / 1e6:8.1f} {rate:6.0f}")


if __name__ == "__main__":
    main()
