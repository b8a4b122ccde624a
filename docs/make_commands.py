"""Write docs/commands.md from the command lines themselves, so the docs cannot drift from --help.

    python docs/make_commands.py           # rewrite docs/commands.md
    python docs/make_commands.py --check   # exit 1 if docs/commands.md is not what it would write

It reads only the public objects that ``--help`` prints from: each typer app turned into its
click command (``typer.main.get_command``), each parameter's ``get_help_record`` (flag, help
and the ``[default: …]`` suffix) and each command's ``help``. The apps: ``xmr`` (every
sub-command), ``python -m xmr.synth`` (the same command as ``xmr synth``) and every job script
in ``ray_jobs/``. ``tests/test_docs.py`` runs ``--check``.
"""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path
from typing import Any

import typer

REPO = Path(__file__).resolve().parents[1]
OUTPUT = REPO / "docs" / "commands.md"

HEADER = """\
# Commands

Every command's and job's flags, their defaults and help, as `--help` prints them. This file is
generated: `python docs/make_commands.py` writes it from the command lines, and
`tests/test_docs.py` fails when it differs from what they say. Do not edit it by hand.

What each command does beyond its flags (what it reads and writes, how it resumes) is in
[usage.md](usage.md); what every command shares (bad input, relative paths, logs, default
folders, names) in [architecture.md](architecture.md#what-every-command-shares).
"""


def _cell(text: str) -> str:
    """``text`` as one Markdown table cell: one line, pipes escaped."""
    return " ".join(text.split()).replace("|", "\\|")


def _split_extras(text: str) -> tuple[str, str]:
    """Click's help ``'Help.  [default: x; x>=1]'`` as ``('Help.', 'x; x>=1')``."""
    match = re.fullmatch(r"(.*?)\s*\[([^\[\]]*)\]", text, flags=re.S)
    if match is None or not re.match(r"(default|required|env var|\S+[<>]=?)", match[2]):
        return text, ""
    return match[1], match[2].removeprefix("default: ")


def _command_section(title: str, usage: str, command: Any) -> list[str]:
    """The Markdown of one command: its help, usage line and a table of its parameters."""
    ctx = typer.Context(command, info_name=usage)
    lines = [f"## `{title}`", ""]
    if command.help:
        lines += [command.help.strip(), ""]
    lines += ["```", " ".join([usage, *command.collect_usage_pieces(ctx)]), "```"]
    rows = []
    for param in command.params:
        if getattr(param, "hidden", False):
            continue
        record = param.get_help_record(ctx)
        if record is None:  # an argument: click prints none; name it with its own help
            name = param.human_readable_name
            help_text = getattr(param, "help", None) or ""
            rows.append((f"`{name}`", "required" if param.required else "", help_text))
            continue
        flags, help_text = record
        help_text, extras = _split_extras(help_text)
        rows.append((f"`{flags}`", extras, help_text))
    if rows:
        lines += ["", "| flag | default | help |", "|---|---|---|"]
        lines += [f"| {_cell(a)} | {_cell(b)} | {_cell(c)} |" for a, b, c in rows]
    return [*lines, ""]


def _walk(group: Any, prefix: str) -> list[tuple[str, Any]]:
    """(``xmr eval``, its command), … for ``group`` and its sub-groups, in declaration order."""
    found = []
    for name, command in getattr(group, "commands", {}).items():
        title = f"{prefix} {name}"
        if getattr(command, "commands", None):
            found += _walk(command, title)
        else:
            found.append((title, command))
    return found


def _job_app(path: Path) -> typer.Typer:
    if str(path.parent) not in sys.path:  # as `python <script>` puts its folder first
        sys.path.insert(0, str(path.parent))
    spec = importlib.util.spec_from_file_location(f"ray_jobs_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.app


def render() -> str:
    """The text of docs/commands.md."""
    from xmr.cli import app

    commands = _walk(typer.main.get_command(app), "xmr")
    jobs = [
        (f"python ray_jobs/{path.name}", typer.main.get_command(_job_app(path)))
        for path in sorted((REPO / "ray_jobs").glob("[!_]*.py"))  # _*.py: the scripts' helpers
    ]
    lines = [HEADER, "## Contents", ""]
    lines += [f"- [`{title}`](#{_anchor(title)})" for title, _ in commands + jobs]
    lines += [
        "",
        "`python -m xmr.synth` is the same command as `xmr synth` (what `ray job submit` runs).",
        "",
    ]
    for title, command in commands:
        lines += _command_section(title, title, command)
    lines += [
        "# Jobs",
        "",
        "The papers' experiments, one script each in `ray_jobs/`: `python ray_jobs/<job>.py`",
        "on this machine, or the same line after `ray job submit --working-dir . --` on a cluster",
        "([cluster.md](cluster.md)).",
        "",
    ]
    for title, command in jobs:
        lines += _command_section(title, title, command)
    return "\n".join(lines).rstrip("\n") + "\n"


def _anchor(title: str) -> str:
    """GitHub's anchor of a ``## `title` `` heading."""
    return re.sub(r"[^\w\- ]", "", title.lower()).replace(" ", "-")


def main(argv: list[str]) -> int:
    text = render()
    if "--check" in argv:
        if OUTPUT.read_text() != text:
            print(f"{OUTPUT.relative_to(REPO)} is stale: run python docs/make_commands.py")
            return 1
        return 0
    OUTPUT.write_text(text)
    print(f"wrote {OUTPUT.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(REPO))
    raise SystemExit(main(sys.argv[1:]))
