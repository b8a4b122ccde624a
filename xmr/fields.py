"""Options declared once, on dataclasses: each field's flag, default, help and bounds.

A field declared with :func:`option` is a flag: ``--`` and its name with ``-`` for ``_`` (or
``flag``), its default, its help, and the bounds it must lie in::

    @dataclass(frozen=True)
    class TrainOptions:
        epochs: int | None = option(None, "Epochs (default: the family's).", ge=1)

:func:`check_options` refuses values outside the bounds with the flag named, and
:func:`resolve_paths` makes every path absolute, in the driver: Ray workers run in other
folders. An option group (a dataclass of such fields) is composed into another by subclassing
it (its flags come first), or, where field names would collide (``--llm-model`` beside
``--model``), held in a field declared with :func:`group`. The commands are built from these
dataclasses on the command-line side (:func:`xmr.options.command`); this module imports no
command-line library, so configs can declare their fields without it.

>>> from dataclasses import dataclass
>>> @dataclass(frozen=True)
... class Sizes:
...     batch_size: int = option(32, "Rows per batch.", ge=1)
...
...     def __post_init__(self) -> None:
...         check_options(self)
>>> Sizes(batch_size=0)
Traceback (most recent call last):
ValueError: --batch-size must be >= 1, got 0
"""

from __future__ import annotations

import math
import re
import types
import typing
from dataclasses import MISSING, Field, dataclass, field, fields, is_dataclass
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from xmr.storage import (
    ObjectPath,
    check_outside_ray_package,
    default_output,
    is_uri,
    storage_path,
)
from xmr.tracking import check_tracking_store

OPTION = "xmr.option"
"""The key of a field's :class:`OptionSpec` in its dataclass metadata."""

GROUP = "xmr.group"
"""The key of an option group's dataclass in the metadata of the field holding it."""


@dataclass(frozen=True)
class OptionSpec:
    """How a dataclass field appears on the command line.

    Attributes:
        help: the flag's help text.
        flag: the flag's name without ``--`` (default: the field's, ``_`` as ``-``).
        ge, gt, le, lt: bounds on the value (None: unbounded); unset (None) values pass.
        cli_type: the type the flag parses to when it is not the field's (``"all"`` or N).
        positional: a command-line argument (``xmr compare RUN_A RUN_B``), not a flag.
        output: the flag names where the command writes: a path, or (a ``str`` field) the
            tracking store's URI; :func:`check_outputs` refuses one in Ray's working-dir copy.
        default_folder: an output folder's default when the flag is not given (the field's
            default is None): this folder under ``$XMR_STORAGE`` when that is set, else in
            the working directory (:func:`~xmr.storage.default_output`).
    """

    help: str
    flag: str | None = None
    ge: float | None = None
    gt: float | None = None
    le: float | None = None
    lt: float | None = None
    cli_type: Any = None
    positional: bool = False
    output: bool = False
    default_folder: str | None = None


def option(
    default: Any = MISSING,
    help: str = "",
    *,
    flag: str | None = None,
    ge: float | None = None,
    gt: float | None = None,
    le: float | None = None,
    lt: float | None = None,
    cli_type: Any = None,
    positional: bool = False,
    output: bool = False,
    default_folder: str | None = None,
) -> Any:
    """A dataclass field that is a command-line option (no ``default``: a required one);
    ``positional``: an argument rather than a flag; ``output``: where the command writes;
    ``default_folder``: an output folder's default (``default`` must then be None; see
    :class:`OptionSpec`)."""
    if default_folder is not None and default is not None:
        raise ValueError(f"an option with default_folder {default_folder!r} defaults to None")
    output = output or default_folder is not None
    spec = OptionSpec(help, flag, ge, gt, le, lt, cli_type, positional, output, default_folder)
    return field(default=default, metadata={OPTION: spec})


def address_option() -> Any:
    """``--address``: the Ray cluster to run on."""
    return option(None, "Ray cluster address (default: RAY_ADDRESS or local Ray).")


def tracking_uri_option() -> Any:
    """``--tracking-uri``: the MLflow store to log to."""
    return option(
        None, "MLflow store (default: MLFLOW_TRACKING_URI or sqlite:///mlflow.db).", output=True
    )


def run_name_option() -> Any:
    """``--run-name``: the MLflow run's name."""
    return option(None, "MLflow run name.")


@dataclass(frozen=True)
class ClusterOptions:
    """Where a command runs and what it logs to: ``--address`` and ``--tracking-uri``."""

    address: str | None = address_option()
    tracking_uri: str | None = tracking_uri_option()


def option_fields(cls: type) -> list[Field]:
    """The fields of dataclass ``cls`` declared with :func:`option`, in order."""
    return [f for f in fields(cls) if OPTION in f.metadata]


def flag(item: Field) -> str:
    """The flag of an option field, with its ``--``."""
    spec: OptionSpec = item.metadata[OPTION]
    return "--" + (spec.flag or item.name.replace("_", "-"))


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


def _bounds_problem(spec: OptionSpec, value: Any) -> str | None:
    """What is wrong with ``value`` under ``spec``'s bounds, None when nothing is."""
    low = (spec.ge, "[") if spec.ge is not None else (spec.gt, "(")
    high = (spec.le, "]") if spec.le is not None else (spec.lt, ")")
    if low[0] is None and high[0] is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or math.isnan(value):
        return f"must be a number, got {value!r}"
    below = low[0] is not None and (value < low[0] if low[1] == "[" else value <= low[0])
    above = high[0] is not None and (value > high[0] if high[1] == "]" else value >= high[0])
    if not (below or above):
        return None
    if low[0] is not None and high[0] is not None:
        return f"must be in {low[1]}{_number(low[0])}, {_number(high[0])}{high[1]}, got {value}"
    if low[0] is not None:
        return f"must be {'>=' if low[1] == '[' else '>'} {_number(low[0])}, got {value}"
    return f"must be {'<=' if high[1] == ']' else '<'} {_number(high[0])}, got {value}"


def check_options(values: Any, declared_by: type | None = None) -> None:
    """Refuse option values outside their bounds, naming the flag.

    ``declared_by``: the options dataclass whose fields declare the bounds (default: the
    class of ``values``); its fields that ``values`` lacks are skipped, so a resolved config
    can be checked against the options it came from.

    Raises:
        ValueError: ``--FLAG must be >= 1, got 0`` (or ``in (0, 1]``, ``a number``).
    """
    for item in option_fields(declared_by or type(values)):
        value = getattr(values, item.name, None)
        if value is None:
            continue
        problem = _bounds_problem(item.metadata[OPTION], value)
        if problem:
            raise ValueError(f"{flag(item)} {problem}")


def _members(annotation: Any) -> tuple[Any, ...]:
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        return typing.get_args(annotation)
    return (annotation,)


def _is_path(annotation: Any) -> bool:
    return Path in _members(annotation)


def is_storage(annotation: Any) -> bool:
    """A :data:`~xmr.storage.StoragePath` field: a local path or an object store's URI."""
    return ObjectPath in _members(annotation)


@cache
def path_fields(cls: type) -> tuple[str, ...]:
    """The names of the fields of dataclass ``cls`` that hold a path."""
    hints = typing.get_type_hints(cls)
    return tuple(f.name for f in fields(cls) if _is_path(hints[f.name]))


def storage_fields(cls: type) -> tuple[str, ...]:
    """The names of the path fields of dataclass ``cls`` that may also be an object store's
    URI (declared :data:`~xmr.storage.StoragePath`)."""
    hints = typing.get_type_hints(cls)
    return tuple(f.name for f in fields(cls) if is_storage(hints[f.name]))


def _field_name(cls: type, name: str) -> str:
    """How a user named field ``name``: its flag when it is an option, else the name."""
    item = next(f for f in fields(cls) if f.name == name)
    return flag(item) if OPTION in item.metadata else name


def _default_folder(cls: type, name: str) -> str | None:
    """The default output folder of field ``name`` (:attr:`OptionSpec.default_folder`)."""
    item = next(f for f in fields(cls) if f.name == name)
    spec = item.metadata.get(OPTION)
    return spec.default_folder if spec is not None else None


def resolve_paths(values: Any) -> None:
    """Make every path field of the (frozen) dataclass ``values`` absolute, in place.

    Relative paths mean the working directory of the process that parsed them (the driver);
    Ray workers run elsewhere. Strings (from YAML) become paths; None stays None, but for an
    output folder's flag, which becomes its default folder (:attr:`OptionSpec.default_folder`,
    under ``$XMR_STORAGE`` when set). A :data:`~xmr.storage.StoragePath` field takes an object
    store's URI too (an :class:`~xmr.storage.ObjectPath`); any other path field refuses one.

    Raises:
        ValueError: a URI where only a local path is read, with the flag (or field) named.
    """
    cls = type(values)
    remote = set(storage_fields(cls))
    for name in path_fields(cls):
        value = getattr(values, name)
        if value is None:
            folder = _default_folder(cls, name)
            if folder is None:
                continue
            value = default_output(folder)
        if name in remote:
            object.__setattr__(values, name, storage_path(value))
        elif is_uri(value):
            raise ValueError(
                f"{_field_name(cls, name)} takes a local or shared-filesystem path, not {value} "
                "(object stores are for --storage, --out, --synth and --checkpoint)"
            )
        else:
            object.__setattr__(values, name, Path(value).expanduser().resolve())


def check_outputs(values: Any, *, tracking: bool = True) -> None:
    """Refuse, naming the flag, an output of the options dataclass ``values`` (its fields
    declared ``output``: paths, and the tracking store) that lies inside a Ray job's copy of
    ``--working-dir`` (:func:`~xmr.storage.check_outside_ray_package`): ``ray job submit
    --working-dir .`` runs the command there, so a relative path or a default output folder
    would be lost with the next submission. :func:`command` calls it for every command; it
    reads no file and needs no cluster. ``tracking`` False: the tracking store passes (the
    command logs nothing to MLflow).

    Raises:
        ValueError: one line naming the flag and saying to give a shared path or set
            XMR_STORAGE.
    """
    cls = type(values)
    paths = set(path_fields(cls))
    for item in option_fields(cls):
        spec: OptionSpec = item.metadata[OPTION]
        if not spec.output:
            continue
        value = getattr(values, item.name)
        if item.name not in paths:
            if tracking:
                check_tracking_store(value)
        elif value is not None:
            default = spec.default_folder and value == default_output(spec.default_folder)
            check_outside_ray_package(value, f"the default {flag(item)}" if default else flag(item))
    for item in group_fields(cls):
        inner = getattr(values, item.name)
        if is_dataclass(inner):
            check_outputs(inner, tracking=tracking)


NAME = re.compile(r"[A-Za-z0-9._=,-]+")
"""What a name that becomes a folder may hold (``--name``): one path component."""


def check_name(name: str | None, where: str = "--name") -> None:
    """Refuse a name (``--name``, None: not given) that is not one folder name of letters,
    digits, ``.``, ``_``, ``-``, ``=`` and ``,``: a ``/`` or ``..`` would put the folder outside
    ``--storage``.

    >>> check_name("fair_alpha=0.4,seed=1")
    >>> check_name("../x")
    Traceback (most recent call last):
    ValueError: --name '../x' must be one folder name: letters, digits and . _ - = , (not . or ..)
    """
    if name is None:
        return
    if not NAME.fullmatch(name) or name in (".", ".."):
        raise ValueError(
            f"{where} {name!r} must be one folder name: letters, digits and . _ - = , (not . or ..)"
        )


def load_yaml(text: str, where: str) -> Any:
    """``yaml.safe_load(text)``; bad YAML is a one-line ``ValueError`` that starts with ``where``
    (the file or the option it came from) and says what and where (line, column) is wrong."""
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ValueError(f"{where}: not valid YAML: {yaml_problem(exc)}") from exc


def yaml_problem(exc: yaml.YAMLError) -> str:
    """A YAML error in one line: ``while parsing ...: expected ... (line 1, column 3)``."""
    if not isinstance(exc, yaml.MarkedYAMLError):
        return " ".join(str(exc).split())
    said = "; ".join(part for part in (exc.context, exc.problem) if part)
    mark = exc.problem_mark or exc.context_mark
    return f"{said} (line {mark.line + 1}, column {mark.column + 1})" if mark else said


def parameter_name(item: Field) -> str:
    """The command's parameter of a field: its flag's name, so that two groups may each have
    a field of the same name under different flags (``seed`` and ``--llm-seed``)."""
    spec: OptionSpec = item.metadata[OPTION]
    return (spec.flag or item.name).replace("-", "_")


def parameter_names(cls: type) -> dict[str, str]:
    """Field name -> the name its flag goes by in commands and config files (``--llm-model``:
    ``llm_model`` for the field ``model``)."""
    return {item.name: parameter_name(item) for item in option_fields(cls)}


def group(cls: type) -> Any:
    """A field holding the option group ``cls`` (a dataclass of :func:`option` fields) whose
    flags, named as ``cls`` names them, default to unset: a command built from the dataclass
    holding the field (:func:`xmr.options.command`) gives the field the dict of the flags set
    (field name -> value), which that dataclass's ``__post_init__`` turns into a ``cls`` with
    defaults of its own (:func:`given_group`). The flags' help is ``cls``'s, with its default.
    """
    return field(default_factory=dict, metadata={GROUP: cls})


def group_fields(cls: type) -> list[Field]:
    """The fields of dataclass ``cls`` declared with :func:`group`, in order."""
    return [f for f in fields(cls) if GROUP in f.metadata]


def given_group(values: Any, name: str) -> dict[str, Any]:
    """The values given for the group field ``name`` of ``values`` (a dataclass being built):
    the dict of its set flags, or the fields of a group already built (``dataclasses.replace``
    builds again)."""
    value = getattr(values, name)
    if is_dataclass(value):
        return {item.name: getattr(value, item.name) for item in fields(value)}
    return dict(value)


def option_values(values: Any) -> dict[str, Any]:
    """The options of the dataclass ``values`` by the names their flags go by in commands
    (:func:`parameter_names`), a group field's spread into its own (``llm_model``)."""
    flat = {
        parameter_name(item): getattr(values, item.name) for item in option_fields(type(values))
    }
    for item in group_fields(type(values)):
        names = parameter_names(item.metadata[GROUP])
        flat.update({names[key]: value for key, value in given_group(values, item.name).items()})
    return flat


def changed_options(values: Any) -> dict[str, Any]:
    """The options of the dataclass ``values`` that differ from their defaults, by the names
    their flags go by (``llm_model``), in field order."""
    return {
        parameter_name(item): getattr(values, item.name)
        for item in option_fields(type(values))
        if getattr(values, item.name) != item.default
    }
