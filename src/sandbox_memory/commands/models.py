"""The specification's commands as values: Remember, Forget, Configure, Refresh."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, Field

from ..engines.base import EntryKind
from ..errors import MemoryConfigError

if TYPE_CHECKING:
    pass


logger = logging.getLogger("sandbox_memory")


class Remember(BaseModel):
    tag: Literal["Remember"] = Field(default="Remember", alias="_tag")
    key: str
    content: str
    kind: EntryKind = "fact"
    person: str | None = None
    """Owner of a private entry (a preference); ``None`` for shared work."""

    model_config = {"populate_by_name": True}


class Forget(BaseModel):
    tag: Literal["Forget"] = Field(default="Forget", alias="_tag")
    key: str

    model_config = {"populate_by_name": True}


class Configure(BaseModel):
    """``True``/``False`` set a switch; ``None`` removes the override; absent leaves it."""

    tag: Literal["Configure"] = Field(default="Configure", alias="_tag")
    use: bool | None = None
    generate: bool | None = None

    model_config = {"populate_by_name": True}


class Refresh(BaseModel):
    tag: Literal["Refresh"] = Field(default="Refresh", alias="_tag")

    model_config = {"populate_by_name": True}


Command = Remember | Forget | Configure | Refresh


def parse_command(data: dict[str, Any]) -> Command:
    """A command from its JSON form (``{"_tag": "Remember", ...}``)."""

    tag = data.get("_tag")
    kinds: dict[str, type[BaseModel]] = {
        "Remember": Remember,
        "Forget": Forget,
        "Configure": Configure,
        "Refresh": Refresh,
    }
    if tag not in kinds:
        raise MemoryConfigError("command._tag", tag, f"must be one of {sorted(kinds)}")
    return kinds[tag].model_validate(data)  # type: ignore[return-value]
