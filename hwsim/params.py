"""Device parameters, their documented defaults, and the named presets with the public source of each number.

Every preset carries a ``sources`` map from field name to where its number comes from. Numbers marked
"assumption" are ours, chosen to be plausible for the device class; everything else is quoted from the source
named. The calibration notes (``/work/shared/notes/hwsim-calibration.md``) collect the same figures.

Units: times in integer nanoseconds, bandwidth in bytes per second, sizes in bytes, clocks in hertz.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

__all__ = ["PRESETS", "DeviceParams", "NotifyMode", "get_preset", "preset_names"]

NotifyMode = Literal["interrupt", "poll"]

#: Key sizes in bytes, in the order of the per-key-size tuples below (AES-128, AES-192, AES-256).
_KEY_SIZES = (16, 24, 32)


@dataclass(frozen=True)
class DeviceParams:
    """Everything the device model needs. Defaults are those of the ``proposal`` preset.

    Attributes:
        name: preset name.
        description: one line about the device class.
        clock_hz: core clock; one cycle lasts ``1e9 / clock_hz`` ns (use a clock whose period is a whole
            number of nanoseconds, or cycle times are rounded up per chunk).
        cores: AES engines; each serves one job at a time from descriptor fetch to completion write.
        core_latency_cycles: cycles from a block entering a core to its keystream, AES-128/192/256.
        issue_interval_cycles: cycles between two blocks entering one core (II); iterative core: II = latency,
            fully pipelined core: II = 1. The counter unit and XOR merge overlap with the core.
        key_expansion_cycles: cycles to expand a key after it is loaded into a slot, AES-128/192/256.
        key_slots: on-chip key-schedule slots (LRU; an evicted slot is zeroised).
        key_load_bytes: bytes moved to load one key into a slot.
        ring_depth: submission-ring entries; a job holds its entry from submission until the host consumes
            its completion (as QAT's driver counts in-flight requests against the ring size), so a full ring
            answers busy.
        descriptor_bytes: size of one job descriptor, fetched by DMA.
        completion_bytes: size of one completion record, written by DMA.
        doorbell_ns: from the host's doorbell write to the device seeing the new tail (one doorbell may
            cover a batch of descriptors).
        dma_setup_ns: fixed cost to program one DMA operation (descriptor fetch, key load, data in, data out,
            completion write are one operation each).
        dma_latency_ns: per-transfer latency after the transfer's bytes are on the wire.
        dma_bandwidth: raw bytes per second of the DMA engine; reads and writes share it.
        dma_burst_bytes: payload bytes per transfer; each transfer also costs ``dma_header_bytes``.
        dma_header_bytes: overhead bytes per transfer (e.g. a PCIe TLP header).
        dma_max_outstanding: transfers in flight at once across the whole device.
        engine_buffer_bytes: on-chip data buffer per core; a chunk holds its space from the read request
            until its write completes, which bounds read-ahead.
        notify_mode: ``"interrupt"`` (coalesced) or ``"poll"``.
        irq_coalesce_count: raise an interrupt once this many completions are pending...
        irq_coalesce_timer_ns: ...or this long after the first pending completion, whichever is first
            (0: interrupt on every completion).
        irq_latency_ns: from the interrupt to the driver handling the completions.
        poll_interval_ns: host poll period in ``"poll"`` mode (polls happen at multiples of it).
        poll_cost_ns: from a poll that finds a completion to the driver handling it.
        sources: field name -> public source of the number (or "assumption: why").
    """

    name: str = "proposal"
    description: str = "the design documents' on-chip block: pipelined core, one AES round per cycle"
    clock_hz: int = 1_000_000_000
    cores: int = 1
    core_latency_cycles: tuple[int, int, int] = (10, 12, 14)
    issue_interval_cycles: tuple[int, int, int] = (1, 1, 1)
    key_expansion_cycles: tuple[int, int, int] = (10, 12, 14)
    key_slots: int = 8
    key_load_bytes: int = 32
    ring_depth: int = 256
    descriptor_bytes: int = 64
    completion_bytes: int = 16
    doorbell_ns: int = 20
    dma_setup_ns: int = 234
    dma_latency_ns: int = 100
    dma_bandwidth: float = 16e9
    dma_burst_bytes: int = 64
    dma_header_bytes: int = 0
    dma_max_outstanding: int = 16
    engine_buffer_bytes: int = 16384
    notify_mode: NotifyMode = "interrupt"
    irq_coalesce_count: int = 1
    irq_coalesce_timer_ns: int = 0
    irq_latency_ns: int = 1500
    poll_interval_ns: int = 1000
    poll_cost_ns: int = 100
    sources: Mapping[str, str] = field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        positive = (
            "clock_hz",
            "cores",
            "key_slots",
            "ring_depth",
            "descriptor_bytes",
            "completion_bytes",
            "dma_burst_bytes",
            "dma_max_outstanding",
            "irq_coalesce_count",
            "poll_interval_ns",
        )
        for name in positive:
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}")
        non_negative = (
            "key_load_bytes",
            "doorbell_ns",
            "dma_setup_ns",
            "dma_latency_ns",
            "dma_header_bytes",
            "irq_coalesce_timer_ns",
            "irq_latency_ns",
            "poll_cost_ns",
        )
        for name in non_negative:
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        if self.dma_bandwidth <= 0:
            raise ValueError(f"dma_bandwidth must be > 0, got {self.dma_bandwidth}")
        if self.engine_buffer_bytes < self.dma_burst_bytes:
            raise ValueError("engine_buffer_bytes must hold at least one burst (dma_burst_bytes)")
        if self.notify_mode not in ("interrupt", "poll"):
            raise ValueError(f"notify_mode must be 'interrupt' or 'poll', got {self.notify_mode!r}")
        for name in ("core_latency_cycles", "issue_interval_cycles", "key_expansion_cycles"):
            values = getattr(self, name)
            if len(values) != 3 or any(v < 0 for v in values):
                raise ValueError(f"{name} must be three non-negative cycle counts (AES-128/192/256)")
        if any(v <= 0 for v in self.issue_interval_cycles) or any(v <= 0 for v in self.core_latency_cycles):
            raise ValueError("core_latency_cycles and issue_interval_cycles must be > 0")

    @staticmethod
    def key_index(key_size: int) -> int:
        """Index into the per-key-size tuples for a key of ``key_size`` bytes.

        Raises:
            ValueError: ``key_size`` is not 16, 24 or 32.
        """
        try:
            return _KEY_SIZES.index(key_size)
        except ValueError:
            raise ValueError(f"key_size must be 16, 24 or 32 bytes, got {key_size}") from None

    def cycles_to_ns(self, cycles: int) -> int:
        """Duration of ``cycles`` clock cycles in whole nanoseconds, rounded up."""
        return -((-cycles * 1_000_000_000) // self.clock_hz)

    def core_rate(self, key_size: int = 16) -> float:
        """Bytes per second one core sustains on a long stream: ``clock * 16 / II``."""
        return self.clock_hz * 16 / self.issue_interval_cycles[self.key_index(key_size)]

    def dma_efficiency(self) -> float:
        """Payload share of the bytes on the wire for full bursts: ``burst / (burst + header)``."""
        return self.dma_burst_bytes / (self.dma_burst_bytes + self.dma_header_bytes)

    def replace(self, **changes: object) -> DeviceParams:
        """A copy with ``changes`` applied (validated again).

        Raises:
            TypeError: an unknown field name.
            ValueError: a value out of range.
        """
        return dataclasses.replace(self, **changes)  # type: ignore[arg-type]


_PCIE_BENCH = "pcie-bench/data lat_dma_sizes.txt (64 B DMA read, median 546 ns)"

_OPENTITAN_SOURCES: dict[str, str] = {
    "clock_hz": "lowRISC/opentitan hw/ip/aes README: 100 MHz (about 133 MB/s unmasked AES-128)",
    "cores": "lowRISC/opentitan hw/ip/aes: one iterative cipher core",
    "core_latency_cycles": "lowRISC/opentitan hw/ip/aes README, theory of operation: 12/14/16 cycles per "
    "block for AES-128/192/256 unmasked",
    "issue_interval_cycles": "iterative core (one round per cycle, no pipelining): II = latency",
    "key_expansion_cycles": "lowRISC/opentitan hw/ip/aes theory of operation: keys expanded on the fly, "
    "no extra cycles for encryption/CTR",
    "key_slots": "lowRISC/opentitan hw/ip/aes registers.md: one set of initial-key registers",
    "key_load_bytes": "lowRISC/opentitan hw/ip/aes registers.md: 16 KEY_SHARE writes (2 shares x 8 words)",
    "ring_depth": "no job ring: software drives one operation at a time over MMIO (programmers_guide)",
    "descriptor_bytes": "lowRISC/opentitan hw/ip/aes registers.md: CTRL 2 writes + IV 4 writes = 6 words",
    "completion_bytes": "lowRISC/opentitan hw/ip/aes programmers_guide: one STATUS read",
    "doorbell_ns": "one 32-bit TL-UL write at 100 MHz (assumption: 1 cycle)",
    "dma_setup_ns": "no DMA engine: the CPU moves data by MMIO, nothing to program",
    "dma_latency_ns": "assumption: 2 bus cycles per TL-UL access round trip",
    "dma_bandwidth": "assumption: one 32-bit TL-UL access per cycle at 100 MHz = 400 MB/s",
    "dma_burst_bytes": "lowRISC/opentitan hw/ip/aes registers.md: DATA_IN/DATA_OUT, 4 words per block",
    "dma_header_bytes": "MMIO: no per-transfer header",
    "dma_max_outstanding": "lowRISC/opentitan hw/ip/aes programmers_guide: up to 3 blocks in flight "
    "(input buffer, state, output buffer)",
    "engine_buffer_bytes": "lowRISC/opentitan hw/ip/aes programmers_guide: 3 blocks in flight",
    "notify_mode": "lowRISC/opentitan hw/ip/aes programmers_guide: status polling, no interrupts",
    "poll_interval_ns": "assumption: a STATUS read every 2 cycles",
    "poll_cost_ns": "assumption: one STATUS read, 2 cycles",
}

_PCIE_SOURCES: dict[str, str] = {
    "clock_hz": "assumption: 1 GHz crypto slices",
    "cores": "assumption: 8 engines (QAT GEN4 reaches about 12 GB/s per device with several slices)",
    "core_latency_cycles": "assumption: one AES round per cycle (10/12/14 rounds)",
    "issue_interval_cycles": "assumption: fully pipelined slice",
    "key_expansion_cycles": "assumption: one round key per cycle",
    "key_slots": "assumption: 64 cached session keys (QAT fetches the content descriptor holding the key)",
    "key_load_bytes": "AES-256 key, 32 bytes",
    "ring_depth": "linux drivers/crypto/intel/qat/qat_common/adf_gen4_config.c: 256 messages per ring",
    "descriptor_bytes": "linux drivers/crypto/intel/qat/qat_common/icp_qat_fw.h: 128-byte request",
    "completion_bytes": "linux drivers/crypto/intel/qat/qat_common/icp_qat_fw.h: 32-byte response",
    "doorbell_ns": "half of " + _PCIE_BENCH + ": a posted MMIO write reaching the card",
    "dma_setup_ns": "harvard-acc/ALADDIN gem5 HybridDatapath.py: DMA setup 234 ns",
    "dma_latency_ns": _PCIE_BENCH + ", minus the 88-byte serialisation time",
    "dma_bandwidth": "PCIe Gen3 x8 raw: 8 GT/s x 8 lanes x 128/130 = 7.88 GB/s; with TLP headers this "
    "gives about 57 Gb/s, near pcie-bench bw_dma_sz_sweep.txt (~55 Gb/s for >= 512 B)",
    "dma_burst_bytes": "PCIe max payload size 256 B (common setting)",
    "dma_header_bytes": "pcie-bench/pcie-model model/pcie.py: MRd/MWr TLP overhead 24 B",
    "dma_max_outstanding": "PCIe tag field without extended tags: 32 outstanding reads",
    "engine_buffer_bytes": "assumption: 32 KiB staging per engine",
    "notify_mode": "linux QAT driver: MSI-X interrupts with coalescing",
    "irq_coalesce_count": "assumption: 16 completions",
    "irq_coalesce_timer_ns": "linux drivers/crypto/intel/qat adf_transport_access_macros.h: 10239 ns",
    "irq_latency_ns": "assumption: 2 us from MSI-X to the completion handler",
    "poll_interval_ns": "intel/QAT_Engine README: 10 us poll interval (used in poll mode)",
    "poll_cost_ns": "assumption: one response-ring read, 200 ns",
}

_PROPOSAL_SOURCES: dict[str, str] = {
    "clock_hz": "assumption: 1 GHz SoC accelerator clock",
    "cores": "design documents: one pipelined AES round core",
    "core_latency_cycles": "design documents: one round per cycle (10/12/14 rounds)",
    "issue_interval_cycles": "design documents: pipelined core, one block per cycle",
    "key_expansion_cycles": "assumption: one round key per cycle",
    "key_slots": "design documents: on-chip key slots, loaded once per key (count is our assumption: 8)",
    "key_load_bytes": "AES-256 key, 32 bytes",
    "ring_depth": "assumption: 256 entries, as QAT (adf_gen4_config.c)",
    "descriptor_bytes": "design documents' descriptor {key slot, counter, src, dst, length, mode} in one "
    "64-byte cache line",
    "completion_bytes": "assumption: 16-byte completion record",
    "doorbell_ns": "assumption: on-chip posted write, 20 ns",
    "dma_setup_ns": "harvard-acc/ALADDIN gem5 HybridDatapath.py: DMA setup 234 ns",
    "dma_latency_ns": "assumption: 100 ns to DRAM through the SoC interconnect",
    "dma_bandwidth": "assumption: 128-bit interconnect at 1 GHz = 16 GB/s",
    "dma_burst_bytes": "harvard-acc/ALADDIN gem5 HybridDatapath.py: 64-byte DMA chunks",
    "dma_header_bytes": "on-chip bus: address/control on separate wires, no header bytes",
    "dma_max_outstanding": "harvard-acc/ALADDIN gem5 HybridDatapath.py: at most 16 outstanding DMA requests",
    "engine_buffer_bytes": "assumption: 16 KiB staging buffer",
    "notify_mode": "design documents: completion by interrupt or polling (interrupt chosen)",
    "irq_coalesce_count": "no coalescing",
    "irq_latency_ns": "assumption: 1.5 us from interrupt to handler",
}

_OPENTITAN = DeviceParams(
    name="opentitan",
    description="lowRISC OpenTitan AES: iterative core at 100 MHz driven by CPU MMIO (unmasked)",
    clock_hz=100_000_000,
    cores=1,
    core_latency_cycles=(12, 14, 16),
    issue_interval_cycles=(12, 14, 16),
    key_expansion_cycles=(0, 0, 0),
    key_slots=1,
    key_load_bytes=64,
    ring_depth=1,
    descriptor_bytes=24,
    completion_bytes=4,
    doorbell_ns=10,
    dma_setup_ns=0,
    dma_latency_ns=20,
    dma_bandwidth=400e6,
    dma_burst_bytes=16,
    dma_header_bytes=0,
    dma_max_outstanding=3,
    engine_buffer_bytes=48,
    notify_mode="poll",
    irq_coalesce_count=1,
    irq_coalesce_timer_ns=0,
    irq_latency_ns=0,
    poll_interval_ns=20,
    poll_cost_ns=20,
    sources=_OPENTITAN_SOURCES,
)

_OPENTITAN_MASKED = _OPENTITAN.replace(
    name="opentitan-masked",
    description="lowRISC OpenTitan AES with first-order masking (domain-oriented masking S-boxes)",
    core_latency_cycles=(56, 66, 72),
    issue_interval_cycles=(56, 66, 72),
    sources={
        **_OPENTITAN_SOURCES,
        "core_latency_cycles": "lowRISC/opentitan hw/ip/aes README: masked 56/66/72 cycles per block",
        "issue_interval_cycles": "iterative core: II = latency (masked)",
    },
)

_PCIE_OFFLOAD = DeviceParams(
    name="pcie-offload",
    description="a QAT-like PCIe card: 128 B requests, 32 B responses, rings of 256, coalesced MSI-X",
    clock_hz=1_000_000_000,
    cores=8,
    core_latency_cycles=(10, 12, 14),
    issue_interval_cycles=(1, 1, 1),
    key_expansion_cycles=(10, 12, 14),
    key_slots=64,
    key_load_bytes=32,
    ring_depth=256,
    descriptor_bytes=128,
    completion_bytes=32,
    doorbell_ns=273,
    dma_setup_ns=234,
    dma_latency_ns=533,
    dma_bandwidth=7.88e9,
    dma_burst_bytes=256,
    dma_header_bytes=24,
    dma_max_outstanding=32,
    engine_buffer_bytes=32768,
    notify_mode="interrupt",
    irq_coalesce_count=16,
    irq_coalesce_timer_ns=10239,
    irq_latency_ns=2000,
    poll_interval_ns=10_000,
    poll_cost_ns=200,
    sources=_PCIE_SOURCES,
)

_PROPOSAL = DeviceParams(sources=_PROPOSAL_SOURCES)

#: The named presets. ``proposal`` is the default for the service.
PRESETS: dict[str, DeviceParams] = {
    p.name: p for p in (_PROPOSAL, _PCIE_OFFLOAD, _OPENTITAN, _OPENTITAN_MASKED)
}


def preset_names() -> tuple[str, ...]:
    """The preset names, default first."""
    return tuple(PRESETS)


def get_preset(name: str) -> DeviceParams:
    """The preset called ``name``.

    Raises:
        ValueError: no preset has that name (the message lists the known ones).
    """
    try:
        return PRESETS[name]
    except KeyError:
        raise ValueError(f"unknown hwsim preset {name!r}; known presets: {', '.join(PRESETS)}") from None
