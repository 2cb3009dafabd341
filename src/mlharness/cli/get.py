"""``mlharness get``: fetch, adopt, list and re-verify the artefacts benchmarks need."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.progress import BarColumn, Progress, TaskID, TextColumn, TimeRemainingColumn
from rich.table import Table

from mlharness.cli.render import console, console_err, print_json
from mlharness.errors import ConfigError, HarnessError

if TYPE_CHECKING:  # artefacts itself is imported when the command runs (see get_command)
    from mlharness.artefacts import Artefact, Catalogue, Outcome
    from mlharness.artefacts import Progress as ArtefactProgress

EXAMPLES = """examples:
  mlharness get --list                              # every artefact, and what the cache holds
  mlharness get resnet50-onnx                       # download, resume, verify (md5 from MLCommons)
  mlharness get resnet50-onnx imagenet-val --from /data/ILSVRC2012_val
  mlharness get bert-onnx bert-vocab squad-dev      # everything BERT needs, or:
  mlharness get -b bert-99 [--format pytorch]       # what `run -b bert-99` takes from the cache
  mlharness get squad-dev --from ~/Downloads/dev-v1.1.json   # adopt a copy you have (verified)
  mlharness get --check                             # re-hash the whole cache
  mlharness get retinanet-onnx --mirror http://mirror.internal/mlperf   # air-gapped site

The cache is $MLHARNESS_CACHE or ~/.cache/mlharness (--cache-dir); artefacts live under
<cache>/artefacts/<path>, and a mirror serves the same paths under its base URL
(--mirror or $MLHARNESS_MIRROR; with a mirror only the mirror is asked). A download is written
to <file>.part, resumed where it stopped, and renamed onto <file> only after its checksum is
the published one. Datasets under licence (ImageNet) and gated files (MLCommons members' LLM
downloads) are never downloaded: get them as `--list` says, then `get NAME --from PATH`.
The catalogue with the source of every checksum: docs/get.md.
"""


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("get", help="download, verify and cache models and datasets",
                       description="Bring the models, datasets, vocabularies and calibration "
                       "lists a benchmark needs into the cache: downloaded with resume and "
                       "retries and verified against the published checksum, or adopted from "
                       "a copy you have (--from).",
                       epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("names", nargs="*", metavar="NAME", help="artefacts to get (see --list)")
    what = p.add_mutually_exclusive_group()
    what.add_argument("--list", action="store_true",
                      help="list the catalogue and what the cache holds (with -b: one benchmark)")
    what.add_argument("--check", action="store_true",
                      help="re-hash the cached artefacts (all, or the NAMEs)")
    p.add_argument("--from", dest="source", type=Path, metavar="PATH",
                   help="adopt this file or folder (verified, linked or copied, never moved)")
    p.add_argument("--mirror", metavar="URL", default=os.environ.get("MLHARNESS_MIRROR"),
                   help="base URL serving the cache's relative paths (default $MLHARNESS_MIRROR)")
    p.add_argument("--benchmark", "-b", metavar="NAME",
                   help="without NAMEs: what `run -b NAME` takes from the cache; with --list: "
                   "only this benchmark's artefacts")
    p.add_argument("--format", dest="framework", choices=("onnx", "pytorch"), default="onnx",
                   help="with -b: the model format (onnx for onnxruntime/openvino, pytorch)")
    p.add_argument("--cache-dir", type=Path, metavar="DIR",
                   help="cache root (default $MLHARNESS_CACHE or ~/.cache/mlharness)")
    p.add_argument("--catalogue", type=Path, metavar="FILE",
                   help="another catalogue file, a site's own (default $MLHARNESS_CATALOGUE, "
                   "else the shipped one; `run` reads the same)")
    p.add_argument("--retries", type=_count, default=4, metavar="N",
                   help="retries per source after the first attempt (default 4)")
    p.add_argument("--timeout", type=_seconds, default=30.0, metavar="S",
                   help="seconds without data before an attempt is retried (default 30)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.set_defaults(func=get_command)


def _count(text: str) -> int:
    if not text.isdigit() or int(text) > 100:
        raise argparse.ArgumentTypeError(f"not a count from 0 to 100: {text!r}")
    return int(text)


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0.05 <= value <= 3600:
        raise argparse.ArgumentTypeError(f"not a number of seconds from 0.05 to 3600: {text!r}")
    return value


def get_command(args: argparse.Namespace) -> int:
    # lazy: artefacts (http, ssl; ~30 modules) stays out of `mlharness --help`
    from mlharness.artefacts import artefacts_root, load_catalogue
    from mlharness.artefacts.download import check_mirror

    catalogue = load_catalogue(args.catalogue)
    root = artefacts_root(args.cache_dir)
    if args.mirror:  # a malformed mirror is exit 2 before anything is fetched
        check_mirror(args.mirror)
    if args.list:
        return _list(catalogue, root, args)
    if args.check:
        return _check(catalogue, root, args)
    if not args.names and args.benchmark:
        args.names = _run_defaults(catalogue, args.benchmark, args.framework)
    if not args.names:
        raise ConfigError("name at least one artefact",
                          hint="`mlharness get --list` shows them; "
                          "e.g. mlharness get resnet50-onnx")
    entries = [catalogue.get(name) for name in dict.fromkeys(args.names)]
    adopt_into = _adoption_target(entries, args.source)
    return _get(entries, adopt_into, catalogue, root, args)


def _run_defaults(catalogue: Catalogue, benchmark: str, framework: str) -> list[str]:
    """The artefacts `run -b BENCHMARK` takes from the cache for a model format."""
    chosen = catalogue.defaults.get(benchmark)
    if chosen is None:
        raise ConfigError(f"no defaults for benchmark {benchmark!r} in the catalogue",
                          hint=f"benchmarks with defaults: {', '.join(catalogue.defaults)}")
    model = chosen.model.get(framework)
    names = [model, *chosen.also.get(framework, []), chosen.dataset, chosen.vocab]
    return [name for name in names if name]


def _adoption_target(entries: list[Artefact], source: Path | None) -> str | None:
    """The one NAME that ``--from`` is for: the only one named, or the only one mlharness
    cannot download (a licensed or gated artefact)."""
    if source is None:
        return None
    if len(entries) == 1:
        return entries[0].name
    own = [a.name for a in entries if a.access in ("user", "gated")]
    if len(own) == 1:
        return own[0]
    raise ConfigError(f"--from {source}: which of {', '.join(a.name for a in entries)} is it?",
                      hint="adopt one artefact per command: mlharness get NAME --from PATH")


def _get(entries: list[Artefact], adopt_into: str | None, catalogue: Catalogue, root: Path,
         args: argparse.Namespace) -> int:
    # lazy: artefacts (http, ssl; ~30 modules) stays out of `mlharness --help`
    from mlharness.artefacts import Policy, get

    policy = Policy(retries=args.retries, timeout_s=args.timeout)
    outcomes: list[dict[str, Any]] = []
    failed: list[HarnessError] = []
    with DownloadDisplay(enabled=not args.json) as display:
        for artefact in entries:
            try:
                outcome = get(artefact, root, source=args.source if artefact.name == adopt_into
                              else None, mirror=args.mirror, policy=policy, report=display,
                              catalogue=catalogue)
            except HarnessError as exc:
                failed.append(exc)
                display.error(artefact.name, exc)
                continue
            outcomes.append({"name": outcome.name, "action": outcome.action,
                             "path": str(outcome.path), "checksum": outcome.digest,
                             "verified": outcome.verified})
            display.done(outcome)
    if args.json:
        print_json({"artefacts": outcomes,
                    "failed": [{"message": e.message, "hint": e.hint} for e in failed]})
    if failed:
        return max(e.exit_code for e in failed)
    return 0


def _list(catalogue: Catalogue, root: Path, args: argparse.Namespace) -> int:
    # lazy: artefacts (http, ssl; ~30 modules) stays out of `mlharness --help`
    from mlharness.artefacts import status

    entries = (catalogue.for_benchmark(args.benchmark) if args.benchmark
               else list(catalogue.artefacts.values()))
    if args.benchmark and not entries:
        raise ConfigError(f"no artefact is listed for benchmark {args.benchmark!r}",
                          hint="`mlharness get --list` shows every benchmark's")
    rows: list[dict[str, Any]] = []  # the JSON rows; the table reads them too
    for a in entries:
        st = status(a, root)
        rows.append({"name": a.name, "kind": a.kind, "benchmarks": a.benchmarks,
                     "framework": a.framework, "precision": a.precision, "access": a.access,
                     "state": st.state, "path": str(st.path), "checksum": a.checksum_text(),
                     "checksum_source": a.checksum_source, "summary": a.summary,
                     "urls": a.urls, "obtain": a.obtain, "licence": a.licence})
    if args.json:
        print_json(rows)
        return 0
    table = Table(title=f"{len(rows)} artefact(s); cache {root}", title_justify="left")
    for col in ("name", "benchmarks", "kind", "how", "state", "summary"):
        table.add_column(col, overflow="fold", no_wrap=col in ("name", "state"))
    for r in rows:
        kind = r["kind"] + (f" {r['framework']} {r['precision']}" if r["framework"] else "")
        table.add_row(r["name"], ", ".join(r["benchmarks"]), kind, _HOW[r["access"]],
                      _STATE.get(r["state"], r["state"]), r["summary"])
    console.print(table)
    return 0


def _mb(n: float | None) -> str:
    return f"{(n or 0) / 1e6:,.1f} MB"


_HOW = {"download": "download", "user": "--from (licence)", "gated": "--from (gated)",
        "bundled": "shipped", "prepare": "download + prepare"}
_STATE = {"cached": "[green]cached[/]", "bundled": "[green]shipped[/]",
          "checked": "[green]cached[/] (layout checked)",
          "unverified": "[yellow]cached, UNVERIFIED[/]", "missing": "-",
          "partial": "[yellow]partial[/]", "changed": "[red]changed[/]"}


def _check(catalogue: Catalogue, root: Path, args: argparse.Namespace) -> int:
    # lazy: artefacts (http, ssl; ~30 modules) stays out of `mlharness --help`
    from mlharness.artefacts import check

    with DownloadDisplay(enabled=not args.json) as display:
        results = check(catalogue, root, args.names or None, report=display)
    if not args.names:  # the whole cache: only what it holds
        results = [r for r in results if r.state not in ("missing", "bundled")]
    bad = [r for r in results if r.state == "bad"]
    if args.json:
        print_json([{"name": r.name, "state": r.state, "path": str(r.path), "detail": r.detail}
                    for r in results])
        return 1 if bad else 0
    table = Table(title=f"cache {root}: {len(results)} checked, {len(bad)} bad",
                  title_justify="left")
    for col in ("name", "state", "detail", "path"):
        table.add_column(col, overflow="fold", no_wrap=col in ("name", "state"))
    colour = {"ok": "green", "bundled": "green", "bad": "red", "unverified": "yellow",
              "partial": "yellow", "missing": "yellow"}
    for r in results:
        table.add_row(r.name, f"[{colour[r.state]}]{r.state.upper()}[/]", r.detail, str(r.path))
    console.print(table)
    return 1 if bad else 0


class DownloadDisplay:
    """Progress bars (size, rate, time left) driven by the library's Progress events."""

    def __init__(self, enabled: bool = True) -> None:
        self.enabled = enabled
        self.progress = Progress(TextColumn("[bold]{task.description}"), BarColumn(),
                                 TextColumn("{task.fields[detail]}"), TimeRemainingColumn(),
                                 console=console_err, transient=True, disable=not enabled)
        self.tasks: dict[tuple[str, str], TaskID] = {}

    def __enter__(self) -> DownloadDisplay:
        self.progress.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.progress.__exit__(*exc)

    def __call__(self, event: ArtefactProgress) -> None:
        if event.event == "retry":
            self._say(f"[yellow]{event.name}[/]: {event.message}")
            return
        if event.event == "done":
            return
        phase = {"verify": "verify", "items": "images"}.get(event.event, "download")
        key = (event.name, phase)
        if key not in self.tasks:
            self.tasks[key] = self.progress.add_task(f"{phase} {event.name}", total=event.total,
                                                     detail="")
        tid = self.tasks[key]
        self.progress.update(tid, completed=event.done, total=event.total)
        speed = next(t.speed for t in self.progress.tasks if t.id == tid)
        if phase == "images":
            rate = f" {speed:,.0f}/s" if speed else ""
            detail = f"{event.done:,}/{event.total or 0:,} images{rate}"
        else:
            size = f"/{_mb(event.total)}" if event.total else ""
            rate = f" {_mb(speed)}/s" if speed else ""
            detail = f"{_mb(event.done)}{size}{rate}"
        self.progress.update(tid, detail=detail)

    def done(self, outcome: Outcome) -> None:
        for key in [k for k in self.tasks if k[0] == outcome.name]:
            self.progress.remove_task(self.tasks.pop(key))
        what = {"cached": "already cached, nothing downloaded", "downloaded": "downloaded",
                "adopted": "adopted", "bundled": "ships with mlharness",
                "unpacked": "unpacked", "prepared": "prepared"}[outcome.action]
        if outcome.verified:
            check = f"[green]verified[/] {outcome.digest}"
        elif outcome.digest in (None, "unverified"):  # a folder: its layout was checked
            check = "[green]layout checked[/] (no per-file checksums are published)"
        else:
            check = ("[bold yellow]UNVERIFIED[/] (no published checksum; recorded sha256 "
                     f"{outcome.digest})")
        self._say(f"{outcome.name}: {what}, {check}\n  {outcome.path}")

    def error(self, name: str, exc: HarnessError) -> None:
        for key in [k for k in self.tasks if k[0] == name]:
            self.progress.remove_task(self.tasks.pop(key))
        hint = f"\n  [yellow]hint:[/] {exc.hint}" if exc.hint else ""
        self._say(f"[bold red]error:[/] {exc.message}{hint}")

    def _say(self, text: str) -> None:
        if self.enabled:
            self.progress.console.print(text, highlight=False, soft_wrap=True)
