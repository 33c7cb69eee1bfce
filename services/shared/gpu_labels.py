"""Labels a GPU gets from its hardware, and the label selectors people type (pure).

Every GPU carries, from its name and memory as the probe reads them:

- `model=<model>` and `model=<model>-<memory>` (`model=A100`, `model=A100-80GB`): the name
  without the vendor's words ("NVIDIA", "Tesla", "GeForce", "Quadro"), its form factor
  ("SXM4", "PCIe") and memory type ("HBM3"), words joined by `-` (`RTX-3090`, `RTX-A6000`);
- `memory=<size>GB` (`memory=141GB`): the size in the name if it says one, else the memory
  rounded to the size the GPU is sold as (an H200 reports 143771 MiB: `141GB`; a T4 15360 MiB:
  `16GB`);
- `arch=<architecture>` (`arch=hopper`) when the model is one Warden knows.

A selector is a list of terms that must all hold: `key=value` (the GPU carries that label) or
`key!=value` (it does not). Values are compared without regard to case.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from functools import lru_cache

KEYS = ("model", "memory", "arch")
MAX_TERMS = 16
MAX_TERM_LENGTH = 64

_VENDOR_WORDS = frozenset({"nvidia", "tesla", "geforce", "quadro"})
# Form factors and memory types: not part of the model's name.
_DROPPED = re.compile(r"^(sxm\d*|pcie|hbm\d*e?|gddr\d*x?|\d+gb|generation|graphics|dgxs?)$", re.I)
_SIZE_IN_NAME = re.compile(r"(?<![\w.])(\d+)\s*GB\b", re.I)
_MIB_PER_GIB = 1024.0
# The sizes GPUs are sold as, in GB: a reported size a little under one of them (memory the
# driver keeps for ECC or itself) is that size.
_SOLD_SIZES = (
    *(1, 2, 3, 4, 5, 6, 8, 10, 11, 12, 16, 20, 24, 32, 40, 48, 64, 80, 94, 96),
    *(128, 141, 144, 180, 186, 192, 288),
)
_TERM = re.compile(r"^([a-z]+)(!?=)([A-Za-z0-9][A-Za-z0-9._+-]*)$")

# Architectures by model, first match wins (checked against the model label, lower case).
_ARCHITECTURES: tuple[tuple[str, str], ...] = (
    (r"blackwell|^g?b\d{3}\b|^rtx-50\d0|^rtx-pro-\d+", "blackwell"),
    (r"^g?h\d{2,3}\b|^h\d{2,3}-|hopper", "hopper"),
    (r"-ada\b|^l4\b|^l40|^rtx-40\d0|^l20\b", "ada"),
    (r"^a\d{1,3}g?\b|^a\d{1,3}-|^rtx-a\d+|^rtx-30\d0|ampere|^cmp-", "ampere"),
    (r"^t4\b|^t4-|^rtx-20\d0|^gtx-16\d0|^titan-rtx|^rtx-\d000\b|^t\d{3,4}\b", "turing"),
    (r"^v100|^titan-v\b", "volta"),
    (r"^p\d{1,3}\b|^p\d{1,3}-|^gtx-10\d0|^titan-xp?\b", "pascal"),
    (r"^m\d{1,2}\b|^m\d{1,2}-|^gtx-9\d0", "maxwell"),
    (r"^k\d{1,2}\b|^k\d{1,2}-|^gtx-7\d0", "kepler"),
)


def model_of(name: str) -> str:
    """`NVIDIA A100-SXM4-80GB` -> `A100`, `NVIDIA GeForce RTX 3090` -> `RTX-3090`; "" if none.

    A MIG instance's name ("... MIG 3g.20gb") is its parent's model."""
    base = re.split(r"\sMIG\s", f" {name} ", maxsplit=1, flags=re.I)[0]
    words = [word for word in re.split(r"[\s_-]+", base) if word]
    kept = [w for w in words if w.lower() not in _VENDOR_WORDS and not _DROPPED.match(w)]
    # Only what a selector can name: letters, digits and . _ + -
    return re.sub(r"[^A-Za-z0-9._+-]", "", "-".join(kept)).strip("-._+")


def memory_gb(name: str, memory_total_mib: float | None) -> int | None:
    """The memory the GPU is sold with, in GB: the name's size if it says one (not a MIG
    instance's parent), else the reported size rounded to a sold size; None if unknown."""
    parts = re.split(r"\sMIG\s", f" {name} ", maxsplit=1, flags=re.I)
    if len(parts) == 1:
        said = _SIZE_IN_NAME.search(name)
        if said:
            return int(said.group(1))
    if memory_total_mib is None or not memory_total_mib > 0:
        return None
    gib = memory_total_mib / _MIB_PER_GIB
    for size in _SOLD_SIZES:
        if size * 0.9 <= gib <= size * 1.01:
            return size
    return max(1, round(gib))


def architecture_of(model: str) -> str | None:
    lowered = model.lower()
    for pattern, architecture in _ARCHITECTURES:
        if re.search(pattern, lowered):
            return architecture
    return None


def gpu_labels(name: str | None, memory_total_mib: float | None) -> list[str]:
    """The labels of a GPU (see the module's docstring), in the order model, memory, arch."""
    return list(_labels(name or "", memory_total_mib))


@lru_cache(maxsize=4096)
def _labels(name: str, memory_total_mib: float | None) -> tuple[str, ...]:
    model = model_of(name)
    size = memory_gb(name, memory_total_mib)
    labels: list[str] = []
    if model:
        labels.append(f"model={model}")
        if size is not None:
            labels.append(f"model={model}-{size}GB")
    if size is not None:
        labels.append(f"memory={size}GB")
    architecture = architecture_of(model) if model else None
    if architecture:
        labels.append(f"arch={architecture}")
    return tuple(labels)


def union(labels: Iterable[Iterable[str]]) -> list[str]:
    """The labels of several GPUs (a host's), each once, sorted."""
    return sorted({label for some in labels for label in some})


# --- selectors ----------------------------------------------------------------------------------


def term_problem(term: str) -> str | None:
    """Why `term` is not a selector term; None when it is one."""
    if len(term) > MAX_TERM_LENGTH:
        return f"{term[:20]!r}...: at most {MAX_TERM_LENGTH} characters"
    found = _TERM.match(term)
    if found is None:
        return f"{term!r}: write key=value or key!=value (e.g. model=A100-80GB, arch=hopper)"
    if found.group(1) not in KEYS:
        return f"{term!r}: the label keys are {', '.join(KEYS)}"
    return None


def selector_problem(terms: Sequence[str]) -> str | None:
    """Why a selector cannot be used; None when every term is valid."""
    if len(terms) > MAX_TERMS:
        return f"at most {MAX_TERMS} labels"
    for term in terms:
        problem = term_problem(term)
        if problem:
            return problem
    return None


def _holds(term: str, carried: set[str]) -> bool:
    if "!=" in term:
        key, value = term.split("!=", 1)
        return f"{key}={value}".lower() not in carried
    return term.lower() in carried


def failed_terms(labels: Iterable[str], terms: Iterable[str]) -> list[str]:
    """The terms of a selector that a GPU carrying `labels` does not meet (empty: it matches)."""
    carried = {label.lower() for label in labels}
    return [term for term in terms if not _holds(term, carried)]


def matches(labels: Iterable[str], terms: Iterable[str]) -> bool:
    return not failed_terms(labels, terms)


def selector_text(terms: Sequence[str]) -> str:
    """`model=A100-80GB, arch=ampere` as a refusal names it."""
    return ", ".join(terms)
