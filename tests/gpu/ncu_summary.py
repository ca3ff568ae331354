"""ncu_summary.py CSV [LABEL] - the kernel durations of an Nsight Compute run
(`ncu --metrics gpu__time_duration.sum --csv PROGRAM > CSV`) summed per kernel name, largest first:
where a training step's GPU time goes. Under ncu each kernel runs alone with its caches flushed, so
the sums are an upper bound on each kernel's share, and the gaps between kernels are not seen."""
import collections
import csv
import sys

UNITS = {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3}


def main():
    lines = open(sys.argv[1], errors="replace").read().splitlines()
    label = sys.argv[2] if len(sys.argv) > 2 else sys.argv[1]
    start = next((i for i, l in enumerate(lines) if l.startswith('"ID"')), None)
    total_us, count = collections.Counter(), collections.Counter()
    for row in csv.DictReader(lines[start:]) if start is not None else []:
        if row.get("Metric Name") != "gpu__time_duration.sum":
            continue
        name = row["Kernel Name"][:90]
        total_us[name] += float(row["Metric Value"].replace(",", "")) * UNITS.get(row["Metric Unit"], 1.0)
        count[name] += 1
    print(f"{label}: {sum(count.values())} kernels, {sum(total_us.values()) / 1e3:.2f} ms of GPU time in all")
    for name, us in total_us.most_common(40):
        print(f"{us / 1e3:9.3f} ms {count[name]:6d}x  {name}")


if __name__ == "__main__":
    main()
