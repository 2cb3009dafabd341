"""``mlharness system``: write the system description the submission checker requires."""

from __future__ import annotations

import argparse
from pathlib import Path

from mlharness.cli.render import console
from mlharness.errors import ConfigError
from mlharness.rules import DEFAULT_ROUND, ROUNDS, load
from mlharness.submission import system as sysdesc
from mlharness.files import write_json_atomic, write_text_atomic

#: fields `mlharness submit` fills in from its flags
SET_BY_SUBMIT = ("submitter", "division")

EXAMPLES = """examples:
  mlharness system template --output my-system.toml     # fields the machine cannot tell
  mlharness system detect --name my-system --from my-system.toml --output systems/
  mlharness system detect --name my-system --output systems/   # defaults for the rest (listed)

exit codes: 0 written and complete, 1 written but the checker would reject a field (each is
            listed with the TEMPLATE -> --from fix), 2 bad input
"""


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("system", help="detect and write the system description (systems/<name>.json)",
                       description="Write systems/<name>.json with every field the MLPerf submission "
                       "checker requires: detected from this machine (CPU, caches, memory, storage, "
                       "OS, framework) plus a TOML you edit.", epilog=EXAMPLES,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    ssub = p.add_subparsers(dest="system_command", metavar="ACTION")
    d = ssub.add_parser("detect", help="write systems/<name>.json", epilog=EXAMPLES,
                        formatter_class=argparse.RawDescriptionHelpFormatter)
    d.add_argument("--name", required=True, help="system name (becomes the file and directory name)")
    d.add_argument("--from", dest="from_toml", type=Path,
                   help="TOML with the fields to set or override (see `system template`)")
    d.add_argument("--output", type=Path, default=Path("systems"), help="directory (default systems/)")
    d.add_argument("--round", default=DEFAULT_ROUND, choices=ROUNDS, help="rules to check against")
    d.add_argument("--force", action="store_true", help="overwrite an existing description")
    d.set_defaults(func=detect)
    t = ssub.add_parser("template", help="write a TOML of the fields to fill in by hand")
    t.add_argument("--output", type=Path, required=True, help="TOML file to write")
    t.add_argument("--force", action="store_true", help="overwrite an existing file")
    t.set_defaults(func=template)
    p.set_defaults(func=lambda args: (p.print_help(), 2)[1])


def detect(args: argparse.Namespace) -> int:
    sysdesc.check_name("system", args.name)  # confined to --output
    if args.output.exists() and not args.output.is_dir():
        raise ConfigError(f"--output {args.output} is not a directory",
                          hint="give the directory that receives <name>.json (e.g. systems/)")
    user = sysdesc.load_user_toml(args.from_toml) if args.from_toml else None
    desc, defaulted = sysdesc.describe(args.name, user)
    target = args.output / f"{args.name}.json"
    if target.exists() and not args.force:
        raise ConfigError(f"{target} exists", hint="pass --force to replace it")
    write_json_atomic(target, desc)
    console.print(f"wrote [bold]{target}[/] ({len(desc)} fields)")
    if defaulted:
        console.print("[yellow]defaults used (review them; set them in --from TOML):[/] "
                      + ", ".join(f"{k}={desc[k]!r}" for k in defaulted), highlight=False)
    # submit writes submitter and division into the tree's copy: not missing here
    later = {k: desc.get(k) or "(set by mlharness submit)" for k in SET_BY_SUBMIT}
    problems = sysdesc.problems({**desc, **later}, load(args.round))
    for pr in problems:
        console.print(f"[red]✗[/] {pr.message} — {pr.meaning}", highlight=False)
    if not problems:
        console.print(f"[green]✓[/] every field the {args.round} checker requires is present "
                      "(submitter and division are set by `mlharness submit`)")
        return 0
    toml = args.from_toml or Path("my-system.toml")
    first = "" if args.from_toml else \
        f"  mlharness system template --output {toml}     # the fields a machine cannot tell\n"
    console.print(f"{len(problems)} field(s) the {args.round} checker would reject; fix them in a "
                  f"TOML and write the description again:\n{first}"
                  f"  (edit {toml})\n"
                  f"  mlharness system detect --name {args.name} --from {toml} "
                  f"--output {args.output} --force", highlight=False)
    return 1


def template(args: argparse.Namespace) -> int:
    if args.output.exists() and not args.force:
        raise ConfigError(f"{args.output} exists", hint="pass --force to replace it")
    write_text_atomic(args.output, sysdesc.TEMPLATE)
    console.print(f"wrote {args.output}; edit it, then `mlharness system detect --name NAME "
                  f"--from {args.output}`")
    return 0


