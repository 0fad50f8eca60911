"""Outputs bound by name: a callback returns a dataclass of its outputs, the page names a component per field.

Gradio updates an event's outputs from a dict {component: value} as well as from a tuple in the order of
the event's outputs list (a component missing from the dict stays as it is). So a callback returns, say,
`RunView(text=..., stats=...)`, the tab that lays the components out holds them in one mapping by the
same names, and `bound` turns the one into the other; nothing depends on the order of a tuple.
"""

from __future__ import annotations

import enum
import functools
import inspect
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from dataclasses import fields
from typing import Any

import gradio as gr

Components = Mapping[str, gr.components.Component]  # output field name -> the component that shows it


class Keep(enum.Enum):
    """The value of an output left as it is on the page (an enum member, so it survives ZeroGPU's pickling)."""

    KEEP = "keep"


KEEP = Keep.KEEP


def outputs(view: type, components: Components) -> list[gr.components.Component]:
    """The components an event returning `view` updates, in its fields' order (the order API clients read)."""
    return [components[field.name] for field in fields(view)]


def on_page(view: Any, components: Components) -> dict[gr.components.Component, Any]:
    """`view` as Gradio's return value: each field's value keyed by its component, fields left KEEP left out."""
    return {components[field.name]: value for field in fields(view)
            if (value := getattr(view, field.name)) is not KEEP}


def bound(callback: Callable[..., Any], components: Components) -> Callable[..., Any]:
    """`callback` (a function or a generator of views, plain or async) returning Gradio's {component: value}
    instead.

    functools.wraps keeps the callback's signature visible, which Gradio reads to pass gr.Request and
    gr.Progress and to document the API."""
    if inspect.isasyncgenfunction(callback):
        @functools.wraps(callback)
        async def stream_async(*args: Any, **kwargs: Any) -> AsyncIterator[dict[gr.components.Component, Any]]:
            async for view in callback(*args, **kwargs):
                yield on_page(view, components)

        return stream_async

    if inspect.iscoroutinefunction(callback):
        @functools.wraps(callback)
        async def call_async(*args: Any, **kwargs: Any) -> dict[gr.components.Component, Any]:
            return on_page(await callback(*args, **kwargs), components)

        return call_async

    if inspect.isgeneratorfunction(callback):
        @functools.wraps(callback)
        def stream(*args: Any, **kwargs: Any) -> Iterator[dict[gr.components.Component, Any]]:
            for view in callback(*args, **kwargs):
                yield on_page(view, components)

        return stream

    @functools.wraps(callback)
    def call(*args: Any, **kwargs: Any) -> dict[gr.components.Component, Any]:
        return on_page(callback(*args, **kwargs), components)

    return call
