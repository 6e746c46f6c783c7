"""Any dataset in a few lines of YAML: ``loader: parquet`` reads a plain file (pyarrow only, the
``parquet`` extra), ``loader: hf`` goes through the ``datasets`` library (the ``hf`` extra): a local
directory, a Parquet/Arrow/CSV/JSON file, or a hub name found in the local caches. Both map records
to items with ``datasets.fields``.

The ``datasets`` library downloads what it does not have unless ``HF_DATASETS_OFFLINE`` (or
``HF_HUB_OFFLINE``) is set; set, a dataset that is not on this machine is a clear error naming the
caches looked in, never a hang or a retry loop.
"""

from __future__ import annotations

import importlib
import os
from pathlib import Path
from types import ModuleType
from typing import Any

from pytest_echo_bench.datasets.example import Example
from pytest_echo_bench.datasets.fields import to_examples
from pytest_echo_bench.datasets.loaders import dataset_path, window
from pytest_echo_bench.datasets.tables import FORMATS, file_format, read_table
from pytest_echo_bench.errors import UnavailableError
from pytest_echo_bench.spec.load import Spec

_BUILDERS = {"json": "json", "jsonl": "json", "csv": "csv", "parquet": "parquet", "arrow": "arrow"}
_SAVED = ("dataset_info.json", "dataset_dict.json", "state.json")  # what ``save_to_disk`` leaves


def parquet(spec: Spec) -> list[Example]:
    """The records of a plain file (Parquet, Arrow, CSV, JSON, JSON Lines),
    no ``datasets`` library needed."""
    _no_splits(spec, "loader parquet reads one file")
    path = dataset_path(spec)
    # read only these: the rest of a large file never becomes Python values
    start, end = window(spec)
    records = read_table(
        path, lambda why: _missing_extra(spec, f"dataset {path} {why}"), start, end
    )
    return _nonempty(spec, to_examples(spec, records, start, f"dataset {path}"))


def _no_splits(spec: Spec, what: str) -> None:
    """One file is one table: a ``split`` or ``config`` named for it would be silently ignored."""
    for key in ("split", "config"):
        if spec.dataset.get(key) is not None:
            raise spec.error(
                f"{what}, which has no {key}s: remove {key}, or give loader hf a directory "
                "or a hub "
                "name that has them",
                "dataset",
                key,
            )


def _missing_extra(spec: Spec, message: str, key: str = "path") -> Exception:
    """A missing extra skips a dataset marked optional; anything else
    about the file is the spec's error."""
    if "pip install" in message and spec.dataset.get("optional") is True:
        return UnavailableError(f"{message} ({spec.path.name} marks its dataset optional)")
    return spec.error(message, "dataset", key)


def hf(spec: Spec) -> list[Example]:
    """A ``split`` of a dataset at ``path`` (local) or ``name`` (a hub id),
    through the ``datasets`` library."""
    lib = _datasets(spec)
    split = spec.dataset.get("split", "train")
    if not isinstance(split, str) or not split:
        raise spec.error(
            "split must name one split (train, test, validation, ...)", "dataset", "split"
        )
    table = _split(spec, _open(spec, lib, split), split)
    start, end = window(spec)
    end = len(table) if end is None else min(end, len(table))
    records: list[dict[str, Any]] = table.select(range(min(start, end), end)).to_list()
    source = spec.dataset.get("path") or spec.dataset.get("name")
    return _nonempty(spec, to_examples(spec, records, start, f"dataset {source}"))


def _nonempty(spec: Spec, examples: list[Example]) -> list[Example]:
    if not examples:
        raise spec.error("the dataset has no items (after start and limit)", "dataset")
    return examples


def _datasets(spec: Spec) -> ModuleType:
    try:
        lib = importlib.import_module("datasets")
    except ImportError:
        raise _missing_extra(
            spec,
            "loader hf needs the datasets package: pip install 'pytest-echo-bench[hf]'",
            "loader",
        ) from None
    lib.disable_progress_bars()  # its bars would write into pytest's output at every collection
    return lib


def _open(spec: Spec, lib: ModuleType, split: str) -> Any:
    if spec.dataset.get("path") is not None:
        return _local(spec, lib, split)
    name, config = spec.dataset.get("name"), spec.dataset.get("config")
    if not isinstance(name, str) or not name:
        raise spec.error(
            "loader hf needs a 'path' (a local directory or file) or a 'name' (a hub dataset id)",
            "dataset",
        )
    if config is not None and not isinstance(config, str):
        raise spec.error("config must name one configuration of the dataset", "dataset", "config")
    snapshot = _hub_snapshot(name)
    if snapshot is None and offline(lib) and not _library_offline(lib):
        # Set after the library was imported (it reads the variables once):
        # it would still try the network.
        raise _unreadable(spec, lib, name, None)
    if snapshot is not None:
        _check_choice(spec, lib, snapshot, config, split)
    try:
        return lib.load_dataset(
            str(snapshot) if snapshot else name, config, split=split, cache_dir=_cache("datasets")
        )
    except (OSError, ValueError, lib.exceptions.DatasetsError) as exc:
        # it is on this machine: whatever failed, "not here" would send the user astray
        if snapshot is not None:
            raise spec.error(
                f"the datasets library cannot read dataset {name!r} from {snapshot}: {exc}",
                "dataset",
                "name",
            ) from None
        raise _unreadable(spec, lib, name, exc) from None


def _check_choice(
    spec: Spec, lib: ModuleType, snapshot: Path, config: str | None, split: str
) -> None:
    """A config or split the cached dataset lacks is the spec's mistake, named as such
    (even when the dataset is optional: optional forgives a dataset not on this
    machine, never a misspelt name)."""
    try:
        configs = list(lib.get_dataset_config_names(str(snapshot)))
        splits = (
            list(lib.get_dataset_split_names(str(snapshot), config))
            if config is None or config in configs
            else []
        )
    except (OSError, ValueError, lib.exceptions.DatasetsError):
        return  # the library cannot list them here: load_dataset below gives its own error
    if config is not None and config not in configs:
        raise spec.error(
            f"no config {config!r}; the dataset has {', '.join(configs)}", "dataset", "config"
        )
    if split not in splits:
        raise spec.error(
            f"no split {split!r}; the dataset has {', '.join(splits)}", "dataset", "split"
        )


def _local(spec: Spec, lib: ModuleType, split: str) -> Any:
    if not _is_dir(spec):
        _no_splits(spec, "the dataset's path is one file")
    config = spec.dataset.get("config")
    if config is not None and not isinstance(config, str):
        raise spec.error("config must name one configuration of the dataset", "dataset", "config")
    path = dataset_path(spec, "directory" if _is_dir(spec) else "file")
    saved = path.is_dir() and any((path / f).is_file() for f in _SAVED)
    if saved and config is not None:
        raise spec.error(
            "a dataset saved with save_to_disk has no configs: remove config", "dataset", "config"
        )
    try:
        if saved:
            return lib.load_from_disk(str(path))
        if path.is_dir():
            return lib.load_dataset(str(path), config, split=split, cache_dir=_cache("datasets"))
        kind = file_format(path)
        if kind is None:
            raise spec.error(
                f"cannot tell the format of {path.name}: name it {', '.join(FORMATS)}",
                "dataset",
                "path",
            )
        return lib.load_dataset(
            _BUILDERS[kind],
            data_files={split: str(path)},
            split=split,
            cache_dir=_cache("datasets"),
        )
    except (OSError, ValueError, lib.exceptions.DatasetsError) as exc:
        raise spec.error(
            f"the datasets library cannot read {path}: {exc}", "dataset", "path"
        ) from None


def _is_dir(spec: Spec) -> bool:
    raw = Path(str(spec.dataset["path"])).expanduser()
    return (raw if raw.is_absolute() else spec.path.parent / raw).is_dir()


def _split(spec: Spec, loaded: Any, split: str) -> Any:
    """One split: ``load_from_disk`` gives every split of a saved dataset at once."""
    if not hasattr(loaded, "keys"):
        return loaded
    if split not in loaded:
        raise spec.error(
            f"no split {split!r}; the dataset has {', '.join(sorted(loaded))}", "dataset", "split"
        )
    return loaded[split]


def _hub_snapshot(name: str) -> Path | None:
    """The dataset's snapshot in the local hub cache, without asking the network."""
    try:
        hub = importlib.import_module("huggingface_hub")
        return Path(
            hub.snapshot_download(
                name, repo_type="dataset", local_files_only=True, cache_dir=_cache("hub")
            )
        )
    # not cached (LocalEntryNotFoundError is an OSError), or no hub client
    except (ImportError, OSError, ValueError):
        return None


def _cache(kind: str) -> str | None:
    """The cache the environment names now (``HF_HUB_CACHE``, ``HF_DATASETS_CACHE``, ``HF_HOME``):
    the libraries read these once, at import, and a sweep's environment may set them later."""
    named = os.environ.get("HF_HUB_CACHE" if kind == "hub" else "HF_DATASETS_CACHE")
    home = os.environ.get("HF_HOME")
    return named or (str(Path(home) / kind) if home else None)


_TRUE = {"1", "on", "yes", "true"}


def offline(lib: ModuleType) -> bool:
    """``HF_DATASETS_OFFLINE`` or ``HF_HUB_OFFLINE`` set, now or when the library was imported."""
    now = any(
        os.environ.get(v, "").strip().lower() in _TRUE
        for v in ("HF_DATASETS_OFFLINE", "HF_HUB_OFFLINE")
    )
    return now or _library_offline(lib)


def _library_offline(lib: ModuleType) -> bool:
    config = lib.config
    return bool(
        getattr(config, "HF_DATASETS_OFFLINE", False) or getattr(config, "HF_HUB_OFFLINE", False)
    )


def _unreadable(spec: Spec, lib: ModuleType, name: str, exc: BaseException | None) -> Exception:
    if offline(lib):
        hub = _cache("hub") or importlib.import_module("huggingface_hub").constants.HF_HUB_CACHE
        data = _cache("datasets") or lib.config.HF_DATASETS_CACHE
        message = (
            f"dataset {name!r} is not on this machine (not in the hub cache {hub} nor the "
            f"datasets cache {data}) "
            "and HF_DATASETS_OFFLINE / HF_HUB_OFFLINE forbids downloading it: fetch it once "
            "online, or give "
            "its local 'path'"
        )
    else:
        message = f"cannot load dataset {name!r}: {exc}"
    if spec.dataset.get("optional") is True:
        return UnavailableError(f"{message} ({spec.path.name} marks it optional)")
    return spec.error(message, "dataset", "name")
