"""Options grouped in small typed objects.

A command takes its options as dataclasses (groups): each field declares one option in its
annotation, ``Annotated[T, typer.Option(...)]`` (or ``typer.Argument``), with the default as the
field's own; a field may be a group in turn. :func:`grouped` spreads the groups' fields, in
their order, into the signature that typer reads (the options and ``--help`` are those of the
flat signature), and calls the command with the groups built from what typer parsed. A
parameter that is no group stays as it is.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import typing
from collections.abc import Callable
from typing import Any

Build = Callable[[dict[str, Any]], Any]

# the architecture the commands take where neither a GPU nor the data names one
DEFAULT_ARCH = "sm_90"


def grouped(command: Callable[..., None]) -> Callable[..., None]:
    """``command`` with the fields of its groups as its parameters (see the module)."""
    params: list[inspect.Parameter] = []
    builds: dict[str, Build] = {}
    hints = typing.get_type_hints(command, include_extras=True)
    for p in inspect.signature(command).parameters.values():
        builds[p.name] = _spread(p.name, hints[p.name], p.default, params)

    @functools.wraps(command)
    def run(**parsed: Any) -> None:
        return command(**{name: build(parsed) for name, build in builds.items()})

    run.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    run.__annotations__ = {p.name: p.annotation for p in params}
    return run


def _spread(name: str, kind: Any, default: Any, params: list[inspect.Parameter]) -> Build:
    """One parameter (a group: its fields, in order) appended to ``params``; what builds its
    value from the parsed ones."""
    if not dataclasses.is_dataclass(kind):
        params.append(inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default,
                                        annotation=kind))
        return lambda parsed: parsed[name]
    hints = typing.get_type_hints(kind, include_extras=True)
    parts = {f.name: _spread(f.name, hints[f.name], _default(f), params) for f in dataclasses.fields(kind)}
    return lambda parsed: kind(**{field: build(parsed) for field, build in parts.items()})


def _default(f: dataclasses.Field) -> Any:
    return inspect.Parameter.empty if f.default is dataclasses.MISSING else f.default
