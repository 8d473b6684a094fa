"""nicrig's in-process libsigrokdecode: runs the protocol decoders of ``decoders/`` without sigrok.

This module *is* the ``sigrokdecode`` module the decoders import (``import
sigrokdecode as srd``): it is registered under that name while a decoder
loads. It reproduces the API of libsigrokdecode 0.5.3 (decoder API version
3) as sigrok-cli 0.7.2 drives it:

- the ``Decoder`` base class with ``register()``, ``put()``, ``has_channel()``
  and ``wait()``; ``wait()`` is the C matcher of ``_wait.c`` (its semantics
  are listed there), bound to the bottom decoder of a stack;
- instance names ``<id>-<n>``, options typed by their defaults, the calls in
  sigrok-cli's order: ``__init__``, ``start()`` down the stack, then
  ``metadata(SRD_CONF_SAMPLERATE, rate)`` down the stack, then ``decode()``;
- OUTPUT_PYTHON feeding the next decoder's ``decode(ss, es, data)`` at once;
  OUTPUT_ANN, OUTPUT_BINARY and OUTPUT_META handed to the caller's callbacks
  (annotations and meta are converted only when someone listens, as in
  libsigrokdecode);
- the end of the data failing ``wait()`` with a ``SystemError``, which a
  decoder may catch to flush what it holds (outputs put then still count).

Where libsigrokdecode only logs a decoder's mistake (a malformed ``put()``,
an exception in a stacked decoder), this runtime stops with
:class:`DecoderFailed`: nicrig treats both as a failed decode either way.
"""

from __future__ import annotations

import importlib.util
import itertools
import sys
import traceback
import types
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nicrig.decoders import DECODERS_DIR

OUTPUT_ANN, OUTPUT_PYTHON, OUTPUT_BINARY, OUTPUT_META = 0, 1, 2, 3
SRD_CONF_SAMPLERATE = 10000

Annotation = Callable[[str, int, int, int, list[str]], None]    # inst, ss, es, class, texts
Binary = Callable[[str, int, int, int, bytes], None]            # inst, ss, es, class, data
Meta = Callable[[str, int, int, str, Any], None]                # inst, ss, es, meta name, value


class SrdException(Exception):
    """What a decoder may raise to report a problem (libsigrokdecode's name)."""


class DecoderFailed(Exception):
    """A decoder raised, or used the API wrongly; the message says which instance and where."""


class _Failure(BaseException):
    """Raised inside a decoder's call chain; a BaseException so that a decoder's
    ``except Exception`` cannot swallow it. Leaves :meth:`Session.run` as DecoderFailed."""


class _Stuck(_Failure):
    """A decoder swallowed the end of the data and kept waiting."""


class Decoder:
    """Base class of every protocol decoder (``srd.Decoder``)."""

    samplenum = 0
    matched = None
    options: dict[str, Any]

    def register(self, output_type: int, proto_id: str | None = None,
                 meta: tuple[type, str, str] | None = None) -> int:
        if output_type not in (OUTPUT_ANN, OUTPUT_PYTHON, OUTPUT_BINARY, OUTPUT_META):
            raise TypeError(f"register(): unknown output type {output_type!r}")
        if output_type == OUTPUT_META and (not meta or meta[0] not in (int, float)):
            raise TypeError("register(OUTPUT_META) needs meta=(int or float, name, description)")
        handlers = self._srd.handlers
        handlers.append(self._srd.handler(output_type, meta))
        return len(handlers) - 1

    def put(self, ss: int, es: int, output_id: int, data: Any) -> None:
        try:
            handler = self._srd.handlers[output_id]
        except (IndexError, TypeError):
            raise _Failure(f"{self._srd.name}: put() to output {output_id!r}, which was never registered") from None
        if ss < 0 or es < 0:
            raise _Failure(f"{self._srd.name}: put() with a negative sample number ({ss}, {es})")
        handler(ss, es, data)

    def has_channel(self, index: int) -> bool:
        bits = self._srd.bits
        if not 0 <= index < len(bits):
            raise Exception("invalid channel")
        return bits[index] >= 0


def _checked_annotation(inst: _Instance, data: Any) -> tuple[int, list[str]]:
    ok = (isinstance(data, list) and len(data) == 2 and type(data[0]) is int and isinstance(data[1], list)
          and all(isinstance(t, str) for t in data[1]))
    if not ok or not 0 <= data[0] < inst.num_annotations:
        raise _Failure(f"{inst.name}: malformed annotation {data!r:.200} (want [class, [texts]])")
    return data[0], data[1]


def _checked_binary(inst: _Instance, data: Any) -> tuple[int, bytes]:
    ok = (isinstance(data, list) and len(data) == 2 and type(data[0]) is int and isinstance(data[1], bytes)
          and len(data[1]) > 0)
    if not ok or not 0 <= data[0] < inst.num_binary:
        raise _Failure(f"{inst.name}: malformed binary output {data!r:.200} (want [class, non-empty bytes])")
    return data[0], data[1]


# -- loading decoders --------------------------------------------------------------------------------

_CLASSES: dict[tuple[Path, str], type] = {}


def load(decoder_id: str, decoders_dir: Path = DECODERS_DIR) -> type:
    """The ``Decoder`` class of the decoder folder ``decoders_dir/<id>``, imported against this module."""
    key = (decoders_dir, decoder_id)
    if key not in _CLASSES:
        folder = decoders_dir / decoder_id
        if not (folder / "pd.py").is_file():
            raise DecoderFailed(f"no decoder {decoder_id!r} in {decoders_dir}")
        cls = import_decoder(folder, sys.modules[__name__]).Decoder
        _check_class(decoder_id, cls)
        _CLASSES[key] = cls
    return _CLASSES[key]


def _check_class(decoder_id: str, cls: type) -> None:
    """What libsigrokdecode 0.5.3 checks before it loads a decoder (it refuses the same ones)."""
    if getattr(cls, "api_version", None) != 3:
        raise DecoderFailed(f"decoder {decoder_id}: api_version {getattr(cls, 'api_version', None)!r} "
                            "is not supported (libsigrokdecode 0.5.3 runs version 3)")
    for method in ("reset", "start", "decode"):
        if not callable(getattr(cls, method, None)):
            raise DecoderFailed(f"decoder {decoder_id} has no {method}() method (libsigrokdecode refuses it)")
    for attr in ("id", "name", "longname", "desc", "license", "inputs", "outputs"):
        if not hasattr(cls, attr):
            raise DecoderFailed(f"decoder {decoder_id} lacks the {attr!r} attribute")


def import_decoder(folder: Path, srd: types.ModuleType) -> types.ModuleType:
    """Import a decoder package with ``srd`` standing for ``sigrokdecode``; the package stays private."""
    saved = sys.modules.get("sigrokdecode")
    sys.modules["sigrokdecode"] = srd
    name = f"_nicrig_pd_{folder.name}_{abs(hash(str(folder)))}"
    try:
        spec = importlib.util.spec_from_file_location(name, folder / "__init__.py",
                                                      submodule_search_locations=[str(folder)])
        assert spec and spec.loader
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
        return module
    finally:
        if saved is None:
            sys.modules.pop("sigrokdecode", None)
        else:
            sys.modules["sigrokdecode"] = saved
        for key in [k for k in sys.modules if k == name or k.startswith(name + ".")]:
            del sys.modules[key]


def typed_option(decoder_id: str, key: str, value: Any, default: Any) -> Any:
    """An option value as sigrok-cli passes it: converted to the type of the option's default."""
    try:
        if isinstance(default, bool) or not isinstance(default, (int, float)):
            return str(value)
        if isinstance(default, int):
            return int(value)
        return float(value)
    except ValueError:
        raise DecoderFailed(f"{decoder_id}: option {key}={value!r} is not a valid "
                            f"{type(default).__name__}") from None


# -- a session: one stack over one stream of samples ---------------------------------------------------

@dataclass
class Call:
    """One decoder of a stack: its id, channel id -> bit of the sample row, and option values."""

    id: str
    channels: Mapping[str, int] = field(default_factory=dict)
    options: Mapping[str, Any] = field(default_factory=dict)


def channel_bits(cls: type, call: Call) -> list[int]:
    """Bit of the sample row per channel of decoder ``cls`` (required, then optional), -1 where not mapped."""
    ids = [c["id"] for c in getattr(cls, "channels", ())]
    optional = [c["id"] for c in getattr(cls, "optional_channels", ())]
    unknown = set(call.channels) - set(ids) - set(optional)
    if unknown:
        raise DecoderFailed(f"{call.id} has no channel(s) {', '.join(sorted(unknown))}")
    missing = [c for c in ids if c not in call.channels]
    if missing:
        raise DecoderFailed(f"{call.id}: required channel(s) {', '.join(missing)} not mapped")
    return [int(call.channels[c]) if c in call.channels else -1 for c in ids + optional]


def decoder_options(cls: type, call: Call) -> dict[str, Any]:
    """The options decoder ``cls`` sees: its defaults, overridden by ``call``'s values typed as sigrok-cli does."""
    defaults = {o["id"]: o.get("default") for o in getattr(cls, "options", ())}
    unknown = set(call.options) - set(defaults)
    if unknown:
        raise DecoderFailed(f"{call.id} has no option(s) {', '.join(sorted(unknown))}")
    opts = dict(defaults)
    for key, value in call.options.items():
        opts[key] = typed_option(call.id, key, value, defaults[key])
    return opts


class _Instance:
    """The engine's side of one decoder instance (kept off the decoder object's own namespace)."""

    def __init__(self, session: Session, name: str, decoder: Decoder, bits: list[int]):
        self.session, self.name, self.decoder, self.bits = session, name, decoder, bits
        self.handlers: list[Callable[[int, int, Any], None]] = []
        self.next: list[Decoder] = []
        cls = type(decoder)
        self.num_annotations = len(getattr(cls, "annotations", ()))
        self.num_binary = len(getattr(cls, "binary", ()))

    def handler(self, output_type: int, meta: tuple[type, str, str] | None) -> Callable[[int, int, Any], None]:
        """What put() does for one registered output; outputs nobody listens to cost nothing."""
        session, name = self.session, self.name

        def ignore(ss: int, es: int, data: Any) -> None:
            pass

        def python(ss: int, es: int, data: Any) -> None:
            for upper in self.next:
                upper._srd.feed(ss, es, data)

        def binary(ss: int, es: int, data: Any) -> None:
            cls, blob = _checked_binary(self, data)
            session.on_binary(name, ss, es, cls, blob)  # type: ignore[misc]

        def annotation(ss: int, es: int, data: Any) -> None:
            cls, texts = _checked_annotation(self, data)
            session.on_annotation(name, ss, es, cls, texts)  # type: ignore[misc]

        def metadata(ss: int, es: int, data: Any) -> None:
            assert meta is not None
            if type(data) is not meta[0]:
                raise _Failure(f"{name}: meta output {meta[1]!r} registered as {meta[0].__name__}, "
                               f"got {type(data).__name__}")
            session.on_meta(name, ss, es, meta[1], data)  # type: ignore[misc]

        if output_type == OUTPUT_PYTHON:
            return python
        listener, fn = {OUTPUT_BINARY: (session.on_binary, binary), OUTPUT_ANN: (session.on_annotation, annotation),
                        OUTPUT_META: (session.on_meta, metadata)}[output_type]
        return ignore if listener is None else fn

    def feed(self, ss: int, es: int, data: Any) -> None:
        try:
            self.decoder.decode(ss, es, data)  # type: ignore[attr-defined]
        except Exception as exc:
            raise _Failure(f"{self.name} raised in decode({ss}, {es}, ...): "
                                f"{_last_frames(exc)}") from exc


def _last_frames(exc: BaseException) -> str:
    frames = traceback.extract_tb(exc.__traceback__)[-2:]
    where = "; ".join(f"{Path(f.filename).name}:{f.lineno} in {f.name}" for f in frames)
    return f"{type(exc).__name__}: {exc} ({where})"


class Session:
    """Run one decoder stack, bottom (logic) decoder first, over packed sample blocks.

    ``blocks`` yields ``(n, unitsize)`` uint8 arrays (or bytes) of consecutive
    samples starting at sample ``start``; sample numbers are absolute, so a
    span of a long source decodes with the numbers of the whole source.
    """

    def __init__(self, calls: Sequence[Call], *, samplerate: int,
                 on_annotation: Annotation | None = None, on_binary: Binary | None = None,
                 on_meta: Meta | None = None, decoders_dir: Path = DECODERS_DIR):
        if not calls:
            raise DecoderFailed("an empty decoder stack")
        self.on_annotation, self.on_binary, self.on_meta = on_annotation, on_binary, on_meta
        self.samplerate = samplerate
        counts: dict[str, int] = {}
        self.instances: list[_Instance] = []
        for i, call in enumerate(calls):
            cls = load(call.id, decoders_dir)
            counts[call.id] = counts.get(call.id, 0) + 1
            decoder = cls()
            inst = _Instance(self, f"{call.id}-{counts[call.id]}", decoder, channel_bits(cls, call) if i == 0 else [])
            decoder._srd = inst  # type: ignore[attr-defined]
            decoder.options = decoder_options(cls, call)
            if self.instances:
                self.instances[-1].next.append(decoder)
            self.instances.append(inst)

    def run(self, blocks: Iterator[Any], unitsize: int, start: int = 0) -> None:
        """Decode until the blocks end (or the bottom decoder returns); raise DecoderFailed on errors."""
        from nicrig.decoders._wait import Matcher

        first = next(blocks, None)
        for inst in self.instances:
            start_fn = getattr(inst.decoder, "start", None)
            if start_fn is not None:
                self._call(inst, start_fn)
        for inst in self.instances:
            meta_fn = getattr(inst.decoder, "metadata", None)
            if meta_fn is not None:
                self._call(inst, meta_fn, SRD_CONF_SAMPLERATE, self.samplerate)
        if first is None:
            return  # sigrok-cli never calls decode() without samples
        rest = itertools.chain([first], blocks)
        bottom = self.instances[0]
        matcher = Matcher(bottom.decoder, bottom.bits, unitsize, lambda: next(rest, None),
                          SystemError, _Stuck, start)
        bottom.decoder.wait = matcher.wait  # type: ignore[attr-defined]
        try:
            bottom.decoder.decode()  # type: ignore[attr-defined]
        except SystemError as exc:
            if not matcher.at_eof:
                raise DecoderFailed(f"{bottom.name} raised {_last_frames(exc)}") from exc
        except _Stuck as exc:
            raise DecoderFailed(f"{bottom.name}: {exc}") from None
        except _Failure as exc:
            raise DecoderFailed(str(exc)) from None
        except Exception as exc:
            raise DecoderFailed(f"{bottom.name} raised at sample {matcher.pos}: {_last_frames(exc)}") from exc

    @staticmethod
    def _call(inst: _Instance, fn: Callable[..., Any], *args: Any) -> None:
        try:
            fn(*args)
        except _Failure as exc:
            raise DecoderFailed(str(exc)) from None
        except Exception as exc:
            raise DecoderFailed(f"{inst.name}: {fn.__name__}() raised {_last_frames(exc)}") from exc
