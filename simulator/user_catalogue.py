"""A user's own devices, links, fabrics and models, from YAML files outside the package.

A user catalogue is a YAML mapping with any of these sections::

    devices:     # same fields as hetsim's devices/catalogue.yaml
      my-npu: {display_name: My NPU, vendor: me, kind: npu, peak_flops: {bf16: 400e12},
               memory_bytes: 68719476736, memory_bandwidth_Bps: 1.6e12, source: "datasheet"}
    links:       # same fields as devices/links.yaml's links:
      my-link: {display_name: ..., kind: pcie, bandwidth_Bps: 32e9, latency_s: 2e-6, source: ...}
    fabrics:     # same fields as devices/links.yaml's fabrics:
    models:      # a dense or MoE model from a Hugging Face config.json ...
      my-llama: {hf_config: configs/llama-3-8b.json}
      # ... or a dense model's fields, as in workloads/models/dense.yaml
      tiny: {display_name: Tiny, params: 1.1e9, layers: 22, hidden: 2048, heads: 32,
             kv_heads: 4, ffn: 5632, vocab: 32000, max_context: 2048, source: "..."}

Files come from a scenario's ``catalogue:`` list (relative to the scenario file) and from
``HETSIM_CATALOGUE`` (paths separated by ``os.pathsep``). Entries join the registries
under their names, once per process; a name that is already defined differently (a
shipped device, another user file) is an error, so a scenario cannot silently change
what ``h100-sxm`` means.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from hetsim.devices import catalogue as devcat
from hetsim.simulator import registry
from hetsim.workloads.models.dense import ModelSpec, model_doc, parse_model
from hetsim.workloads.models.hf_config import model_from_hf_config
from hetsim.workloads.models.moe import MoEModel, add_moe_model

ENV_CATALOGUE = "HETSIM_CATALOGUE"
SECTIONS = ("devices", "links", "fabrics", "models")

_loaded: set[Path] = set()


class UserCatalogueError(ValueError):
    """A user catalogue file that cannot be read or holds a bad entry."""


def load_user_catalogue(path: Path) -> None:
    """Register every entry of the user catalogue at ``path`` (once per process)."""
    from hetsim.workloads.paths import expand_user

    try:
        path = expand_user(str(path)).resolve()
    except (ValueError, OSError) as e:
        raise UserCatalogueError(str(e)) from None
    if path in _loaded:
        return
    data = _read(path)
    unknown = sorted(set(data) - set(SECTIONS))
    if unknown:
        raise UserCatalogueError(
            f"{path.name}: {unknown[0]}: unknown section; valid: {', '.join(SECTIONS)}"
        )
    devcat.register_catalogue()
    try:
        if data.get("devices"):
            specs = devcat.load_device_catalogue(path)
            devcat.register(registry.device_types, specs, devcat.device_doc)
        if data.get("links"):
            links = devcat.load_link_catalogue(path)
            devcat.register(registry.link_types, links, devcat.link_doc)
        if data.get("fabrics"):
            fabrics = devcat.load_fabric_catalogue(path)
            devcat.register(registry.fabrics, fabrics, devcat.fabric_doc)
    except ValueError as e:  # CatalogueError or a clash with a registered name
        raise UserCatalogueError(str(e)) from None
    for name, raw in (data.get("models") or {}).items():
        _add_model(path, str(name), raw)
    _loaded.add(path)


def load_env_catalogues() -> None:
    """Load every file named in ``HETSIM_CATALOGUE``."""
    for item in os.environ.get(ENV_CATALOGUE, "").split(os.pathsep):
        if item.strip():
            try:
                load_user_catalogue(Path(item.strip()))
            except UserCatalogueError as e:
                raise UserCatalogueError(f"{ENV_CATALOGUE}: {e}") from None


def _read(path: Path) -> Mapping[str, Any]:
    from hetsim.simulator.boundary import MAX_FILE_BYTES, data_file_problem

    problem = data_file_problem(path, MAX_FILE_BYTES)
    if problem is not None:
        raise UserCatalogueError(f"{path}: {problem}")
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise UserCatalogueError(f"{path}: cannot read: {e.strerror}") from None
    except (UnicodeDecodeError, yaml.YAMLError) as e:
        raise UserCatalogueError(f"{path.name}: not valid YAML: {e}") from None
    if not isinstance(data, Mapping):
        raise UserCatalogueError(f"{path.name}: a catalogue must be a YAML mapping")
    return data


def _add_model(path: Path, name: str, raw: Any) -> None:
    where = f"{path.name}: models.{name}"
    if not isinstance(raw, Mapping):
        raise UserCatalogueError(f"{where}: must be a mapping")
    try:
        if "hf_config" in raw:
            extra = sorted(set(raw) - {"hf_config"})
            if extra:
                raise ValueError(f"{extra[0]}: not allowed beside hf_config")
            model: ModelSpec | MoEModel = model_from_hf_config(
                name, (path.parent / str(raw["hf_config"])).resolve()
            )
        elif "routed_experts" in raw:
            model = MoEModel(name=name, **raw)
        else:
            model = parse_model(name, dict(raw))
    except (KeyError, TypeError, ValueError) as e:
        raise UserCatalogueError(f"{where}: {str(e).strip(chr(34) + chr(39))}") from None
    if isinstance(model, MoEModel):
        try:
            add_moe_model(model)
        except ValueError as e:
            raise UserCatalogueError(f"{where}: {e}") from None
        return
    if name in registry.models:
        if registry.models.get(name) != model:
            raise UserCatalogueError(f"{where}: a different model is already named {name!r}")
        return
    registry.models.add(name, model, doc=model_doc(model), params={})
