"""Record classes made without the ``dataclasses`` module: :func:`record_class` and :func:`field`.

Why by hand: start-up. ``sframe stack`` and ``sframe script`` on a small recording are
measured against tools written in C, and every command imports the record classes of
several stages. Importing ``dataclasses`` costs ~10 ms (it imports ``inspect``, ``ast``,
``dis``, ``tokenize``), and each ``@dataclass(slots=True)`` class ~0.5-1 ms more to build
(several ``exec`` calls and a class rebuilt for its slots); the classes on the ``script``
path alone cost ~25 ms, more than the walk of a whole process. :func:`record_class` makes the
same kind of class (``__slots__``, an ``__init__`` with the fields in order and their
defaults, ``__repr__``, ``__eq__``, and for ``frozen`` immutability and ``__hash__``) with
one ``exec``. Type checkers see it as a dataclass (:func:`typing.dataclass_transform`).

:class:`NamedTuple` is ``typing.NamedTuple`` to type checkers and, at run time, the same
class built by ``collections.namedtuple`` without importing ``typing``: ``typing`` imports
``re`` (with ``enum``, ~5 ms together), a sixth of a whole ``sframe stack``. Modules on the
start-up paths import nothing from ``typing`` at run time for the same reason: their
``TYPE_CHECKING = False`` is the constant type checkers read as true, and their typing
names (``Any``, ``Protocol`` classes) exist for the checkers alone.

Supported, as the project uses them: annotated fields with plain defaults or
``field(default_factory=...)``, ``frozen``, properties and methods. Not supported:
inheritance between records, ``InitVar``, ``__post_init__``, keyword-only fields.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any, TypeVar, dataclass_transform
    from typing import NamedTuple as NamedTuple
    from typing import Protocol as Protocol

    _T = TypeVar("_T")
else:
    def dataclass_transform(**_: object) -> Callable[[object], object]:
        return lambda function: function

    class _NamedTupleType(type):
        """What ``class X(NamedTuple)`` makes: a tuple class of the class's annotated
        fields (and their defaults), with its other attributes (methods, properties, the
        docstring) set on it, as ``typing.NamedTuple`` does (see :func:`_named_tuple`)."""

        def __new__(cls, name, bases, namespace):
            if not bases:
                return super().__new__(cls, name, bases, namespace)
            fields = list(namespace.get("__annotations__", {}))
            given = [field for field in fields if field in namespace]
            if given != fields[len(fields) - len(given):]:
                raise TypeError(f"{name}: a field without a default follows one with one")
            made = _named_tuple(name, fields, [namespace[field] for field in given],
                                namespace["__module__"])
            made.__annotations__ = namespace.get("__annotations__", {})
            for key, value in namespace.items():
                if key not in fields and key not in ("__module__", "__annotations__"):
                    setattr(made, key, value)
            return made

    class NamedTuple(metaclass=_NamedTupleType):
        pass

    Protocol = object  # what a protocol class is at run time: a plain class


def _named_tuple(name: str, fields: list[str], defaults: list[Any], module: str) -> type:
    """The class ``collections.namedtuple(name, fields, defaults=defaults, module=module)``
    makes (fields, their defaults, ``_make``, ``_replace``, ``_asdict``, its repr), built
    without its ``eval``: a ``__new__`` with the fields as parameters is compiled at the
    first tuple made, as records compile their ``__init__`` (:func:`_compiled_at_first_call`).
    namedtuple took ~90 µs a class, 1.9 ms for the 17 that ``sframe stack`` imports; this
    ~15 µs."""
    try:
        from _collections import (  # type: ignore[import-not-found]  # namedtuple's fields
            _tuplegetter,
        )
    except ImportError:
        from operator import itemgetter

        def _tuplegetter(index: int, doc: str) -> Any:
            return property(itemgetter(index), doc=doc)

    names = tuple(fields)
    field_defaults = dict(zip(names[len(names) - len(defaults):], defaults, strict=True))
    params = ", ".join(field if field not in field_defaults else f"{field}=_default_{field}"
                       for field in names)
    source = (f"def __new__(_cls, {params}):\n"
              f"    return _tuple_new(_cls, ({''.join(field + ', ' for field in names)}))")
    scope: dict[str, Any] = {"_tuple_new": tuple.__new__}
    scope.update({f"_default_{field}": value for field, value in field_defaults.items()})
    owner: list[type] = []
    namespace: dict[str, Any] = {
        "__slots__": (), "__module__": module, "_fields": names,
        "_field_defaults": field_defaults, "__match_args__": names,
        "__new__": _compiled_at_first_call("__new__", source, scope, owner),
        "_make": classmethod(_make), "_replace": _replace_fields,
        "_asdict": _asdict, "__repr__": _tuple_repr, "__getnewargs__": _getnewargs,
        "__doc__": f"{name}({', '.join(names)})"}
    for index, field in enumerate(names):
        namespace[field] = _tuplegetter(index, f"Alias for field number {index}")
    made = type(name, (tuple,), namespace)
    owner.append(made)
    return made


def _make(cls: Any, iterable: Any) -> Any:
    made = tuple.__new__(cls, iterable)
    if len(made) != len(cls._fields):
        raise TypeError(f"Expected {len(cls._fields)} arguments, got {len(made)}")
    return made


def _replace_fields(self: Any, /, **changes: Any) -> Any:
    made = self._make(map(changes.pop, self._fields, self))
    if changes:
        raise ValueError(f"Got unexpected field names: {list(changes)!r}")
    return made


def _asdict(self: Any) -> dict[str, Any]:
    return dict(zip(self._fields, self, strict=True))


def _tuple_repr(self: Any) -> str:
    inner = ", ".join(f"{field}={value!r}" for field, value in zip(self._fields, self,
                                                                    strict=True))
    return f"{type(self).__name__}({inner})"


def _getnewargs(self: Any) -> tuple[Any, ...]:
    return tuple(self)


class _Missing:
    __slots__ = ()

    def __repr__(self) -> str:
        return "MISSING"


MISSING: Any = _Missing()


class _Field:
    """A field's default given with :func:`field`."""

    __slots__ = ("default", "default_factory", "repr")

    def __init__(self, default: Any, default_factory: Callable[[], Any] | None,
                 repr: bool) -> None:
        self.default = default
        self.default_factory = default_factory
        self.repr = repr


def field(*, default: Any = MISSING, default_factory: Callable[[], Any] | None = None,
          repr: bool = True) -> Any:
    """A field's default: a value, or a function that makes one for each new record;
    ``repr=False`` leaves it out of the record's repr."""
    return _Field(default, default_factory, repr)


def _fields(cls: type) -> list[str]:
    # inspect.get_annotations would import inspect, the cost this module avoids
    annotations = cls.__dict__.get("__annotations__", {})  # noqa: RUF063
    return [name for name, kind in annotations.items() if "ClassVar" not in str(kind)]


def _init_source(names: list[str], defaults: dict[str, Any], factories: dict[str, Any],
                 frozen: bool) -> str:
    params, body = ["self"], []
    for name in names:
        if name in factories:
            params.append(f"{name}=_MISSING")
            value = f"_factory_{name}() if {name} is _MISSING else {name}"
        elif name in defaults:
            params.append(f"{name}=_default_{name}")
            value = name
        else:
            params.append(name)
            value = name
        body.append(f"_set(self, {name!r}, {value})" if frozen else f"self.{name} = {value}")
    return f"def __init__({', '.join(params)}):\n    " + ("\n    ".join(body) or "pass")


def _build(cls: type, frozen: bool) -> type:
    names = _fields(cls)
    namespace = {key: value for key, value in cls.__dict__.items()
                 if key not in ("__dict__", "__weakref__") and key not in names}
    defaults: dict[str, Any] = {}
    factories: dict[str, Callable[[], Any]] = {}
    shown = list(names)
    for name in names:
        if name not in cls.__dict__:
            continue
        value = cls.__dict__[name]
        if isinstance(value, _Field):
            if not value.repr:
                shown.remove(name)
            if value.default_factory is not None:
                factories[name] = value.default_factory
            elif value.default is not MISSING:
                defaults[name] = value.default
        else:
            defaults[name] = value
    scope: dict[str, Any] = {"_MISSING": MISSING, "_set": object.__setattr__}
    scope.update({f"_default_{name}": value for name, value in defaults.items()})
    scope.update({f"_factory_{name}": value for name, value in factories.items()})
    owner: list[type] = []
    namespace["__slots__"] = tuple(names)
    namespace["__init__"] = _compiled_at_first_call(
        "__init__", _init_source(names, defaults, factories, frozen), scope, owner)
    namespace["__match_args__"] = tuple(names)
    namespace["__record_fields__"] = tuple(names)
    namespace["__record_shown__"] = tuple(shown)
    namespace.setdefault("__repr__", _repr)
    namespace.setdefault("__eq__", _eq)
    if frozen:
        namespace["__setattr__"] = _frozen_setattr
        namespace["__delattr__"] = _frozen_setattr
        namespace.setdefault("__hash__", _hash)
    else:
        namespace.setdefault("__hash__", None)
    made = type(cls)(cls.__name__, cls.__bases__, namespace)
    made.__qualname__ = cls.__qualname__
    owner.append(made)
    return made


#: Every method a record or tuple class made here has to compile: (its source, its scope,
#: the class once made), for :mod:`pysframe.records_ahead` and its test.
MADE_SOURCES: list[tuple[str, dict[str, Any], list[type]]] = []

#: :data:`pysframe.records_ahead.AHEAD` once a first method is made (None: not yet).
_ahead: dict[str, Callable[[dict[str, Any]], Any]] | None = None


def _compiled_at_first_call(name: str, source: str, scope: dict[str, Any],
                            owner: list[type]) -> Callable[..., Any]:
    """The made class's method ``name`` until its first call: it makes the real one from
    ``source`` (our own text, defining ``name`` in ``scope``: :func:`_method`), puts it on
    the class (``owner[0]``, set once the class is made) and calls it. A class no record
    or tuple of is made in a run never makes one: at import, the ``exec`` of every class's
    ``__init__`` was most of the ~170 µs a record class cost (19 classes on ``sframe
    stack``'s path, a few of which it uses)."""
    MADE_SOURCES.append((source, scope, owner))

    def first_call(*args: Any, **kwargs: Any) -> Any:
        method = _method(name, source, scope)
        method.__qualname__ = f"{owner[0].__qualname__}.{name}"
        setattr(owner[0], name, method)
        return method(*args, **kwargs)

    return first_call


def _method(name: str, source: str, scope: dict[str, Any]) -> Any:
    """The function ``source`` defines, its names bound in ``scope``: compiled ahead in
    :mod:`pysframe.records_ahead` (cached as bytecode as any module is), else compiled
    now. Compiling one cost 40-450 µs: ~60 a small recording's ``sframe script`` makes,
    ~4 ms of its processes' time."""
    global _ahead
    if _ahead is None:
        try:
            from .records_ahead import AHEAD
        except ImportError:  # (a checkout whose generated module is missing)
            AHEAD = {}
        _ahead = AHEAD
    maker = _ahead.get(source)
    if maker is not None:
        try:
            return maker(scope)
        except KeyError:  # a scope without a name the ahead one binds: compiled as given
            pass
    exec(source, scope)
    return scope[name]


def _values(self: Any) -> tuple[Any, ...]:
    return tuple(getattr(self, name) for name in self.__record_fields__)


def _repr(self: Any) -> str:
    inner = ", ".join(f"{name}={getattr(self, name)!r}" for name in self.__record_shown__)
    return f"{type(self).__qualname__}({inner})"


def _eq(self: Any, other: object) -> Any:
    if other.__class__ is not self.__class__:
        return NotImplemented
    return bool(_values(self) == _values(other))


def _hash(self: Any) -> int:
    return hash(_values(self))


def _frozen_setattr(self: Any, name: str, *_: Any) -> None:
    raise AttributeError(f"cannot assign to field {name!r} of a frozen "
                         f"{type(self).__qualname__}")


@dataclass_transform(field_specifiers=(field,))
def record_class(cls: type[_T] | None = None, /, *, frozen: bool = False) -> Any:
    """Make ``cls`` a record class (as ``@dataclass(slots=True[, frozen=True])``)."""
    def wrap(target: type[_T]) -> type[_T]:
        return _build(target, frozen)

    return wrap if cls is None else wrap(cls)


def replace(obj: _T, **changes: Any) -> _T:
    """A copy of the record ``obj`` with ``changes`` (as ``dataclasses.replace``, which it
    calls for a dataclass)."""
    names: tuple[str, ...] | None = getattr(type(obj), "__record_fields__", None)
    if names is None:
        from dataclasses import replace as replace_dataclass

        return replace_dataclass(obj, **changes)  # type: ignore[type-var]
    values = {name: getattr(obj, name) for name in names}
    unknown = set(changes) - set(names)
    if unknown:
        raise TypeError(f"{type(obj).__qualname__} has no field {sorted(unknown)[0]!r}")
    values.update(changes)
    return type(obj)(**values)
