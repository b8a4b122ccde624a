"""README's commands: found, taken apart, parsed against the command lines, the jobs' plans run.

``tests/test_docs.py`` imports the finders and runs this file as a script in a fresh interpreter
(job scripts set up the console when they are imported, which a test process must not inherit):

    python tests/readme_commands.py README.md docs/*.md   # JSON: per command, parsed or why not

Each ``xmr`` command and job script is parsed with its flags and values (a renamed flag or a
value of the wrong type fails); each README job without ``--dataset`` (those run on ToyWorld)
runs with ``--dry-run`` in the current folder: it checks every option and prints its plan,
writing nothing. The other pages' commands are parsed only.
"""

from __future__ import annotations

import importlib.util
import json
import re
import shlex
import sys
from pathlib import Path
from typing import Any

import typer

REPO = Path(__file__).resolve().parents[1]


def readme_commands(text: str) -> list[str]:
    """The commands of ``text``: each line of its ``bash`` blocks (continuations joined,
    comments cut) and the ``python ray_jobs/…`` cells of its tables, in order."""
    commands = []
    for block in re.findall(r"^```bash\n(.*?)^```", text, flags=re.M | re.S):
        for line in block.replace("\\\n", " ").splitlines():
            line = re.sub(r"\s+#.*$", "", line).strip()
            if line and not line.startswith("#"):
                commands.append(" ".join(line.split()))
    for row in re.findall(r"^\|.*\|$", text, flags=re.M):
        commands += re.findall(r"`(python ray_jobs/\S+\.py)`", row)
    return commands


def invocations(command: str) -> list[list[str]]:
    """The argument lists of the xmr commands and job scripts that ``command`` runs: each part
    of an ``&&`` chain, a ``$(…)`` inside ``eval``, what follows ``ray job submit … --``."""
    found = []
    for part in command.split("&&"):
        argv = shlex.split(part)
        if argv[:1] == ["eval"]:
            argv = shlex.split(argv[1].removeprefix("$(").removesuffix(")"))
        if argv[:3] == ["ray", "job", "submit"]:
            argv = argv[argv.index("--") + 1 :]
        job = argv[:1] == ["python"] and argv[1].startswith("ray_jobs/")
        if job or argv[:1] == ["xmr"] or argv[:3] == ["python", "-m", "xmr.synth"]:
            found.append(argv)
    return found


def is_job(argv: list[str]) -> bool:
    return argv[:1] == ["python"] and argv[1].startswith("ray_jobs/")


def _app(argv: list[str]) -> tuple[typer.Typer, list[str]]:
    """The typer app ``argv`` runs and the arguments it gets."""
    if argv[0] == "xmr":
        from xmr.cli import app

        return app, argv[1:]
    if argv[1:3] == ["-m", "xmr.synth"]:
        from xmr.synth.__main__ import app

        return app, argv[3:]
    script = REPO / argv[1]
    if str(script.parent) not in sys.path:  # as `python <script>` puts its folder first
        sys.path.insert(0, str(script.parent))
    spec = importlib.util.spec_from_file_location(f"ray_jobs_{script.stem}", script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # a job script of this repository: its typer app
    return module.app, argv[2:]


def check(argv: list[str], *, dry_run: bool = True) -> dict[str, Any]:
    """``argv`` parsed by its command (``error``: why not), and with ``dry_run`` a job's
    ``--dry-run`` (``exit_code``, ``output``) when it runs on ToyWorld."""
    from typer.testing import CliRunner

    app, rest = _app(argv)
    command = typer.main.get_command(app)
    args = list(rest)
    while args and args[0] in getattr(command, "commands", {}):
        command, args = command.commands[args[0]], args[1:]
    result: dict[str, Any] = {"argv": argv, "error": None}
    if hasattr(command, "commands"):
        result["error"] = "names a group, not a command"
        return result
    try:
        command.make_context(shlex.join(argv), args)
    except Exception as exc:  # click's usage errors: an unknown flag, a bad value
        result["error"] = f"{type(exc).__name__}: {exc}"
        return result
    if dry_run and is_job(argv) and "--dataset" not in argv:
        ran = CliRunner().invoke(app, [*rest, "--dry-run"])
        result.update(exit_code=ran.exit_code, output=ran.output)
    return result


def main(readme: str, *pages: str) -> None:
    """Print the :func:`check` of every command of ``readme`` (jobs on ToyWorld dry-run) and of
    ``pages`` (parsed only), each once, as one JSON list."""
    results, seen = [], set()
    for page, run_jobs in [(readme, True), *((p, False) for p in pages)]:
        for command in readme_commands(Path(page).read_text()):
            for argv in invocations(command):
                if json.dumps(argv) not in seen:
                    seen.add(json.dumps(argv))
                    results.append({"page": page, **check(argv, dry_run=run_jobs)})
    print(json.dumps(results))


if __name__ == "__main__":
    main(*sys.argv[1:])
