"""A record: a typed result that is its own wire shape, for every reader from one model.

Fields are camelCase on the wire and built by their Python names. The CLI and the status page
read `wire()`, the MCP server `wire(tools=True)`: the tools' output schemas promise some keys
even when null (`cli_leaves_out`), and a record another process wrote (`as_written`) shows the
CLI only the keys it holds. `say` words the next actions a text names (errors.Hint, fields typed
`Text`), for errors and for records other processes stored alike.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, ClassVar

from pydantic import (
    BaseModel,
    ConfigDict,
    PlainSerializer,
    SerializationInfo,
    SerializerFunctionWrapHandler,
    SkipValidation,
    model_serializer,
    model_validator,
)
from pydantic.alias_generators import to_camel

from appliance.errors import NEXT_ACTIONS, Hint, NextAction, restored

Json = dict[str, object]
"""A JSON object whose keys are data (settings, another process's record), not a record's fields."""


def worded(value: object, say: Callable[[NextAction], str]) -> object:
    """`value` (a text, or JSON data holding texts) with every Hint in it worded by `say`."""
    if isinstance(value, Hint):
        return value.worded(say)
    if isinstance(value, dict):
        return {key: worded(item, say) for key, item in value.items()}
    if isinstance(value, list):
        return [worded(item, say) for item in value]
    return value


def _word(value: object, info: SerializationInfo) -> object:
    say = (info.context or {}).get("say")
    return worded(value, say) if say is not None else value


Text = Annotated[str, SkipValidation, PlainSerializer(_word, return_type=str)]
"""A text that may name next actions: a Hint stays one (not validated into a plain str), and `wire`'s
`say` words it for its reader; the CLI's words without `say`."""
OptionalText = Annotated[str | None, SkipValidation, PlainSerializer(_word, return_type=str | None)]
WordedJson = Annotated[Json | None, PlainSerializer(_word, return_type=Json | None)]
"""JSON data (another process's record, read back with its Hints: errors.restored) whose Hints `say` words."""


def is_none(value: object) -> bool:
    """`Field(default=None, exclude_if=is_none)`: the key is left out of the wire (CLI and tools) when None."""
    return value is None


class Record(BaseModel):
    """A result record: fields under camelCase names on the wire, built by their Python names.

    `cli_leaves_out` names fields whose key the CLI's JSON leaves out when None while the tools'
    results carry it as null (their output schemas promise the key); an `as_written` record (another
    process's file) shows the CLI only the keys it was given."""

    model_config = ConfigDict(alias_generator=to_camel, validate_by_name=True, validate_by_alias=True, frozen=True)
    cli_leaves_out: ClassVar[frozenset[str]] = frozenset()
    as_written: ClassVar[bool] = False

    @model_validator(mode="before")
    @classmethod
    def _restored(cls, data: object) -> object:
        """A stored form with the Hints its texts were (errors.storable) gives them back."""
        return restored(data) if isinstance(data, dict) and NEXT_ACTIONS in data else data

    @model_serializer(mode="wrap")
    def _for_reader(self, handler: SerializerFunctionWrapHandler, info: SerializationInfo) -> Json:
        data: Json = handler(self)
        if (info.context or {}).get("tools"):
            return data
        for name in self.cli_leaves_out:
            key = to_camel(name)
            if key in data and data[key] is None:
                del data[key]
        if self.as_written:
            given = {to_camel(name) for name in self.model_fields_set} | set(self.model_extra or ())
            data = {key: value for key, value in data.items() if key in given}
        return data

    def wire(self, *, tools: bool = False, say: Callable[[NextAction], str] | None = None) -> Json:
        """The record as JSON data: for the MCP tools (`tools`) or for the CLI and the status page; `say`
        words the next actions errors name for the reader (the CLI's wording without it)."""
        return self.model_dump(mode="json", by_alias=True, context={"tools": tools, "say": say})


