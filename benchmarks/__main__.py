"""``python -m benchmarks run --suite NAME|all --size small|full`` (NAME: see benchmarks.suites.SUITES)."""

import argparse
import ast
import importlib
import json
import re
import sys
from pathlib import Path

from ._common import environment, environment_markdown, log
from .suites import SUITES

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "RESULTS.md"


def _jsonable(obj):
    import numpy as np

    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, float) and obj != obj:
        return None
    return obj


def parse_args(argv=None):
    p = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run one suite or all of them")
    run.add_argument("--suite", required=True, choices=[*SUITES, "all"])
    run.add_argument(
        "--size",
        default="small",
        choices=["small", "full"],
        help="small: under 2 minutes per suite, for anyone; full: the reference figures",
    )
    run.add_argument("--repeats", type=int, default=None, help="override the suite's repeats")
    run.add_argument(
        "--no-write",
        action="store_true",
        help="print only; do not touch benchmarks/RESULTS.md or benchmarks/out/",
    )
    run.add_argument("--results", type=Path, default=RESULTS, help="the Markdown file to update")
    run.add_argument(
        "--param",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="override one of the suite's parameters (VALUE a Python literal); repeatable",
    )
    return p.parse_args(argv)


def parse_params(items):
    """``--param NAME=VALUE`` items as a dict (each VALUE a Python literal)."""
    out = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name.isidentifier():
            raise SystemExit(f"--param expects NAME=VALUE (a Python literal); got {item!r}")
        try:
            out[name] = ast.literal_eval(value)
        except (ValueError, SyntaxError) as err:
            raise SystemExit(f"--param {name}: {value!r} is not a Python literal ({err})") from err
    return out


def section_markers(name, size):
    return f"<!-- BEGIN suite={name} size={size} -->", f"<!-- END suite={name} size={size} -->"


def update_results(path, name, size, text):
    """Replace (or append) the suite's section of the results file."""
    begin, end = section_markers(name, size)
    block = f"{begin}\n{text.strip()}\n{end}"
    old = path.read_text() if path.exists() else "# Benchmark results\n"
    pattern = re.compile(re.escape(begin) + r".*?" + re.escape(end), re.S)
    new = pattern.sub(lambda _: block, old) if pattern.search(old) else old.rstrip() + "\n\n" + block + "\n"
    path.write_text(new)


def run_suite(name, size, repeats, write, results_path, argv, params=None):
    module = importlib.import_module(f"benchmarks.suites.{name}")
    log(f"suite {name} ({size}) starting")
    env = environment()
    result = module.run(size, repeats=repeats, log=log, **(params or {}))
    command = "python -m benchmarks " + " ".join(argv)
    header = (
        f"## {result['title']} (`--size {size}`)\n\n"
        f"Command: `{command}`\n\n{environment_markdown(env)}\n"
    )
    print(header)
    print(result["table"])
    if write:
        out = HERE / "out"
        out.mkdir(exist_ok=True)
        payload = {"suite": name, "size": size, "command": command, "environment": env, **result}
        (out / f"{name}-{size}.json").write_text(json.dumps(_jsonable(payload), indent=1))
        update_results(results_path, name, size, header + "\n" + result["markdown"])
        log(f"suite {name}: section updated in {results_path}")
    return result


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    if args.param and not args.no_write:
        raise SystemExit("--param runs a suite other than its recorded form: add --no-write (RESULTS.md keeps "
                         "the suite's own runs)")
    names = SUITES if args.suite == "all" else (args.suite,)
    results = {}
    for name in names:
        results[name] = run_suite(
            name, args.size, args.repeats, not args.no_write, args.results, argv, parse_params(args.param)
        )
    return results


if __name__ == "__main__":
    main()
