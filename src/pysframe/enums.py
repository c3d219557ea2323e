"""Enum classes made without the ``enum`` module: :class:`Enum`, :class:`IntEnum`, :class:`StrEnum`.

Why by hand: start-up, as :mod:`pysframe.records`. ``sframe stack`` is measured against
gdb and eu-stack, and importing ``enum`` costs ~4.5 ms of a ~37 ms run (it imports
``functools``, which imports ``collections``), and each class ~0.1-0.3 ms more to build;
the modules on the stack path define six. Type checkers see the standard classes (the
``TYPE_CHECKING`` import below); at run time these make classes that behave as the
standard ones do where the project uses them:

- members are instances of their class (of ``int``/``str`` for :class:`IntEnum` and
  :class:`StrEnum`, equal to and hashing as their values), in definition order, with
  ``name`` and ``value``; a name whose value repeats an earlier one is an alias;
- ``Class(value)`` gives the member (:exc:`ValueError` if none), ``Class[name]`` too;
  ``iter``, ``len``, ``__members__``, ``_value2member_map_``, ``_member_names_``;
- a class's own ``__new__`` makes its members from their (tuple) values and may set
  ``_value_``; reassigning a member is refused;
- ``repr``, ``str`` and ``format`` as Python 3.11's, and members pickle and copy as
  themselves.

Not supported (unused): ``auto``, flags, ``_missing_``, ``_ignore_``, subclassing an
enum that has members, functional creation (``Enum("Name", ...)``).
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from enum import Enum as Enum
    from enum import IntEnum as IntEnum
    from enum import StrEnum as StrEnum
else:
    def _is_member(name: str, value: object) -> bool:
        """Whether a class-body name is a member, as the enum module decides: not private
        (``_x``, ``__x__``) and not a descriptor (a function, a property)."""
        if name.startswith("_"):
            return False
        kind = type(value)
        return not (hasattr(kind, "__get__") or hasattr(kind, "__set__")
                    or hasattr(kind, "__delete__"))

    class _EnumType(type):
        """The class of enum classes: makes the members and looks them up."""

        def __new__(mcls, name, bases, namespace):
            members = [(key, value) for key, value in namespace.items()
                       if _is_member(key, value)]
            body = {key: value for key, value in namespace.items()
                    if not _is_member(key, value)}
            cls = super().__new__(mcls, name, bases, body)
            if not any(isinstance(base, _EnumType) for base in bases):
                return cls  # Enum itself
            make = body.get("__new__")
            by_name, by_value, names = {}, {}, []
            for key, value in members:
                member = cls._make_member(make, value)
                existing = by_value.get(member._value_)
                if existing is not None:  # an alias
                    by_name[key] = existing
                    type.__setattr__(cls, key, existing)
                    continue
                member._name_ = key
                by_name[key] = member
                by_value[member._value_] = member
                names.append(key)
                type.__setattr__(cls, key, member)
            type.__setattr__(cls, "_member_map_", by_name)
            type.__setattr__(cls, "_value2member_map_", by_value)
            type.__setattr__(cls, "_member_names_", names)
            return cls

        def _make_member(cls, make, value):
            if make is not None:  # the class's own __new__, given the value's items
                member = make(cls, *value) if isinstance(value, tuple) else make(cls, value)
            else:
                member = cls._base_new(value)
            if "_value_" not in member.__dict__:
                member._value_ = value
            return member

        def __call__(cls, value):
            try:
                return cls._value2member_map_[value]
            except (KeyError, TypeError):
                raise ValueError(f"{value!r} is not a valid {cls.__qualname__}") from None

        def __getitem__(cls, name):
            return cls._member_map_[name]

        def __iter__(cls):
            return (cls._member_map_[name] for name in cls._member_names_)

        def __len__(cls):
            return len(cls._member_names_)

        def __contains__(cls, value):
            if isinstance(value, cls):
                return True
            try:
                return value in cls._value2member_map_
            except TypeError:
                return False

        def __bool__(cls):
            return True

        @property
        def __members__(cls):
            return dict(cls._member_map_)

        def __setattr__(cls, name, value):
            if name in cls.__dict__.get("_member_map_", ()):
                raise AttributeError(f"cannot reassign member {name!r}")
            super().__setattr__(name, value)

        def __delattr__(cls, name):
            if name in cls.__dict__.get("_member_map_", ()):
                raise AttributeError(f"cannot delete member {name!r}")
            super().__delattr__(name)

        def __repr__(cls):
            return f"<enum {cls.__name__!r}>"

    class Enum(metaclass=_EnumType):
        """A member: its ``name`` and ``value``; compared by identity."""

        @classmethod
        def _base_new(cls, _value):
            return object.__new__(cls)

        @property
        def name(self):
            return self._name_

        @property
        def value(self):
            return self._value_

        def __repr__(self):
            return f"<{type(self).__name__}.{self._name_}: {self._value_!r}>"

        def __str__(self):
            return f"{type(self).__name__}.{self._name_}"

        def __format__(self, spec):
            return format(str(self), spec)

        def __hash__(self):
            return hash(self._name_)

        def __reduce_ex__(self, _protocol):
            return type(self), (self._value_,)

        def __copy__(self):
            return self

        def __deepcopy__(self, _memo):
            return self

    class IntEnum(int, Enum):
        """A member that is its ``int`` value (3.11: ``str`` and ``format`` as the int)."""

        @classmethod
        def _base_new(cls, value):
            return int.__new__(cls, value)

        # int comes before Enum in the MRO: its format, hash and equality are the
        # members'. Its repr is not, and int has no str of its own (Enum's would win).
        __repr__ = Enum.__repr__
        __str__ = int.__repr__

    class StrEnum(str, Enum):
        """A member that is its ``str`` value."""

        @classmethod
        def _base_new(cls, value):
            if not isinstance(value, str):
                raise TypeError(f"{value!r} is not a string")
            return str.__new__(cls, value)

        __repr__ = Enum.__repr__  # (str's str, format, hash and equality come first)
