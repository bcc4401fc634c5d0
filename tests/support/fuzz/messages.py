"""Descriptor plumbing of the request strategies: a field's message or enum type, the
paths of a message's leaves and fields, and building a message from drawn values."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from google.protobuf import descriptor, field_mask_pb2
from google.protobuf.descriptor import FieldDescriptor

from support.fuzz.rpcs import Message


def sub_message(field: FieldDescriptor) -> descriptor.Descriptor:
    """The message type of a message field."""
    assert field.message_type is not None, field.full_name
    return field.message_type


def enum_type(field: FieldDescriptor) -> descriptor.EnumDescriptor:
    """The enum type of an enum field."""
    assert field.enum_type is not None, field.full_name
    return field.enum_type


def leaf_paths(desc: descriptor.Descriptor, depth: int = 0) -> list[tuple[FieldDescriptor, ...]]:
    """Every field reachable from ``desc`` through message fields (singular or repeated; maps,
    Timestamps, Durations and FieldMasks are leaves), to four levels: the fields a mutant changes."""
    out: list[tuple[FieldDescriptor, ...]] = []
    for field in desc.fields:
        out.append((field,))
        sub = field.message_type
        if (sub is not None and depth < 3 and not sub.GetOptions().map_entry
                and not sub.full_name.startswith("google.protobuf.")):
            out.extend((field, *rest) for rest in leaf_paths(sub, depth + 1))
    return out


def put_value(msg: Message, path: tuple[FieldDescriptor, ...], element: int, value: Any) -> None:
    """Set the field at ``path`` of ``msg`` to ``value`` (a list for repeated fields, pairs for
    maps); a repeated message on the way is entered at ``element`` modulo its length (one is
    added when it is empty)."""
    for field in path[:-1]:
        if field.is_repeated:
            items = getattr(msg, field.name)
            msg = items[element % len(items)] if len(items) else items.add()
        else:
            msg = getattr(msg, field.name)
    assemble_into(msg, {path[-1].name: value})


def field_paths(desc: descriptor.Descriptor) -> list[str]:
    """Field-mask paths into the message fields of ``desc`` (two levels), e.g.
    ``settings`` → ``default_priority``, ``limits``, ``limits.max_payload_bytes``."""
    out: list[str] = []
    for field in desc.fields:
        sub = field.message_type
        if sub is None or sub.full_name.startswith("google.protobuf.") or sub.GetOptions().map_entry:
            continue
        for f in sub.fields:
            out.append(f.name)
            if f.message_type is not None and not f.message_type.full_name.startswith("google.protobuf."):
                out.extend(f"{f.name}.{g.name}" for g in f.message_type.fields)
    return out


def field_mask(paths: list[str]) -> Message:
    """A ``FieldMask`` of ``paths`` (any strings: the fuzzer also sends paths that do not exist)."""
    return field_mask_pb2.FieldMask(paths=paths)


def assemble(cls: type[Message], values: dict[str, Any], oneofs: Sequence[tuple[str, Any] | None]) -> Message:
    """A ``cls`` message holding ``values`` (field name → drawn value) and the chosen member
    of each oneof (``(name, value)``, or None for none)."""
    msg = cls()
    assemble_into(msg, {**values, **dict(choice for choice in oneofs if choice is not None)})
    return msg


def assemble_into(msg: Message, values: dict[str, Any]) -> None:
    """Set the fields named in ``values`` (replacing what they held)."""
    desc = msg.DESCRIPTOR
    for name, value in values.items():
        field = desc.fields_by_name[name]
        target: Any = getattr(msg, name) if field.message_type is not None or field.is_repeated else None
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            target.clear()
            for key, item in value:
                if isinstance(item, Message):
                    target[key].CopyFrom(item)
                else:
                    target[key] = item
        elif field.is_repeated:
            del target[:]
            target.extend(value)
        elif field.message_type is not None:
            target.CopyFrom(value)
            target.SetInParent()  # an empty sub-message is still "set" (presence)
        else:
            setattr(msg, name, value)
