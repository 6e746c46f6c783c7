"""pytest-echo-bench: LLM benchmark sweeps where every benchmark item is a pytest test."""

from __future__ import annotations

__version__ = "0.1.0"

from .arms import ArmContext, arm  # noqa: E402
from .datasets import Example  # noqa: E402
from .providers.base import Completion  # noqa: E402
from .scoring import Verdict, judge, scorer  # noqa: E402

__all__ = ["ArmContext", "Completion", "Example", "Verdict", "__version__", "arm", "judge", "scorer"]
