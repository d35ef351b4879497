"""Run the efficacy corpus through the guard and print its figures.

    python benchmarks/efficacy/run.py                       # the engine, Policy() defaults
    python benchmarks/efficacy/run.py --paths engine,chat,sdk --policy legacy
    python benchmarks/efficacy/run.py --paths all --sample 3   # 3 trajectories per shape on the adapters

``--policy``: ``default`` (``Policy()``), ``legacy`` (the defaults before the efficacy work) or ``prototype`` (the
article's prototype's rules: ``Policy.prototype()``). ``--sample N``: on the adapters' paths, N trajectories of each
shape, the quickest (the engine always runs the whole corpus). ``--dump FILE``: write the corpus as JSON lines.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks.efficacy.corpus import build
from benchmarks.efficacy.paths import PATHS, run, sample
from benchmarks.efficacy.policies import POLICIES
from benchmarks.efficacy.score import figures, judge, table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--paths", default="engine", help=f"comma-separated, or 'all': {', '.join(PATHS)}")
    parser.add_argument("--policy", default="default", choices=sorted(POLICIES))
    parser.add_argument("--sample", type=int, default=None, help="trajectories per shape on the adapters' paths")
    parser.add_argument("--shapes", action="store_true", help="print the table per shape")
    parser.add_argument("--dump", type=Path, help="write the corpus as JSON lines and exit")
    args = parser.parse_args()
    corpus = build()
    if args.dump:
        with args.dump.open("w", encoding="utf-8") as out:
            for t in corpus:
                out.write(json.dumps(asdict(t)) + "\n")
        print(f"{len(corpus)} trajectories written to {args.dump}")
        return
    paths = PATHS if args.paths == "all" else tuple(args.paths.split(","))
    policy = POLICIES[args.policy]
    print(f"corpus: {len(corpus)} trajectories; policy {args.policy}: {policy}")
    for path in paths:
        chosen = corpus if path == "engine" else sample(corpus, args.sample, path)
        started = time.perf_counter()
        judged = [judge(run(t, path, policy=policy)) for t in chosen]
        seconds = time.perf_counter() - started
        print(f"\n{path} ({len(chosen)} trajectories, {seconds:.1f} s): {figures(judged).line()}")
        if args.shapes or path == "engine":
            print(table(judged))


if __name__ == "__main__":
    main()
