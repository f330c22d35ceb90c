"""Bounded readers of bytes the harness did not write itself (an archive's members, a protocol's YAML):
text, JSON, JSON lines and YAML, each refusing with one ParseError line that names where the bytes came
from and what was expected.

What a reader bounds, whatever the bytes:
  - text is UTF-8, strictly (no replacement characters);
  - a number is finite (no NaN or Infinity, in JSON or YAML) and an integer has at most MAX_INT_DIGITS
    digits (Python refuses beyond 4300, in a way no reader above would name);
  - YAML is read with PyYAML's safe loader, after its node graph is walked once: at most MAX_YAML_NODES
    nodes with every alias counted at its expanded size (a 400-byte file of nested aliases expands to
    millions), nesting at most MAX_DEPTH deep, no recursive alias;
  - a key twice in one mapping or object is a refusal (the readers keep the last one silently);
  - JSON nesting deeper than the interpreter's recursion limit is a refusal, not a RecursionError;
  - any value quoted in a message is cut to SNIP characters (snip), and every message is one line.
"""
from __future__ import annotations

import json
import math
from typing import Any

import yaml

from harness.core.errors import HarnessError

SNIP = 200             # characters of any quoted value in a message
MAX_INT_DIGITS = 64    # digits of an integer (a sha256 is a string; no count the harness writes comes close)
MAX_YAML_NODES = 100_000  # YAML nodes, aliases expanded (a protocol file has a few hundred)
MAX_DEPTH = 64         # YAML nesting
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml's parser where PyYAML has it: the same nodes, faster
_INT_TAG, _FLOAT_TAG = "tag:yaml.org,2002:int", "tag:yaml.org,2002:float"


class ParseError(HarnessError):
    """Bytes that do not read as what was expected; the message (one line) names where and what."""


def snip(value: Any, n: int = SNIP) -> str:
    """repr(value) on one line, cut to n characters ("...(+k chars)" says how much was cut). A value
    whose repr is huge is not built in full: strings and bytes are cut before repr."""
    if isinstance(value, (str, bytes)) and len(value) > n:
        head = repr(value[:n])
        return f"{head[:n]}...(+{len(value) - n} chars)"
    text = repr(value)
    return text if len(text) <= n else f"{text[:n]}...(+{len(text) - n} chars)"


def one_line(text: str, n: int = 1000) -> str:
    """`text` with its line breaks shown as " | ", cut to n characters."""
    flat = " | ".join(part for part in str(text).splitlines() if part.strip())
    return flat if len(flat) <= n else f"{flat[:n]}...(+{len(flat) - n} chars)"


def text(data: bytes, where: str) -> str:
    """`data` decoded as UTF-8; ParseError naming the first byte that is not."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ParseError(f"{where}: not UTF-8 text (byte 0x{data[e.start]:02x} at offset {e.start}); "
                         f"expected UTF-8") from None


# ---------------------------------------------------------------- JSON

def _int(digits: str) -> int:
    if len(digits.lstrip("-")) > MAX_INT_DIGITS:
        raise ValueError(f"an integer of {len(digits.lstrip('-'))} digits (at most {MAX_INT_DIGITS})")
    return int(digits)


def _float(literal: str) -> float:
    x = float(literal)
    if not math.isfinite(x):
        raise ValueError(f"the number {snip(literal, 40)} overflows to {x} (a finite number is expected)")
    return x


def _constant(name: str):
    raise ValueError(f"{name} (a finite number is expected)")


def _object(pairs: list) -> dict:
    out = dict(pairs)
    if len(out) != len(pairs):
        seen: set = set()
        twice = next(k for k, _ in pairs if k in seen or seen.add(k))
        raise ValueError(f"key {snip(twice, 60)} twice in one object")
    return out


def json_value(source: str, where: str) -> Any:
    """One JSON document; ParseError (one line) on bad JSON, NaN/Infinity, a huge integer, a key twice
    in one object or deep nesting."""
    try:
        return json.loads(source, parse_int=_int, parse_float=_float, parse_constant=_constant,
                          object_pairs_hook=_object)
    except RecursionError:
        raise ParseError(f"{where}: JSON nested too deep; expected a record the harness writes") from None
    except ValueError as e:
        raise ParseError(f"{where}: not valid JSON ({one_line(e, SNIP)}); expected finite numbers, integers of "
                         f"at most {MAX_INT_DIGITS} digits") from None


def json_lines(data: bytes, where: str) -> list:
    """Every line of a JSON-lines file (UTF-8) as a value; ParseError names where:line. A last line
    without its newline is read like the others (the record log's reader says it is incomplete)."""
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    return [json_value(text(raw, f"{where}:{i}"), f"{where}:{i}") for i, raw in enumerate(lines, start=1)]


# ---------------------------------------------------------------- YAML

def _check_graph(root: yaml.Node, where: str) -> None:
    """Walk a composed YAML graph once: count its nodes with every alias at its expanded size, and check
    nesting, recursion, integers' length and floats' finiteness. Iterative (no recursion limit)."""
    size: dict[int, int] = {}   # id(node) -> expanded node count, once known
    # a stack of (node, depth, children done); a node on the current path met again is a recursive alias
    on_path: set[int] = set()
    stack = [(root, 1, False)]
    while stack:
        node, depth, done = stack.pop()
        key = id(node)
        if done:
            kids = _children(node)
            size[key] = 1 + sum(size[id(k)] for k in kids)
            on_path.discard(key)
            if size[key] > MAX_YAML_NODES:
                raise ParseError(f"{where}: expands to more than {MAX_YAML_NODES} YAML nodes (aliases counted at "
                                 f"their expanded size); expected a protocol file")
            continue
        if key in size:
            continue
        if key in on_path:
            raise ParseError(f"{where}: a recursive YAML alias (line {node.start_mark.line + 1}); expected a tree")
        if depth > MAX_DEPTH:
            raise ParseError(f"{where}: YAML nested deeper than {MAX_DEPTH} (line {node.start_mark.line + 1})")
        if isinstance(node, yaml.ScalarNode):
            _check_scalar(node, where)
            size[key] = 1
            continue
        if isinstance(node, yaml.MappingNode):
            _check_keys(node, where)
        on_path.add(key)
        stack.append((node, depth, True))
        stack.extend((k, depth + 1, False) for k in _children(node))


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [x for pair in node.value for x in pair]
    return []


def _check_keys(node: yaml.MappingNode, where: str) -> None:
    """No key twice in one mapping (PyYAML keeps the last one silently)."""
    seen: set[tuple] = set()
    for k, _ in node.value:
        if isinstance(k, yaml.ScalarNode) and k.tag != "tag:yaml.org,2002:merge":
            if (k.tag, k.value) in seen:
                raise ParseError(f"{where}:{k.start_mark.line + 1}: key {snip(k.value, 60)} twice in one mapping; "
                                 f"expected each key once")
            seen.add((k.tag, k.value))


def _check_scalar(node: yaml.ScalarNode, where: str) -> None:
    line = node.start_mark.line + 1
    if node.tag == _INT_TAG:
        digits = node.value.replace("_", "").lstrip("+-")
        if len(digits) > MAX_INT_DIGITS:
            raise ParseError(f"{where}:{line}: an integer of {len(digits)} digits; expected at most {MAX_INT_DIGITS}")
    elif node.tag == _FLOAT_TAG:
        if len(node.value) > MAX_INT_DIGITS * 2:
            raise ParseError(f"{where}:{line}: a number of {len(node.value)} characters; expected a short number")
        lowered = node.value.lower()
        if "nan" in lowered or "inf" in lowered:
            raise ParseError(f"{where}:{line}: {snip(node.value, 40)} is not a finite number; expected a finite number")


def _mark(e: yaml.YAMLError) -> str:
    mark = getattr(e, "problem_mark", None)
    problem = getattr(e, "problem", None) or getattr(e, "context", None) or type(e).__name__
    at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
    return f"{one_line(problem, SNIP)}{at}"


def yaml_value(data: bytes | str, where: str) -> Any:
    """One YAML document (safe loader), bounded as the module says; ParseError (one line) otherwise."""
    source = text(data, where) if isinstance(data, bytes) else data
    loader = _LOADER(source)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _check_graph(node, where)
        value = loader.construct_document(node)
        if isinstance(value, float) and not math.isfinite(value):  # "1e999" resolves as a float: inf
            raise ParseError(f"{where}: not a finite number")
        _check_finite(value, where)
        return value
    except ParseError:
        raise
    except yaml.YAMLError as e:
        raise ParseError(f"{where}: not valid YAML ({_mark(e)})") from None
    except RecursionError:
        raise ParseError(f"{where}: YAML nested too deep; expected a protocol file") from None
    except (ValueError, TypeError, OverflowError) as e:  # a constructor's own (a date like 2020-99-99)
        raise ParseError(f"{where}: not valid YAML ({type(e).__name__}: {one_line(e, SNIP)})") from None
    finally:
        loader.dispose()


def _check_finite(value: Any, where: str) -> None:
    """No float in the constructed value overflowed to infinity (the graph check saw its size already)."""
    stack = [value]
    seen: set[int] = set()
    while stack:
        v = stack.pop()
        if isinstance(v, float) and not math.isfinite(v):
            raise ParseError(f"{where}: a number overflows to {v}; expected a finite number")
        if isinstance(v, (dict, list)) and id(v) not in seen:
            seen.add(id(v))
            stack.extend(v.values() if isinstance(v, dict) else v)
