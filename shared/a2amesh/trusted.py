"""Pydantic models a process may also build and copy without validation, from values it made valid itself.

Validation is for what crosses a trust boundary (a message from NATS, an HTTP body, a file a user wrote). The
records a process makes or copies on its hot paths from values it already holds valid (an A2A Task of its own,
a workflow engine's node instances and state) need none: :meth:`TrustedModel.built` is ``model_construct`` and
:meth:`TrustedModel.updated` is ``model_copy(update=...)``, each in fewer steps than pydantic's own. Never hand
them what another process sent.
"""

from __future__ import annotations

from typing import Any, Self

from pydantic import BaseModel

__all__ = ["TrustedModel"]

_DEFAULTS: dict[type[BaseModel], dict[str, Any]] = {}
""":meth:`TrustedModel.built`: each model's defaults by field, in field order (None for a required field)."""


class TrustedModel(BaseModel):
    """A pydantic model that can also be built (:meth:`built`) and copied (:meth:`updated`) without validation."""

    @classmethod
    def built(cls, **values: Any) -> Self:
        """``model_construct(**values)`` for values this process made valid (never what another process sent):
        nothing validated, and the defaults copied from one dict rather than looked up field by field.
        ``values`` must hold every required field."""
        defaults = _DEFAULTS.get(cls)
        if defaults is None:
            fields = cls.model_fields.values()
            assert all(f.default_factory is None for f in fields), f"{cls.__name__}: a default factory"
            # every field, in the order of the fields (the serializer writes a model's __dict__ in its order)
            defaults = _DEFAULTS[cls] = {n: None if f.is_required() else f.default for n, f in cls.model_fields.items()}
        model = cls.__new__(cls)
        object.__setattr__(model, "__dict__", {**defaults, **values})
        object.__setattr__(model, "__pydantic_fields_set__", set(values))
        object.__setattr__(model, "__pydantic_extra__", None)
        object.__setattr__(model, "__pydantic_private__", None)
        return model

    def updated(self, **update: Any) -> Self:
        """``model_copy(update=update)`` (a shallow copy, ``update`` not validated) in fewer steps."""
        model = type(self).__new__(type(self))
        extra, private = self.__pydantic_extra__, self.__pydantic_private__  # None on our models, in practice
        object.__setattr__(model, "__dict__", {**self.__dict__, **update})
        object.__setattr__(model, "__pydantic_fields_set__", self.__pydantic_fields_set__ | update.keys())
        object.__setattr__(model, "__pydantic_extra__", None if extra is None else dict(extra))
        object.__setattr__(model, "__pydantic_private__", None if private is None else dict(private))
        return model
