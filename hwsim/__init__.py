"""hwsim: a simulated AES-CTR accelerator that is also a real aescore backend.

>>> import aescore, hwsim
>>> hwsim.register()
>>> backend = aescore.get_backend("hwsim")        # configured from KEYSTREAM_HWSIM_* (see from_env)
>>> ek = backend.expand_key(bytes(16))
>>> backend.ctr_xor(ek, bytes(16), b"hello").hex()  # the same bytes as every other backend
'0e8c27b880'
>>> backend.snapshot().preset
'proposal'

The model (:mod:`hwsim.device`) runs on a discrete-event engine (:mod:`hwsim.engine`) with parameters from
:mod:`hwsim.params`; :mod:`hwsim.analysis` holds the closed forms it is validated against and
``python -m hwsim.report`` compares it with the software backends measured on this machine.
"""

from __future__ import annotations

import os

from .analysis import amdahl, crossover_formula, crossover_size, throughput_bound, zero_load_job
from .device import STAGES, Device, DeviceBusyError, Job, JobSpec
from .driver import DeviceDriver, HwsimBackend, HwsimExpandedKey
from .engine import Simulator
from .metrics import HwsimSnapshot, prometheus_samples
from .params import PRESETS, DeviceParams, get_preset, preset_names
from .resources import KeyRef

__all__ = [
    "PRESETS",
    "STAGES",
    "Device",
    "DeviceBusyError",
    "DeviceDriver",
    "DeviceParams",
    "HwsimBackend",
    "HwsimExpandedKey",
    "HwsimSnapshot",
    "Job",
    "JobSpec",
    "KeyRef",
    "Simulator",
    "amdahl",
    "crossover_formula",
    "crossover_size",
    "from_env",
    "get_preset",
    "preset_names",
    "prometheus_samples",
    "register",
    "throughput_bound",
    "zero_load_job",
]

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"", "0", "false", "no", "off"}


def from_env() -> HwsimBackend:
    """Build the backend from the environment.

    ``KEYSTREAM_HWSIM_PRESET`` (default ``proposal``), ``KEYSTREAM_HWSIM_REALTIME`` (``0``/``1``),
    ``KEYSTREAM_HWSIM_REALTIME_SCALE`` (float, default 1.0), ``KEYSTREAM_HWSIM_OFFLOAD_THRESHOLD`` (bytes or
    ``auto``; default 0: everything to the device), ``KEYSTREAM_HWSIM_ON_BUSY`` (``wait``/``error``).

    Raises:
        ValueError: a variable has a value outside those (the message names it and the allowed values).
    """
    preset = os.environ.get("KEYSTREAM_HWSIM_PRESET", "").strip() or "proposal"
    realtime_text = os.environ.get("KEYSTREAM_HWSIM_REALTIME", "").strip().lower()
    if realtime_text not in _TRUE | _FALSE:
        raise ValueError(f"KEYSTREAM_HWSIM_REALTIME must be 0 or 1, got {realtime_text!r}")
    scale_text = os.environ.get("KEYSTREAM_HWSIM_REALTIME_SCALE", "").strip() or "1.0"
    try:
        scale = float(scale_text)
    except ValueError:
        raise ValueError(f"KEYSTREAM_HWSIM_REALTIME_SCALE must be a number > 0, got {scale_text!r}") from None
    threshold_text = os.environ.get("KEYSTREAM_HWSIM_OFFLOAD_THRESHOLD", "").strip().lower()
    threshold: int | str | None
    if threshold_text in ("", "0"):
        threshold = None
    elif threshold_text == "auto":
        threshold = "auto"
    else:
        try:
            threshold = int(threshold_text)
        except ValueError:
            raise ValueError(
                f"KEYSTREAM_HWSIM_OFFLOAD_THRESHOLD must be a byte count or 'auto', got {threshold_text!r}"
            ) from None
    on_busy = os.environ.get("KEYSTREAM_HWSIM_ON_BUSY", "").strip() or "wait"
    if on_busy not in ("wait", "error"):
        raise ValueError(f"KEYSTREAM_HWSIM_ON_BUSY must be 'wait' or 'error', got {on_busy!r}")
    return HwsimBackend(
        preset,
        realtime=realtime_text in _TRUE,
        realtime_scale=scale,
        offload_threshold=threshold,  # type: ignore[arg-type]
        on_busy=on_busy,  # type: ignore[arg-type]
    )


def register() -> None:
    """Register ``hwsim`` with aescore (the ``aescore.backends`` entry point calls this).

    The backend is built lazily by :func:`from_env` on the first ``aescore.get_backend("hwsim")``.
    """
    import aescore

    aescore.register_backend("hwsim", from_env)
