"""``dt.app.flags``: TF1's ``tf.app.flags``, which since TF 1.5 is absl's flags.

The trainer skeleton of the seeds defines its flags at module level and
reads them in ``main``::

    dt.app.flags.DEFINE_string("job_name", "", "One of 'ps', 'worker'")
    dt.app.flags.DEFINE_integer("task_index", 0, "Index of task within the job")
    FLAGS = dt.app.flags.FLAGS

    def main(_):
        server = dt.train.Server(cluster, job_name=FLAGS.job_name,
                                 task_index=FLAGS.task_index)

    if __name__ == "__main__":
        dt.app.run()

The rules are absl's, as TF1 ships them, so that a ported script parses its
command line as it did:

- a flag is defined once per process (``DuplicateFlagError`` otherwise), with
  a default (parsed as a command-line value would be) and a help string;
- ``FLAGS(argv)`` parses ``argv[1:]``: ``--name=value``, ``--name value`` and
  one dash alike; a boolean takes ``--name``, ``--noname`` or
  ``--name=true|false|t|f|1|0`` (any case), never a separate value; ``--``
  ends the flags; a positional argument is kept and parsing goes on (GNU
  style). It returns ``[argv[0]]`` plus what it did not consume;
- a flag it does not know is an ``UnrecognizedFlagError``, unless
  ``known_only=True`` (what ``dt.app.run`` passes), which keeps it, in
  place, in the returned list for ``main``; a bad value is an
  ``IllegalFlagValueError`` naming the flag;
- reading ``FLAGS.name`` before any parse parses ``sys.argv`` first: that is
  TF's wrapper of absl's ``FLAGS`` (absl alone raises), and it is strict, as
  TF's is (an unknown flag there raises; parse with ``known_only=True`` or go
  through ``dt.app.run`` to keep them);
- ``FLAGS.name = value`` sets a value, as in absl.

These errors are absl's, not TF's status errors: a bad command line is the
user's input, not a failed op.
"""
from __future__ import annotations

import csv
import functools
import sys
from typing import Any, Callable, Iterator, Sequence

__all__ = ["FLAGS", "FlagValues", "Flag", "Error", "UnrecognizedFlagError", "IllegalFlagValueError",
           "DuplicateFlagError", "DEFINE_string", "DEFINE_integer", "DEFINE_float", "DEFINE_boolean",
           "DEFINE_bool", "DEFINE_list", "DEFINE_enum", "DEFINE_flag"]


class Error(Exception):
    """absl's ``flags.Error``: the base of every flags error."""


class UnrecognizedFlagError(Error):
    """A flag on the command line that no ``DEFINE_*`` made."""

    def __init__(self, flagname: str, flagvalue: str = "") -> None:
        self.flagname, self.flagvalue = flagname, flagvalue
        super().__init__(f"Unknown command line flag '{flagname}': define it with "
                         "dt.app.flags.DEFINE_*, or parse with known_only=True "
                         "(dt.app.run does) to leave it for main's argv")


class IllegalFlagValueError(Error):
    """A value a flag's type (or bounds) refuses."""


class DuplicateFlagError(Error):
    """A second ``DEFINE_*`` of a name."""


def _parse_bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if isinstance(value, str):
        if value.lower() in ("true", "t", "1"):
            return True
        if value.lower() in ("false", "f", "0"):
            return False
    raise ValueError(f"Non-boolean argument to boolean flag: {value!r}")


def _parse_int(value: Any) -> int:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str):
        base = 10
        if len(value) > 2 and value[0] == "0":
            base = {"o": 8, "x": 16}.get(value[1], 10)
        return int(value, base)
    raise TypeError(f"expect an integer, not {value!r}")


def _parse_float(value: Any) -> float:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, str):
        return float(value)
    raise TypeError(f"expect a float, not {value!r}")


def _parse_list(value: Any) -> list[str]:
    if isinstance(value, (list, tuple)):
        return [str(v) for v in value]
    if not value:
        return []
    return [s.strip() for s in next(csv.reader([value], strict=True))]


class Flag:
    """One flag: its name, parser, default, help and current ``value``."""

    def __init__(self, parser: Callable[[Any], Any], name: str, default: Any, help: str,
                 short_name: str | None = None, boolean: bool = False,
                 check: Callable[[Any], str | None] | None = None) -> None:
        self.name, self.help, self.short_name, self.boolean = name, help, short_name, boolean
        self.parser, self.check = parser, check
        self.present = 0
        self.using_default_value = True
        self.default = None if default is None else self.convert(default)
        self.value = self.default

    def convert(self, argument: Any) -> Any:
        """``argument`` (a command-line string or a value) as this flag's value, checked."""
        try:
            value = self.parser(argument)
        except (TypeError, ValueError) as e:
            raise IllegalFlagValueError(f"flag --{self.name}={argument}: {e}") from None
        problem = self.check(value) if self.check is not None else None
        if problem:
            raise IllegalFlagValueError(f"flag --{self.name}={argument}: {problem}")
        return value

    def parse(self, argument: Any) -> None:
        """Set the value from a command-line string (or a value of the flag's type)."""
        self.value = self.convert(argument)
        self.present += 1
        self.using_default_value = False

    def unparse(self) -> None:
        self.value, self.present, self.using_default_value = self.default, 0, True


class _HelpFlag(Flag):
    """``--help`` / ``-h`` (and ``--helpshort``, ``--helpfull``): print the usage, exit 1, as TF1's."""

    def __init__(self, owner: FlagValues, name: str, short_name: str | None = None) -> None:
        super().__init__(_parse_bool, name, False, "show this help", short_name, boolean=True)
        self.owner = owner

    def parse(self, argument: Any) -> None:
        if _parse_bool(argument):
            sys.stdout.write(self.owner.usage())
            sys.exit(1)


class FlagValues:
    """A registry of flags and their values (``FLAGS`` is the process's one)."""

    def __init__(self) -> None:
        self.__dict__["_flags"] = {}
        self.__dict__["_parsed"] = False

    # --- definition ---
    def define(self, flag: Flag) -> Flag:
        flags: dict[str, Flag] = self.__dict__["_flags"]
        for key in filter(None, (flag.name, flag.short_name)):
            if key in flags:
                raise DuplicateFlagError(f"The flag '{key}' is defined twice: define each flag "
                                         "once per process (at module level)")
        flags[flag.name] = flag
        if flag.short_name:
            flags[flag.short_name] = flag
        return flag

    # --- values ---
    def __getattr__(self, name: str) -> Any:
        flags: dict[str, Flag] = self.__dict__["_flags"]
        if name.startswith("_"):   # Python's and IPython's probes are not flags: no parse
            raise AttributeError(name)
        if not self.__dict__["_parsed"]:
            self(sys.argv)   # TF's wrapper: the first read parses the command line
        if name not in flags:
            raise AttributeError(f"no flag named {name!r}: define it with "
                                 "dt.app.flags.DEFINE_*")
        return flags[name].value

    def __setattr__(self, name: str, value: Any) -> None:
        flags: dict[str, Flag] = self.__dict__["_flags"]
        if name not in flags:
            raise AttributeError(f"no flag named {name!r}: define it with dt.app.flags.DEFINE_*")
        flag = flags[name]
        flag.value = None if value is None else flag.convert(value)
        flag.using_default_value = False

    def __getitem__(self, name: str) -> Flag:
        return self.__dict__["_flags"][name]

    def __contains__(self, name: object) -> bool:
        return name in self.__dict__["_flags"]

    def __iter__(self) -> Iterator[str]:
        return iter(self.__dict__["_flags"])

    def __len__(self) -> int:
        return len(self.__dict__["_flags"])

    def is_parsed(self) -> bool:
        return self.__dict__["_parsed"]

    def mark_as_parsed(self) -> None:
        self.__dict__["_parsed"] = True

    def unparse_flags(self) -> None:
        """Every flag back to its default, and not parsed (absl's)."""
        for flag in set(self.__dict__["_flags"].values()):
            flag.unparse()
        self.__dict__["_parsed"] = False

    def flag_values_dict(self) -> dict[str, Any]:
        return {f.name: f.value for f in self.__dict__["_flags"].values()}

    # --- parsing ---
    def __call__(self, argv: Sequence[str], known_only: bool = False) -> list[str]:
        """Parse ``argv[1:]``; ``[argv[0]]`` plus the arguments not consumed."""
        if isinstance(argv, str) or not isinstance(argv, (list, tuple)):
            raise TypeError("argv is a list of strings such as sys.argv, not a string")
        if not argv:
            raise ValueError("argv cannot be empty: it starts with the program's name")
        unknown, rest = self._parse_args(list(argv[1:]), known_only)
        if unknown:
            raise UnrecognizedFlagError(*unknown[0])
        self.mark_as_parsed()
        return [argv[0], *rest]

    def _parse_args(self, args: list[str], known_only: bool) -> tuple[list[tuple[str, str]], list[str]]:
        flags: dict[str, Flag] = self.__dict__["_flags"]
        unknown: list[tuple[str, str]] = []
        rest: list[str] = []
        it = iter(args)
        for arg in it:
            if not arg.startswith("-") or arg.strip("-") == "":
                if arg == "--":
                    if known_only:
                        rest.append(arg)
                    rest.extend(it)
                    break
                rest.append(arg)   # a positional argument (or a lone "-"): kept, parsing goes on
                continue
            body = arg[2:] if arg.startswith("--") else arg[1:]
            name, eq, value = body.partition("=")
            flag = flags.get(name)
            if flag is not None:
                if flag.boolean and not eq:
                    value = "true"
                elif not eq:
                    try:
                        value = next(it)
                    except StopIteration:
                        raise IllegalFlagValueError(f"Missing value for flag {arg}") from None
                flag.parse(value)
                continue
            negated = flags.get(name[2:]) if name.startswith("no") and len(name) > 2 else None
            if negated is not None and negated.boolean:
                if eq:
                    raise IllegalFlagValueError(f"{arg} does not take an argument")
                negated.parse("false")
                continue
            if known_only:
                rest.append(arg)
            else:
                unknown.append((name, arg))
        return unknown, rest

    def usage(self) -> str:
        """The help text: the main module's docstring, then each flag."""
        doc = getattr(sys.modules.get("__main__"), "__doc__", None) or \
            f"\nUSAGE: {sys.argv[0] if sys.argv else 'program'} [flags]\n"
        lines = [doc.rstrip("\n"), "", "flags:"]
        for flag in sorted(set(self.__dict__["_flags"].values()), key=lambda f: f.name):
            lines.append(f"  --{flag.name}: {flag.help}")
            lines.append(f"    (default: {flag.default!r})")
        return "\n".join(lines) + "\n"

    def define_help_flags(self) -> None:
        """``--help``/``-h``, ``--helpshort`` and ``--helpfull`` (once)."""
        for name, short in (("help", "h"), ("helpshort", None), ("helpfull", None)):
            if name not in self:
                self.define(_HelpFlag(self, name, short if short not in self else None))


FLAGS = FlagValues()


def DEFINE_flag(flag: Flag, flag_values: FlagValues = FLAGS) -> Flag:
    return flag_values.define(flag)


# TF's wrapper lets the four classic DEFINEs take their pre-absl keyword names too
_TF1_NAMES = {"flag_name": "name", "default_value": "default", "docstring": "help"}


def _tf1_names(define: Callable[..., Flag]) -> Callable[..., Flag]:
    @functools.wraps(define)
    def wrapper(*args: Any, **kwargs: Any) -> Flag:
        for old, new in _TF1_NAMES.items():
            if old in kwargs:
                kwargs[new] = kwargs.pop(old)
        return define(*args, **kwargs)
    return wrapper


def _bounds(lower: float | None, upper: float | None) -> Callable[[Any], str | None]:
    def check(value: Any) -> str | None:
        if (lower is not None and value < lower) or (upper is not None and value > upper):
            low = "" if lower is None else f">= {lower}"
            high = "" if upper is None else f"<= {upper}"
            return f"{value} is not {' and '.join(filter(None, (low, high)))}"
        return None
    return check


@_tf1_names
def DEFINE_string(name: str, default: str | None, help: str,
                  flag_values: FlagValues = FLAGS, short_name: str | None = None) -> Flag:
    return flag_values.define(Flag(str, name, default, help, short_name))


@_tf1_names
def DEFINE_integer(name: str, default: int | str | None, help: str,
                   lower_bound: int | None = None, upper_bound: int | None = None,
                   flag_values: FlagValues = FLAGS, short_name: str | None = None) -> Flag:
    return flag_values.define(Flag(_parse_int, name, default, help, short_name,
                                   check=_bounds(lower_bound, upper_bound)))


@_tf1_names
def DEFINE_float(name: str, default: float | str | None, help: str,
                 lower_bound: float | None = None, upper_bound: float | None = None,
                 flag_values: FlagValues = FLAGS, short_name: str | None = None) -> Flag:
    return flag_values.define(Flag(_parse_float, name, default, help, short_name,
                                   check=_bounds(lower_bound, upper_bound)))


@_tf1_names
def DEFINE_boolean(name: str, default: bool | str | None, help: str,
                   flag_values: FlagValues = FLAGS, short_name: str | None = None) -> Flag:
    return flag_values.define(Flag(_parse_bool, name, default, help, short_name,
                                   boolean=True))


DEFINE_bool = DEFINE_boolean


def DEFINE_list(name: str, default: list[str] | str | None, help: str,
                flag_values: FlagValues = FLAGS, short_name: str | None = None) -> Flag:
    """A comma-separated list of strings (``--hosts=a:1,b:2`` -> ``["a:1", "b:2"]``)."""
    return flag_values.define(Flag(_parse_list, name, default, help, short_name))


def DEFINE_enum(name: str, default: str | None, enum_values: Sequence[str], help: str,
                flag_values: FlagValues = FLAGS, short_name: str | None = None) -> Flag:
    """A string that must be one of ``enum_values``."""
    choices = list(enum_values)
    if not choices:
        raise ValueError("enum_values cannot be empty")

    def check(value: Any) -> str | None:
        return None if value in choices else f"value should be one of <{'|'.join(choices)}>"
    return flag_values.define(Flag(str, name, default, help, short_name, check=check))
