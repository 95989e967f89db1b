"""The commands built from the catalogue of operations (``flowcore_ops``).

Each operation with command words becomes one click command (``schedule ...``
and ``scheduled ...`` are groups): its positional arguments are the
operation's ``arguments``, its options the other fields of its input type
(``--field-name``, typed from the msgspec field), ``--json`` and the host
options. The input is built with ``msgspec.convert``, so the input type's own
constraints refuse a bad value (one line naming the argument or option, exit
2); the operation is called on the host the options choose; an
``OperationError`` is one line and the failure's exit code. What a command
prints without ``--json``, and the options a command has beyond its input
(``signal --data``, ``show --no-history``, ...), are its ``View`` (``_views``).

The host: the local host on ``--db PATH`` (or ``$FLOWCORE_DB``, default
``flowcore.db``); Temporal with ``--temporal``, ``--address HOST:PORT`` on the
command line, or ``$FLOWCORE_TEMPORAL_ADDRESS`` when no ``--db`` is given
(``--namespace``, ``--task-queue``). ``flowcore temporal <command>`` is the same
command with Temporal chosen.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import click
import msgspec

import flowcore
from flowcore_handlers import Host, RegistryError
from flowcore_ops import (
    CATALOGUE,
    Context,
    Operation,
    OperationError,
    Principal,
)

from ._common import DATABASE, CliError, checked_name, json_value, problem_line, say
from ._temporal_session import ADDRESS_ENV, NAMESPACE_ENV, QUEUE_ENV, finish, specs_option

__all__ = [
    "DB_ENV",
    "HostChoice",
    "View",
    "build",
    "command",
    "group",
    "host_choice",
    "open_host",
    "run_on_host",
]

T = TypeVar("T")
DB_ENV = "FLOWCORE_DB"
_NAMES = {"run_id", "new_run_id", "name", "key", "call_id", "tool", "from_step", "dedup_key"}


class Exit(Exception):
    """A command's exit code, decided while the host is open."""

    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


@dataclass(frozen=True)
class View:
    """What a derived command adds to its operation: help, options beyond the
    input, how its values become the input, and what it prints.

    ``prepare(op, values)`` turns the command line's values (input fields and
    ``options``) into the input's fields, and may choose another operation
    (``signal NAME --key KEY`` is ``signal-key``); ``tune(host, values)`` is the
    host the operation acts on (the command line's own extras: a tools
    module, a wait); ``render(host, output, values)`` prints the output (and
    may read more from the host); ``document`` is the ``--json`` document
    (default: the output as msgspec encodes it). Both return an exit code or
    None (0)."""

    help: str
    options: tuple[click.Parameter, ...] = ()
    names: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    helps: Mapping[str, str] = field(default_factory=dict)
    metavars: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # an argument's
    defaults: Mapping[str, Any] = field(default_factory=dict)  # an option's, as typed
    types: Mapping[str, click.ParamType[Any]] = field(default_factory=dict)  # an option's own type
    optional: frozenset[str] = frozenset()  # input fields a command line may leave out
    raw: frozenset[str] = frozenset()  # Any-typed fields ``prepare`` reads itself
    hidden: frozenset[str] = frozenset()  # input fields not offered
    exits: Mapping[str, int] = field(default_factory=dict)  # a failure's exit code here
    prepare: Callable[[Operation, dict[str, Any]], tuple[Operation, dict[str, Any]]] | None = None
    tune: Callable[[Host, dict[str, Any]], Host] | None = None
    render: Callable[[Host, Any, dict[str, Any]], Awaitable[int | None]] | None = None
    document: Callable[[Host, Any, dict[str, Any]], Awaitable[int | None]] | None = None
    fail: Callable[[Exception, dict[str, Any]], int | None] | None = None  # None: as usual
    explain: Callable[[OperationError, dict[str, Any]], str] | None = None  # a failure's line
    json_help: str = "Print the output as JSON on stdout instead."
    creates: bool = False  # may create the local database (else it must exist)
    # The operation's context from the command line's values (default: as built).
    context: Callable[[Context, dict[str, Any]], Context] | None = None


# --- the host --------------------------------------------------------------------------


@dataclass(frozen=True)
class HostChoice:
    """Which host a command acts on (``host_choice``)."""

    temporal: bool
    db: Path | str = Path("flowcore.db")  # a SQLite file, or a postgresql:// URL
    address: str = "localhost:7233"
    namespace: str = "default"
    task_queue: str = "flowcore"
    must_exist: bool = True


def _given(ctx: click.Context, name: str) -> bool:
    source = ctx.get_parameter_source(name)
    return source is click.core.ParameterSource.COMMANDLINE


def host_choice(ctx: click.Context, values: dict[str, Any], temporal: bool) -> HostChoice:
    """The host of the options: Temporal on ``--temporal`` or ``--address``, or
    ``$FLOWCORE_TEMPORAL_ADDRESS`` without ``--db``; else the local database."""
    if temporal:  # `flowcore temporal ...`: no --db to give
        return HostChoice(
            temporal=True,
            address=values["address"],
            namespace=values["namespace"],
            task_queue=values["task_queue"],
        )
    chosen = (
        values["temporal"]
        or _given(ctx, "address")
        or (bool(os.environ.get(ADDRESS_ENV)) and not _given(ctx, "db"))
    )
    if chosen and _given(ctx, "db"):
        raise CliError("--db names a local database: give it or a Temporal address, not both")
    return HostChoice(
        temporal=chosen,
        db=values["db"],
        address=values["address"],
        namespace=values["namespace"],
        task_queue=values["task_queue"],
    )


def host_options(temporal: bool) -> list[click.Parameter]:
    """``--db`` (the local host) and the Temporal connection options."""
    found: list[click.Parameter] = []
    if not temporal:
        found.append(
            click.Option(
                ["--db"],
                type=DATABASE,
                envvar=DB_ENV,
                default="flowcore.db",
                show_default=True,
                help="The local host's SQLite database file, or a postgresql:// URL"
                f" (or ${DB_ENV}).",
            )
        )
        found.append(
            click.Option(
                ["--temporal"],
                is_flag=True,
                help="Act on Temporal (--address, --namespace), not a local database.",
            )
        )
    found += [
        click.Option(
            ["--address"],
            envvar=ADDRESS_ENV,
            default="localhost:7233",
            show_default=True,
            help=f"HOST:PORT of the Temporal frontend: chooses Temporal (or ${ADDRESS_ENV},"
            " when no --db is given).",
        ),
        click.Option(
            ["--namespace"],
            envvar=NAMESPACE_ENV,
            default="default",
            show_default=True,
            help=f"Temporal namespace (or ${NAMESPACE_ENV}).",
        ),
        click.Option(
            ["--task-queue"],
            envvar=QUEUE_ENV,
            default="flowcore",
            show_default=True,
            help=f"Task queue of the flowcore workers (or ${QUEUE_ENV}).",
        ),
    ]
    return found


def _specs_option() -> click.Parameter:
    """``--specs DIR`` of ``flowcore temporal``'s commands (``_temporal_session``)."""

    @specs_option
    def holder() -> None: ...

    params: list[click.Parameter] = holder.__click_params__  # type: ignore[attr-defined]
    return params[0]


def _no_database(db: Path) -> CliError:
    others = sorted(str(f) for f in db.parent.glob("*.db") if f.is_file())[:3]
    hint = f"; here: {', '.join(others)} (pass --db FILE)" if others else ""
    return CliError(f"no database at {db} (start a run first, or pass --db){hint}")


@asynccontextmanager
async def open_host(choice: HostChoice, **options: Any) -> AsyncIterator[Host]:
    """The host ``choice`` names, open for the command (closed after it)."""
    if choice.temporal:
        try:
            import flowcore_temporal as ft
        except ImportError as exc:
            raise CliError(
                "the Temporal host needs the temporal extra (pip install"
                f" 'flowcore[temporal]'): {exc}"
            ) from None
        yield await ft.TemporalHost.connect(choice.address, choice.namespace, choice.task_queue)
        return
    from flowcore_local import LocalHost

    if choice.must_exist and isinstance(choice.db, Path) and not choice.db.exists():
        raise _no_database(choice.db)
    async with LocalHost(choice.db, **options) as host:
        yield host


def _host_errors(temporal: bool) -> tuple[type[BaseException], ...]:
    """The errors of a host a user can cause: one line, exit 2."""
    found: list[type[BaseException]] = [
        RegistryError,
        flowcore.RunIdError,
        flowcore.MetadataFilterError,
        flowcore.ForkError,
    ]
    if temporal:
        from temporalio.service import RPCError

        import flowcore_temporal as ft

        found += [ft.TemporalHostError, RPCError]
    else:
        from flowcore_local import HostError, NotAFlowcoreDatabase

        found += [HostError, NotAFlowcoreDatabase]
    return tuple(found)


def _one_line(exc: BaseException) -> str:
    message = getattr(exc, "message", None)
    if type(exc).__name__ == "RPCError" and isinstance(message, str):
        return f"Temporal said: {message}"
    return " ".join(str(exc).split())


def on_host(choice: HostChoice, body: Callable[[Any], Awaitable[T]], **options: Any) -> T:
    """Open the host (``options``: the local host's), run ``body``, close it. An error
    a user can cause is a ``CliError``: one line, exit 2."""

    async def main() -> T:
        async with open_host(choice, **options) as host:
            return await body(host)

    try:
        return asyncio.run(main())
    except flowcore.SpecError as exc:
        # One line per problem, as `validate` prints them.
        for problem in exc.problems[:-1]:
            say(problem_line(problem))
        raise CliError(problem_line(exc.problems[-1])) from None
    except flowcore.InputError as exc:
        head = str(exc).splitlines()[0].rstrip(":")
        for text in exc.problems[:-1]:
            say(f"{head}: {text}")
        raise CliError(f"{head}: {exc.problems[-1]}" if exc.problems else head) from None
    except BrokenPipeError:
        raise  # the reader went away: the command ends quietly (_errors.invoke)
    except OSError as exc:
        raise CliError(str(exc)) from None
    except Exception as exc:
        if isinstance(exc, _host_errors(choice.temporal)):
            raise CliError(_one_line(exc)) from None
        raise


def run_on_host(choice: HostChoice, body: Callable[[Host], Awaitable[int | None]]) -> int:
    """``on_host`` for a command: ``body``'s exit code, an ``OperationError`` as one
    line and its exit code; a process that used a Temporal client ends with
    ``_temporal_session.finish``."""
    code = 2
    try:
        try:
            code = on_host(choice, body) or 0
        except Exit as exc:
            code = exc.code
        except OperationError as exc:
            say(exc.detail)
            code = exc.failure.exit
    except click.ClickException as exc:
        if not choice.temporal:
            raise
        say(exc.format_message())
        code = 2 if exc.exit_code == 1 else exc.exit_code
    except BaseException as exc:
        if not choice.temporal:
            raise
        from ._common import internal_error

        say("interrupted" if isinstance(exc, KeyboardInterrupt) else internal_error(exc))
        code = 130 if isinstance(exc, KeyboardInterrupt) else 2
    if choice.temporal:
        finish(code)
    return code


# --- the input's fields as arguments and options -------------------------------------------


def _unwrap(info: msgspec.inspect.Type) -> tuple[msgspec.inspect.Type, bool]:
    """The field's type without ``| None``, and whether None was allowed."""
    if isinstance(info, msgspec.inspect.UnionType):
        kinds = [t for t in info.types if not isinstance(t, msgspec.inspect.NoneType)]
        if len(kinds) == 1:
            return kinds[0], len(kinds) < len(info.types)
    return info, False


def _click_type(info: msgspec.inspect.Type) -> click.ParamType[Any] | None:
    """The click type of a field read as it is typed (None: read as JSON text)."""
    if isinstance(info, msgspec.inspect.StrType | msgspec.inspect.DateTimeType):
        return click.STRING
    if isinstance(info, msgspec.inspect.IntType):
        return click.INT
    if isinstance(info, msgspec.inspect.FloatType):
        return click.FLOAT
    if isinstance(info, msgspec.inspect.LiteralType):
        return click.Choice([str(v) for v in info.values])
    if isinstance(info, msgspec.inspect.UnionType):
        kinds = [t for t in info.types if not isinstance(t, msgspec.inspect.NoneType)]
        if all(isinstance(t, msgspec.inspect.LiteralType) for t in kinds):
            return click.Choice([str(v) for t in kinds for v in t.values])  # type: ignore[attr-defined]
    return None


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


@dataclass(frozen=True)
class _Field:
    """One input field on the command line: its name, how it is spelled, and
    whether it is JSON text."""

    name: str
    wire: str
    spelling: str
    json: bool
    keep_false: bool = False  # a flag whose field defaults to true: false is given, not left out


def _params(op: Operation, view: View) -> tuple[list[click.Parameter], dict[str, _Field]]:
    struct = msgspec.inspect.type_info(op.input)
    assert isinstance(struct, msgspec.inspect.StructType)
    params: list[click.Parameter] = []
    fields: dict[str, _Field] = {}
    by_name = {f.name: f for f in struct.fields}
    for name in op.arguments:
        if name in view.names:  # the view spells this argument as an option
            continue
        info = by_name[name]
        kind, _ = _unwrap(info.type)
        ptype = _click_type(kind)
        required = info.required and name not in view.optional
        callback = checked_name if name in _NAMES else None
        metavar = view.metavars.get(name, (name.upper(),))[0]
        params.append(
            click.Argument(
                [name],
                type=ptype or click.STRING,
                required=required,
                callback=callback,
                metavar=metavar if metavar != name.upper() else None,
            )
        )
        fields[name] = _Field(name, info.encode_name, metavar, ptype is None)
    for info in struct.fields:
        if (info.name in op.arguments and info.name not in view.names) or info.name in view.hidden:
            continue
        kind, _ = _unwrap(info.type)
        spellings = view.names.get(info.name, (_flag(info.name),))
        help_text = view.helps.get(info.name, "")
        many = isinstance(kind, msgspec.inspect.ListType | msgspec.inspect.SetType)
        item = kind.item_type if many else kind  # type: ignore[attr-defined]
        if isinstance(kind, msgspec.inspect.BoolType):
            # A field that defaults to true is a ``--x/--no-x`` pair (the view spells it).
            on = info.default is True
            option = click.Option(
                [*spellings, info.name], is_flag=True, default=on, show_default=on, help=help_text
            )
            fields[info.name] = _Field(info.name, info.encode_name, spellings[0], False, on)
        else:
            ptype = view.types.get(info.name) or _click_type(_unwrap(item)[0])
            option = click.Option(
                [*spellings, info.name],
                type=ptype or click.STRING,
                multiple=many,
                required=info.required and info.name not in view.optional,
                default=view.defaults.get(info.name, _default(info, many)),
                show_default=_default(info, many) is not None or info.name in view.defaults,
                callback=checked_name if info.name in _NAMES and not many else None,
                help=help_text or ("" if ptype is not None else "As JSON; @FILE, or - for stdin."),
            )
            fields[info.name] = _Field(info.name, info.encode_name, spellings[0], ptype is None)
        params.append(option)
    return params, fields


def _default(info: msgspec.inspect.Field, many: bool) -> Any:
    return None if info.default is msgspec.NODEFAULT or many else info.default


_AT = re.compile(r" - at `\$\.?([A-Za-z0-9_]*)[^`]*`$")


def _input(op: Operation, view: View, fields: dict[str, _Field], values: dict[str, Any]) -> Any:
    """The operation's input from the command line's values, checked by its type."""
    data: dict[str, Any] = {}
    for name, spec in fields.items():
        if name not in values:
            continue
        value = values[name]
        if value is None or value == () or (value is False and not spec.keep_false):
            continue
        if spec.json and name not in view.raw:
            if isinstance(value, tuple):
                value = [json_value(v, spec.spelling) for v in value]
            else:
                value = json_value(value, spec.spelling)
        elif isinstance(value, tuple):
            value = list(value)
        data[spec.wire] = value
    try:
        return msgspec.convert(data, op.input, strict=False)
    except msgspec.ValidationError as exc:
        message = str(exc)
        found = _AT.search(message)
        where = "input"
        if found:
            wire = found.group(1)
            where = next((f.spelling for f in fields.values() if f.wire == wire), wire or where)
            message = message[: found.start()]
        raise CliError(f"{where}: {message}") from None


# --- the command ---------------------------------------------------------------------------


def _spec_file(name: str) -> Path:
    """A flow named on the command line is a spec file."""
    path = Path(name)
    if not path.is_file():
        raise OperationError("unknown-flow", f"{name}: no such spec file")
    return path


def _flow_folders(values: dict[str, Any]) -> tuple[Path, ...]:
    flows = values.get("flows") or ()
    return tuple(Path(p) for p in flows)


async def default_document(host: Host, output: Any, values: dict[str, Any]) -> int | None:
    """``--json``: the output as msgspec encodes it, on one line."""
    click.echo(msgspec.json.encode(output).decode())
    return None


def build(op: Operation, view: View, temporal: bool = False) -> click.Command:
    """The command of ``op`` (with Temporal chosen where ``temporal``)."""
    params, fields = _params(op, view)
    params += list(view.options)
    params.append(click.Option(["--json", "as_json"], is_flag=True, help=view.json_help))
    params += host_options(temporal)
    if temporal:
        params.append(_specs_option())

    def callback(**values: Any) -> int:
        ctx = click.get_current_context()
        values.setdefault("temporal", temporal)
        choice = host_choice(ctx, values, temporal)
        if view.creates:
            choice = dataclasses.replace(choice, must_exist=False)
        chosen, prepared = (op, values) if view.prepare is None else view.prepare(op, values)
        given = _input(chosen, view, fields, prepared)
        values["host_choice"] = choice
        values["input"] = given

        async def body(host: Host) -> int | None:
            acting = host if view.tune is None else view.tune(host, values)
            context = Context(
                acting,
                Principal.operator(),
                flows=_spec_file,
                flow_folders=_flow_folders(values),
            )
            if view.context is not None:
                context = view.context(context, values)
            try:
                output = await chosen.call(context, given)
            except Exception as exc:
                code = None if view.fail is None else view.fail(exc, values)
                if code is not None:
                    return code
                if not isinstance(exc, OperationError):
                    raise
                line = exc.detail if view.explain is None else view.explain(exc, values)
                if exc.code == "unknown-run" and not choice.temporal:
                    line += " in the database"
                elif exc.code == "settled":
                    line += "; a run already settled takes no more events"
                say(line)
                raise Exit(view.exits.get(exc.code, exc.failure.exit)) from None
            values["operation"] = chosen
            if values["as_json"]:
                show = view.document or default_document
            else:
                show = view.render or default_document
            if hasattr(output, "__anext__"):  # a stream: each item printed as it comes
                code = None
                async for item in output:
                    code = await show(host, [item], values)
                return code
            return await show(host, output, values)

        return run_on_host(choice, body)

    name = op.command[-1] if op.command else op.name
    return click.Command(name, params=params, callback=callback, help=view.help)


def _views() -> Mapping[str, View]:
    from ._views import VIEWS

    return VIEWS


def command(word: str, temporal: bool = False) -> click.Command:
    """The derived command named ``word`` (a one-word catalogue command)."""
    for op in CATALOGUE:
        if op.command == (word,):
            return build(op, _views()[op.name], temporal)
    raise KeyError(word)


def group(word: str, temporal: bool = False) -> click.Group:
    """The group ``word`` (``schedule``, ``scheduled``): a command per operation under it."""
    from ._views import GROUPS

    found = click.Group(
        word, help=GROUPS[word], context_settings={"help_option_names": ["-h", "--help"]}
    )
    for op in CATALOGUE:
        if op.command is not None and len(op.command) == 2 and op.command[0] == word:
            found.add_command(build(op, _views()[op.name], temporal))
    return found


def words() -> list[str]:
    """The one-word commands of the catalogue."""
    return [op.command[0] for op in CATALOGUE if op.command is not None and len(op.command) == 1]


def __getattr__(name: str) -> click.Command:
    """``_derive.show``: the derived command of that name (``main.COMMANDS`` names them)."""
    if name.startswith("__"):
        raise AttributeError(name)
    try:
        return command(name)
    except KeyError:
        pass
    from ._views import GROUPS

    if name in GROUPS:
        return group(name)
    raise AttributeError(name)
