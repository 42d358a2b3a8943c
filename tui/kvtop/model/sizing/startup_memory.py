"""What each platform takes before the weights: the card's total less the free memory SGLang
measures at `Load weight begin` (the CUDA or HIP context, NCCL's / HCCL's buffers, what the
driver or, on unified memory, the OS holds).

Each row is read from real boots' logs against the GPU's total, names them (the project's
fixtures by path; public boots by what they ran on, with where each was found in docs/plan.md's
table), and carries a spread: how far the evidence strays from the row's figure, so a plan before launch can say how
sure its free memory is. A row with one boot behind it takes MIN_SPREAD_GIB, never 0: one boot
shows no spread, it does not show there is none. Pure data and lookup: nothing is read here.
"""

from __future__ import annotations

from dataclasses import dataclass

# One boot alone cannot show how far boots vary: such a row still admits this much.
MIN_SPREAD_GIB = 0.5


@dataclass(frozen=True, slots=True)
class Boot:
    """One logged boot: the free memory SGLang measured before the weights, against the total."""

    where: str  # the fixture or public thread it comes from
    gpu: str  # the card, "inferred" where the thread does not name it
    ranks: int  # TP × PP of that boot
    total_gib: float  # the card's total memory
    pre_load_free_gib: float  # `Load weight begin` avail mem (or weights end: avail + usage)

    @property
    def taken_gib(self) -> float:
        return self.total_gib - self.pre_load_free_gib


@dataclass(frozen=True, slots=True)
class StartupRow:
    """What one platform takes before the weights, per GPU, and how sure that is."""

    platform: str  # the row's key in JSON: "cuda", "cuda-tp2-4", "cuda-tp8", "rocm", ...
    words: str  # the row as the plan names it
    gib: float
    spread_gib: float
    evidence: tuple[Boot, ...]

    def evidence_words(self) -> str:
        return "; ".join(
            f"{b.where}: {b.pre_load_free_gib:.2f} of {b.total_gib:.2f} GiB free "
            f"({b.gpu}, {b.ranks} rank{'s' if b.ranks > 1 else ''})"
            for b in self.evidence
        )


_SGLANG_CI = "an SGLang CI log kept in a public repository"

CUDA_ONE = StartupRow(
    "cuda",
    "CUDA, one GPU",
    1.2,
    0.4,
    (
        Boot(_SGLANG_CI + ", single GPU", "80 GB card, inferred H100 (79.65 GiB)", 1, 79.65, 78.81),
        Boot(
            _SGLANG_CI + ", qwen2.5-0.5b", "80 GB card, inferred H100 (79.65 GiB)", 1, 79.65, 78.43
        ),
        Boot(
            _SGLANG_CI + ", fp8 checkpoint",
            "80 GB card, inferred H100 (79.65 GiB)",
            1,
            79.65,
            78.48,
        ),
        Boot(
            "tests/fixtures/sglang-logs/20-issue6291-v046-single-gpu-qwen3-full.log "
            "(weights end: 63.49 avail + 15.35 usage)",
            "80 GB card, not named: an H100's 79.65 GiB (an A100's 80.00 would take 1.16)",
            1,
            79.65,
            78.84,
        ),
    ),
)
CUDA_TP_SMALL = StartupRow(
    "cuda-tp2-4",
    "CUDA with TP 2 to 4 (NCCL's buffers)",
    1.2,
    0.4,
    (
        Boot(_SGLANG_CI + ", TP 2", "80 GB card, inferred H100 (79.65 GiB)", 2, 79.65, 78.77),
        Boot(
            "a public sm_120 boot with TP 4",
            "96 GB Blackwell, inferred RTX PRO 6000 (95.59 GiB)",
            4,
            95.59,
            94.01,
        ),
        Boot(
            "tests/fixtures/real-boots/qwq-32b-4xl4-tp4-v043/boot.log (Load weight begin)",
            "NVIDIA L4 (22.49 GiB)",
            4,
            22.49,
            21.63,
        ),
    ),
)
CUDA_TP_LARGE = StartupRow(
    "cuda-tp8",
    "CUDA with TP 8 or more (NCCL's buffers)",
    2.4,
    0.75,
    (
        Boot(
            "tests/fixtures/sglang-logs/17-inferencex2128-dsv4-pro-h200-tp8-mfs-valueerror.log "
            "(weights end: 12.25 avail + 125.65 usage)",
            "H200 (140.40 GiB)",
            8,
            140.40,
            137.90,
        ),
        Boot(
            "tui/kvtop/data/kimi-k25-tp8-eagle3-hicache-0.5.8.log (the least rank)",
            "RTX PRO 6000 Blackwell (95.59 GiB)",
            8,
            95.59,
            93.17,
        ),
        Boot(
            "a public 141 GB Hopper boot with TP 8 (the least rank)",
            "141 GB Hopper, inferred H200 (140.40 GiB)",
            8,
            140.40,
            137.29,
        ),
        Boot(
            "a DeepSeek-V4-Flash-Base TP 8 log in a public repository's memory notes",
            "96 GB card, inferred (95.59 GiB)",
            8,
            95.59,
            93.56,
        ),
    ),
)
ROCM_ONE = StartupRow(
    "rocm",
    "ROCm/HIP, one GPU",
    0.8,
    MIN_SPREAD_GIB,
    (
        Boot(
            "a public MI355X boot (weights end: 230.20 avail + 56.98 usage)",
            "288 GB Instinct, inferred MI355X (288 GiB)",
            1,
            288.0,
            287.18,
        ),
    ),
)
ROCM_TP_SMALL = StartupRow(
    "rocm-tp2-4",
    "ROCm/HIP with TP 2 to 4 (RCCL's buffers)",
    0.51,
    MIN_SPREAD_GIB,
    (
        Boot(
            "tests/fixtures/real-boots/qwen3.5-27b-awq-r9700-tp2-fp8kv/boot.log "
            "(Load weight begin: 31.49 avail)",
            "AMD Radeon AI PRO R9700, the card's nominal 32 GiB (ROCm's own total not printed)",
            2,
            32.0,
            31.49,
        ),
    ),
)
ROCM_TP = StartupRow(
    "rocm-tp",
    "ROCm/HIP with TP 8 or more (RCCL's buffers)",
    5.15,
    1.5,
    (
        Boot(
            "tests/fixtures/sglang-logs/33-issue7691-rocm-v048-negative-profiled-capacity.log "
            "(weights end: 21.73 avail + 166.59 usage)",
            "192 GB Instinct, inferred MI300X (192 GiB)",
            8,
            192.0,
            188.32,
        ),
        Boot(
            "a public Mi308 TP 8 boot (weights end: 103.71 avail + 81.66 usage)",
            "AMD Mi308 (192 GiB)",
            8,
            192.0,
            185.37,
        ),
    ),
)
UNIFIED = StartupRow(
    "unified",
    "unified memory (GB10): what the OS leaves",
    19.9,
    MIN_SPREAD_GIB,
    (
        Boot(
            "a public two-node DGX Spark deployment (CUDA free at boot, many "
            "boots: 101.3 to 102.2)",
            "DGX Spark GB10 (121.69 GiB as CUDA sees it)",
            2,
            121.69,
            101.75,
        ),
    ),
)
ASCEND = StartupRow(
    "ascend",
    "Ascend NPU (torch_npu context, HCCL's buffers)",
    3.5,
    MIN_SPREAD_GIB,
    (
        Boot(
            "tests/fixtures/sglang-logs/18-npu-dsv4-flash-tp4-pool-sizes.log "
            "(the least rank's weights end: 19.73 avail + 40.75 usage)",
            "Ascend NPU, 64 GiB HBM",
            4,
            64.0,
            60.48,
        ),
    ),
)
ROWS = (
    CUDA_ONE,
    CUDA_TP_SMALL,
    CUDA_TP_LARGE,
    ROCM_ONE,
    ROCM_TP_SMALL,
    ROCM_TP,
    UNIFIED,
    ASCEND,
)


def platform_of(gpu_name: str | None, device: str | None = None) -> str:
    """The platform a GPU's name (NVML's, or --gpu-name) or SGLang's --device says: "cuda",
    "rocm", "unified" or "ascend". No name: CUDA, the common case."""
    if device and device.lower() == "npu":
        return "ascend"
    upper = (gpu_name or "").upper()
    if "GB10" in upper or "DGX SPARK" in upper:
        return "unified"
    if "ASCEND" in upper or "910B" in upper or "NPU" in upper:
        return "ascend"
    if (
        "AMD" in upper
        or "INSTINCT" in upper
        or "RADEON" in upper
        or upper.startswith("MI")
        or upper.startswith("RX ")
    ):
        return "rocm"
    return "cuda"


def row_for(gpu_name: str | None, ranks: int, device: str | None = None) -> StartupRow:
    """The table's row for this GPU and TP × PP."""
    platform = platform_of(gpu_name, device)
    if platform == "unified":
        return UNIFIED
    if platform == "ascend":
        return ASCEND
    if platform == "rocm":
        if ranks <= 1:
            return ROCM_ONE
        return ROCM_TP_SMALL if ranks <= 4 else ROCM_TP
    if ranks <= 1:
        return CUDA_ONE
    return CUDA_TP_SMALL if ranks <= 4 else CUDA_TP_LARGE


def measured_now(row: StartupRow) -> StartupRow:
    """Free memory NVML measured on this host now: nothing is subtracted, but SGLang's own
    context is made after the reading, so up to the platform's figure may still come off."""
    return StartupRow(
        "measured",
        f"free memory measured now (NVML); SGLang's own context may still take up to "
        f"{row.gib:g} GiB ({row.words})",
        0.0,
        row.gib,
        row.evidence,
    )
