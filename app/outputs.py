"""Outputs and inputs bound by name: a callback returns a dataclass of its outputs, and takes a dataclass of the
values of a group of controls read together; the page names a component per field.

Gradio updates an event's outputs from a dict {component: value} as well as from a tuple in the order of
the event's outputs list (a component missing from the dict stays as it is). So a callback returns, say,
`RunView(text=..., stats=...)`, the tab that lays the components out holds them in one mapping by the
same names, and `bound` turns the one into the other; nothing depends on the order of a tuple.

Gradio passes an event's input values by position, in the order of its inputs list. So a group of controls (the
Lab's tree shape) is a frozen dataclass, the tab holds its components in one mapping by the fields' names
(`Controls`), and `gathered` builds the dataclass from the values Gradio passes, field by field, in the order
`inputs` lists the components in; nothing depends on the order the tab names them in.
"""

from __future__ import annotations

import enum
import functools
import inspect
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, fields
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
    return _wrapped(callback, lambda args: args, lambda view: on_page(view, components))


@dataclass(frozen=True)
class Controls:
    """The controls one argument of a callback is read from: a value of the dataclass `view`, each field set by the
    component of its name in `components` (which names those fields and no other: checked at build time)."""

    view: type
    components: Components

    def __post_init__(self) -> None:
        names = [field.name for field in fields(self.view)]
        if sorted(names) != sorted(self.components):
            raise ValueError(f"{self.view.__name__} is read from controls named {names}, got {list(self.components)}")

    @property
    def inputs(self) -> list[gr.components.Component]:
        """The components, in the order of `view`'s fields: the order Gradio passes their values in."""
        return [self.components[field.name] for field in fields(self.view)]

    def read(self, values: Sequence[Any]) -> Any:
        """The `view` whose fields hold `values`, given in the order of `inputs`."""
        return self.view(**{field.name: value for field, value in zip(fields(self.view), values, strict=True)})


Input = gr.components.Component | Controls  # one argument of a callback, read from one component or a group


def inputs(*arguments: Input) -> list[gr.components.Component]:
    """An event's inputs for a callback `gathered` over `arguments`: each component, each group's in field order."""
    return [component for argument in arguments
            for component in (argument.inputs if isinstance(argument, Controls) else [argument])]


def gathered(callback: Callable[..., Any], *arguments: Input) -> Callable[..., Any]:
    """`callback`, whose first parameters take `arguments` (a group's: its dataclass), taking instead the values of
    `inputs(*arguments)` as Gradio passes them, by position; what follows (gr.Request, gr.Progress) passes through.

    Its signature lists each group's fields in the place of the group's parameter: Gradio reads it to pass
    gr.Request and gr.Progress at their positions and to name the API's parameters."""
    def read(values: tuple) -> tuple:
        taken, at = [], 0
        for argument in arguments:
            if isinstance(argument, Controls):
                width = len(fields(argument.view))
                taken.append(argument.read(values[at:at + width]))
            else:
                width = 1
                taken.append(values[at])
            at += width
        return (*taken, *values[at:])

    signature = inspect.signature(callback)
    parameters = list(signature.parameters.values())
    listed, annotations = [], dict(getattr(callback, "__annotations__", {}))
    for parameter, argument in zip(parameters, arguments, strict=False):
        if isinstance(argument, Controls):
            listed += [inspect.Parameter(field.name, inspect.Parameter.POSITIONAL_OR_KEYWORD)
                       for field in fields(argument.view)]
            # Gradio reads the annotations beside the signature (typing.get_type_hints): the group's goes with it
            annotations.pop(parameter.name, None)
        else:
            listed.append(parameter)
    wrapper = _wrapped(callback, read, lambda value: value)
    wrapper.__signature__ = signature.replace(parameters=[*listed, *parameters[len(arguments):]])
    wrapper.__annotations__ = annotations
    return wrapper


def _wrapped(callback: Callable[..., Any], arguments: Callable[[tuple], tuple],
             result: Callable[[Any], Any]) -> Callable[..., Any]:
    """`callback` (a function or a generator, plain or async) with its positional arguments passed through
    `arguments` and what it returns or yields through `result`, of the same kind, its signature kept
    (functools.wraps)."""
    if inspect.isasyncgenfunction(callback):
        @functools.wraps(callback)
        async def stream_async(*args: Any, **kwargs: Any) -> AsyncIterator[Any]:
            async for value in callback(*arguments(args), **kwargs):
                yield result(value)

        return stream_async

    if inspect.iscoroutinefunction(callback):
        @functools.wraps(callback)
        async def call_async(*args: Any, **kwargs: Any) -> Any:
            return result(await callback(*arguments(args), **kwargs))

        return call_async

    if inspect.isgeneratorfunction(callback):
        @functools.wraps(callback)
        def stream(*args: Any, **kwargs: Any) -> Iterator[Any]:
            for value in callback(*arguments(args), **kwargs):
                yield result(value)

        return stream

    @functools.wraps(callback)
    def call(*args: Any, **kwargs: Any) -> Any:
        return result(callback(*arguments(args), **kwargs))

    return call
