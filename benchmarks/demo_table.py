"""The demo's tables for the README, in a tracked results file: runs `memphis demo` (one run of each
mode after a warm-up: it is a demonstration, not a measurement; benchmarks/run.py's `exploration`
workload is the same session measured with repeats) and writes its tables under the commit, date
and machine that made them.

    python benchmarks/demo_table.py [--rows N] [--out DIR]     # writes DIR/demo.md and DIR/demo.png
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from memphis import demo  # noqa: E402
from rigor import provenance, provenance_line  # noqa: E402


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=400_000)
    parser.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results"))
    args = parser.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    tables = demo.main(rows=args.rows, plot_path=os.path.join(args.out, "demo.png"))
    with open(os.path.join(args.out, "demo.md"), "w") as f:
        f.write(f"`memphis demo --rows {args.rows}` ({provenance_line(provenance())}): {tables}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
