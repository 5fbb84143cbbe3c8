"""LoRA adapters applied with peft to the hf engine's own model, held by name.

The first adapter wraps the engine's model in place (the base weights stay as loaded); later ones
are added beside it. One adapter, or none, is active at a time. `load_live`
(`HFEngine.load_adapter`) adds, activates and deletes retired versions in one step; `add` /
`activate` / `delete` serve `mua serve` (`add` never changes the active one). The caller holds the
engine (no row in flight) and drops its kept KV. Not here: adapters from disk, several adapters in
one forward.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from mua.engines.adapter_versions import AdapterVersions


class PeftAdapters:
    """The named adapters on one model, and which one is active (None: the base alone)."""

    def __init__(self, model) -> None:
        self.model = model
        self.peft = None  # the peft wrapper around `model`, after the first adapter
        self.active: str | None = None
        self.versions = AdapterVersions()  # `load_live`'s bookkeeping

    @property
    def names(self) -> list[str]:
        return [] if self.peft is None else list(self.peft.peft_config)

    def add(self, name: str, named_tensors: Iterable[tuple[str, Any]], config: dict) -> None:
        """Apply the adapter (peft file names, `adapter_config.json` content) under `name`;
        ValueError (nothing kept) when its tensors do not fit the model's layers."""
        from peft import get_peft_config, get_peft_model, set_peft_model_state_dict

        from mua.models.lora_embeddings import add_tied_head_adapter

        if name in self.names:
            raise ValueError(f"an adapter named {name!r} is already loaded")
        peft_config = get_peft_config(dict(config))
        if self.peft is None:  # wraps the model in place: its layers gain the adapter
            self.peft = get_peft_model(self.model, peft_config, adapter_name=name)
        else:
            self.peft.add_adapter(name, peft_config)
            add_tied_head_adapter(self.peft, name)  # an adapted embedding's tied head
        result = set_peft_model_state_dict(self.peft, dict(named_tensors), adapter_name=name)
        missing = [k for k in result.missing_keys if ".lora_" in k and f".{name}." in k]
        if result.unexpected_keys or missing:
            self._remove(name)
            raise ValueError(
                f"load_adapter: {len(result.unexpected_keys)} tensors fit no LoRA layer (e.g. "
                f"{result.unexpected_keys[:1]}), {len(missing)} adapter tensors missing "
                f"(e.g. {missing[:1]})"
            )
        self.activate(self.active)  # adding never changes what the model generates with

    def activate(self, name: str | None) -> None:
        """Generate with adapter `name` from now on (None: the base model alone)."""
        if self.peft is None:
            if name is not None:
                raise ValueError(f"no LoRA adapter named {name!r} is loaded")
            return
        if name is None:
            self.peft.base_model.disable_adapter_layers()
        else:
            if name not in self.names:
                raise ValueError(f"no LoRA adapter named {name!r} is loaded")
            self.peft.base_model.enable_adapter_layers()
            self.peft.set_adapter(name)
        self.active = name
        self.model.eval().requires_grad_(False)  # new layers (dropout) start in training mode

    def delete(self, name: str) -> None:
        """Remove adapter `name`; deleting the active one leaves the base model active."""
        if name not in self.names:
            raise ValueError(f"no LoRA adapter named {name!r} is loaded")
        self._remove(name)
        if self.active == name:
            self.activate(None)

    def load_live(
        self,
        name: str,
        named_tensors: Iterable[tuple[str, Any]],
        config: dict,
        weight_version: str | None = None,
    ) -> None:
        """Add `name` (carrying the trainer's `weight_version`, when given), make it active, and
        delete the older versions no request names."""
        self.add(name, named_tensors, config)
        self.activate(name)
        for old in self.versions.adopt(name, weight_version=weight_version):
            self._remove(old)

    def active_version(self) -> str | None:
        """The weight_version the active adapter's push carried (None: none, or the base)."""
        return self.versions.version_of(self.active)

    def _remove(self, name: str) -> None:
        if len(self.names) > 1:
            self.peft.delete_adapter(name)
            if self.active not in self.names:
                self.active = None
            self.activate(self.active)
            return
        # peft cannot delete the last adapter: unwrap the layers back to the plain model
        self.peft.base_model.unload()
        self.peft, self.active = None, None
