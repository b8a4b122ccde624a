"""The commands built from option dataclasses (:mod:`xmr.fields`), and how they fail.

:func:`command` turns option dataclasses into a typer command (typer reads the generated
function's signature), so a command's flags, defaults and help are not typed a second time;
a field holding an option group (:func:`~xmr.fields.group`) adds that group's flags. It also
refuses, before the command runs, an output (a flag declared ``output``, a default output
folder, the tracking store) inside a Ray job's copy of ``--working-dir``
(:func:`~xmr.fields.check_outputs`). Only typer and yaml are imported here (``xmr --help``
stays fast). Configs never import this module: their fields are declared in
:mod:`xmr.fields`.
"""

from __future__ import annotations

import inspect
import signal
import typing
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import MISSING, Field, dataclass
from typing import Annotated, Any

import typer

from xmr.errors import USER_ERRORS
from xmr.fields import (
    GROUP,
    OPTION,
    OptionSpec,
    check_outputs,
    group_fields,
    is_storage,
    option_fields,
    parameter_name,
    parameter_names,
)
from xmr.stops import Stopped, exit_code, handling_stops, stop_signal
from xmr.storage import STORAGE_ENV

LIST_FLAGS = ("--seeds",)
"""Flags that take several values (``--seeds 0 1 2``), which click reads as one comma list."""


def join_list_values(args: Sequence[str], flags: Sequence[str] = LIST_FLAGS) -> list[str]:
    """``args`` with the values after each of ``flags`` joined into its one comma list, up to
    the next flag: ``--seeds 0 1 2`` becomes ``--seeds 0,1,2`` (click has no option of a
    variable number of values); a comma list or ``--seeds=0,1`` is left as it is.

    >>> join_list_values(["train", "--seeds", "0", "1", "2", "--epochs", "3"])
    ['train', '--seeds', '0,1,2', '--epochs', '3']
    """
    out: list[str] = []
    index = 0
    while index < len(args):
        out.append(args[index])
        index += 1
        if out[-1] in flags:
            values = []
            while index < len(args) and not args[index].startswith("-"):
                values.append(args[index])
                index += 1
            if values:
                out.append(",".join(values))
    return out


def fail(message: str) -> typer.Exit:
    """Print ``error: message`` (red, on stderr) and return the exit (code 2) to raise."""
    typer.secho(f"error: {message}", fg=typer.colors.RED, err=True)
    return typer.Exit(code=2)


@contextmanager
def user_errors() -> Iterator[None]:
    """Turn :data:`~xmr.errors.USER_ERRORS` raised in the block into ``error: ...``, exit 2."""
    try:
        yield
    except USER_ERRORS as exc:
        raise fail(str(exc)) from exc


@dataclass(frozen=True)
class Overrides:
    """A group of :func:`command` whose flags all default to unset (None): the command gets
    the values given as a dict, to lay over a config file. Help shows the dataclass default."""

    cls: type


def _parameter(item: Field, annotation: Any, *, unset: bool) -> inspect.Parameter:
    spec: OptionSpec = item.metadata[OPTION]
    kind = spec.cli_type or (str | None if is_storage(annotation) else annotation)
    name = spec.flag or item.name.replace("_", "-")
    is_bool = kind is bool or kind == bool | None
    declarations = [f"--{name}/--no-{name}" if is_bool else f"--{name}"]
    text, default = spec.help, item.default
    if spec.default_folder is not None:
        text = (
            f"{text} (default: ./{spec.default_folder}, or ${STORAGE_ENV}/{spec.default_folder} "
            f"when {STORAGE_ENV} is set)"
        )
    if unset:  # the flag defaults to None (not given); the help says what that means
        if item.default not in (MISSING, None):
            shown = (f"--{name}" if item.default else f"--no-{name}") if is_bool else item.default
            text = f"{text} (default: {shown})"
        kind, default = kind | None, None
    info = (
        typer.Argument(help=text, show_default=False, metavar=name.upper().replace("-", "_"))
        if spec.positional
        else typer.Option(*declarations, help=text, show_default=not unset)
    )
    return inspect.Parameter(
        parameter_name(item),
        inspect.Parameter.KEYWORD_ONLY,
        default=inspect.Parameter.empty if default is MISSING else default,
        annotation=Annotated[kind, info],
    )


def command(run: Callable[..., None], *groups: type | Overrides) -> Callable[..., None]:
    """A typer command whose flags are the option fields of ``groups``, in order.

    A field of a group declared with :func:`~xmr.fields.group` adds its option group's
    flags (unset by default) after the group's own, and gets the dict of those set.
    ``run`` gets one argument per group: an instance of the dataclass built from its flags
    (so its ``__post_init__`` checks, and :func:`check_outputs`, run before ``run`` does; a
    :data:`USER_ERRORS` there is a one-line error), or for an :class:`Overrides` group the dict
    of its flags (None: unset; ``run`` checks what it builds from them).
    The command's help is ``run``'s docstring. ``run`` runs within
    :func:`~xmr.stops.handling_stops`: SIGINT or SIGTERM ends it with one line on stderr and
    exit code 130 or 143 (:func:`~xmr.stops.exit_code`).
    """
    parameters: list[inspect.Parameter] = []
    names: list[dict[str, str]] = []  # per group: field name -> parameter name
    held: list[dict[str, dict[str, str]]] = []  # per group: group field -> its own names
    for group in groups:
        cls = group.cls if isinstance(group, Overrides) else group
        hints = typing.get_type_hints(cls)
        names.append(parameter_names(cls))
        parameters += [
            _parameter(item, hints[item.name], unset=isinstance(group, Overrides))
            for item in option_fields(cls)
        ]
        held.append({})
        for item in group_fields(cls):
            inner = item.metadata[GROUP]
            inner_hints = typing.get_type_hints(inner)
            held[-1][item.name] = parameter_names(inner)
            parameters += [
                _parameter(own, inner_hints[own.name], unset=True) for own in option_fields(inner)
            ]
    declared = [p.name for p in parameters]
    duplicated = sorted({name for name in declared if declared.count(name) > 1})
    if duplicated:
        raise ValueError(f"options declared twice: {duplicated}")

    def invoke(**values: Any) -> None:
        arguments = []
        with user_errors():
            for group, own, groups_held in zip(groups, names, held, strict=True):
                given = {name: values[parameter] for name, parameter in own.items()}
                if isinstance(group, Overrides):
                    arguments.append(given)
                    continue
                for name, inner in groups_held.items():
                    set_flags = {key: values[parameter] for key, parameter in inner.items()}
                    given[name] = {k: v for k, v in set_flags.items() if v is not None}
                arguments.append(group(**given))
                check_outputs(arguments[-1])
        with handling_stops():
            try:
                run(*arguments)
            except BaseException as exc:
                signum = stop_signal(exc)
                if signum is None:
                    raise
                said = str(exc) if isinstance(exc, Stopped) and str(exc) else ""
                said = said or f"stopped by {signal.Signals(signum).name}"
                typer.secho(said, fg=typer.colors.YELLOW, err=True)
                raise typer.Exit(code=exit_code(signum)) from exc

    invoke.__signature__ = inspect.Signature(parameters)  # type: ignore[attr-defined]
    invoke.__doc__ = run.__doc__
    invoke.__name__ = run.__name__
    invoke.__qualname__ = run.__qualname__
    invoke.__module__ = run.__module__
    return invoke
